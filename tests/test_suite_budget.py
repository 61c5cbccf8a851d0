"""The suite keeps its own budget: every process a test runs has a timeout that names the test and the
command, every test has a time limit (longer for what it needs), the budget report reads the tiers'
reports and the caches' disk, and the tiers' table in docs/contributing.md counts what the suite holds."""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests import _budget, _proc
from tests.conftest import DEFAULT_TIMEOUT, TIMEOUTS

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SUBPROCESS_CALLS = {"run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def untimed_calls(source: str, filename: str = "<source>") -> list[str]:
    """`file:line subprocess.NAME` for each call of the subprocess module's run helpers: a test runs its
    processes through tests/_proc.py, which always has a timeout."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                and node.func.attr in SUBPROCESS_CALLS):
            found.append(f"{filename}:{node.lineno} subprocess.{node.func.attr}")
    return found


def test_every_process_a_test_runs_goes_through_the_helper():
    found = [hit for path in sorted(TESTS.glob("*.py")) if path.name != "_proc.py"
             for hit in untimed_calls(path.read_text(), path.name)]
    assert not found, found
    # the check can fail
    assert untimed_calls("import subprocess\nsubprocess.run(['true'])\nsubprocess.check_output('x')\n") == [
        "<source>:2 subprocess.run", "<source>:3 subprocess.check_output"]


def test_a_process_past_its_timeout_fails_the_test_naming_it_and_the_command():
    with pytest.raises(pytest.fail.Exception) as failed:  # subprocess.run kills it before raising
        _proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    message = str(failed.value)
    assert "test_suite_budget.py::test_a_process_past_its_timeout_fails_the_test_naming_it" in message, message
    assert "time.sleep(30)" in message and "0.5 s timeout" in message, message
    assert _proc.run([sys.executable, "-c", "print('ok')"], capture_output=True, text=True).stdout == "ok\n"


def test_every_test_has_a_time_limit_and_heavy_ones_a_longer_one(request):
    """The default covers a hermetic test; a test needing a heavy input gets its need's limit."""
    assert 0 < DEFAULT_TIMEOUT < min(TIMEOUTS.values())
    for item in request.session.items:
        marker = item.get_closest_marker("timeout")
        needs = [t for m, t in TIMEOUTS.items() if item.get_closest_marker(m)]
        assert marker and marker.args[0] >= max(needs, default=DEFAULT_TIMEOUT) > 0, item.nodeid
    assert request.node.get_closest_marker("timeout").args == (DEFAULT_TIMEOUT,)  # hermetic: the default
    # any pytest run of this tree has the limit (pyproject.toml), and the example's verify, which reads the
    # same settings, installs what keeps them valid
    assert request.config.getini("timeout") == str(DEFAULT_TIMEOUT)
    from wheelci.config.project import read_settings

    assert "pytest-timeout" in read_settings(Path(__file__).resolve().parent.parent).test_requires


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="{failed}"
skipped="1" tests="3" time="{time}">{cases}</testsuite></testsuites>"""


def junit(path: Path, time_s: float, cases: dict[str, float], failed: int = 0) -> Path:
    body = "".join(f'<testcase classname="tests.test_x" name="{n}" time="{t}" />' for n, t in cases.items())
    path.write_text(JUNIT.format(failed=failed, time=time_s, cases=body))
    return path


def test_the_budget_report_gives_tiers_the_slowest_tests_and_disk(tmp_path, monkeypatch):
    fast = junit(tmp_path / "hermetic.xml", 75.5, {"test_a": 0.5, "test_b": 1.5, "test_c": 0.1})
    slow = junit(tmp_path / "heavy.xml", 1500.0, {f"test_{i}": float(i) for i in range(20)}, failed=1)
    tiers = [_budget.read_tier(fast), _budget.read_tier(slow)]
    assert [(t.name, t.tests, t.failed, round(t.seconds, 1)) for t in tiers] == [
        ("hermetic", 3, 0, 75.5), ("heavy", 3, 1, 1500.0)]
    blob = tmp_path / "cache" / "blob"
    blob.parent.mkdir()
    blob.write_bytes(os.urandom(1 << 20))
    os.link(blob, tmp_path / "cache" / "same-blob")  # a hard link is one file on disk
    used = _budget.disk_use({"the tool's cache": tmp_path / "cache", "absent": tmp_path / "nothing"})
    assert (1 << 20) <= used["the tool's cache"] < 2 << 20 and used["absent"] == 0
    text = _budget.report(tiers, used)
    assert "hermetic: 1 min 15 s, 3 tests (0 failed, 1 skipped)" in text, text
    assert "heavy: 25 min 00 s" in text and "all: 26 min 15 s" in text, text
    slowest = re.findall(r"^ +([\d.]+) s +tests\.test_x::(\w+)$", text, re.M)
    assert [name for _, name in slowest][:15] == [f"test_{i}" for i in range(19, 4, -1)], slowest
    assert len(slowest) == 23  # every test, where the run has fewer than the report lists
    # and where each tier's time goes, by module: what to split or share first
    assert re.search(r"^ +190\.0 s +20 tests +tests\.test_x$", text, re.M), text
    assert re.search(r"^ +0\.0 GB +the tool's cache$", text, re.M), text


def test_the_tiers_table_is_written_between_its_markers(tmp_path):
    doc = tmp_path / "contributing.md"
    doc.write_text(f"intro\n{_budget.BEGIN}\nold\n{_budget.END}\nrest\n")
    tiers = [_budget.Tier("hermetic", 130.0, 1000, 0, 3, []), _budget.Tier("heavy", 1800.0, 400, 0, 10, [])]
    _budget.write_docs(tiers, doc)
    assert doc.read_text() == (f"intro\n{_budget.BEGIN}\n| tier | tests | wall time |\n|---|---:|---:|\n"
                               f"| `hermetic` | 1000 | 2 min 10 s |\n| `heavy` | 400 | 30 min 00 s |\n"
                               f"{_budget.END}\nrest\n")


def documented_tiers() -> dict[str, int]:
    text = _budget.DOC.read_text()
    table = text.split(_budget.BEGIN, 1)[1].split(_budget.END, 1)[0]
    return {m[0]: int(m[1]) for m in re.findall(r"^\| `(\w+)` \| (\d+) \|", table, re.M)}


def collected(marker: str) -> int:
    r = _proc.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker],
                  capture_output=True, text=True, cwd=ROOT, timeout=120)
    found = re.search(r"^(\d+)/\d+ tests collected", r.stdout, re.M)
    assert found, r.stdout[-2000:] + r.stderr[-2000:]
    return int(found[1])


def test_the_documented_tiers_count_what_the_suite_holds():
    """docs/contributing.md's table is written by `python -m tests._budget --docs` from a real run; a test
    added or removed since makes it stale, and this fails until it is measured again."""
    assert documented_tiers() == {"hermetic": collected("not slow"), "heavy": collected("slow and not extended"),
                                  "extended": collected("extended")}


def test_keeping_under_the_budget_removes_test_inputs_largest_first_never_build_environments(tmp_path):
    cache = tmp_path / "cache"
    sizes = {"real-torch/2.0.1": 3, "real-torch/2.13.0": 2, "wheel-corpus": 1, "envs/torch-2.13.0-cpu-py311": 5,
             "builds/abc": 4}
    for rel, mib in sizes.items():
        (cache / rel).mkdir(parents=True)
        (cache / rel / "data").write_bytes(os.urandom(mib << 20))
    os.link(cache / "real-torch/2.13.0/data", cache / "wheel-corpus/same")  # stored twice: removing frees less
    assert _budget.freed_by_removing(cache / "real-torch/2.13.0") == 0
    (cache / "wheel-corpus/same").unlink()
    gone = _budget.evict(cache, over=4 << 20)  # 4 MiB too much: the two largest test inputs go
    assert [p.relative_to(cache).as_posix() for p, _ in gone] == ["real-torch/2.0.1", "real-torch/2.13.0"]
    left = sorted(p.parent.relative_to(cache).as_posix() for p in cache.rglob("data"))
    assert left == ["builds/abc", "envs/torch-2.13.0-cpu-py311", "wheel-corpus"], left
    assert not list(cache.rglob(".evicted-*"))  # set aside by one rename, then removed
    aside = cache / "real-torch" / ".evicted-2.1.2.999"  # what an eviction cut off halfway left
    aside.mkdir()
    (aside / "data").write_bytes(b"half")
    assert _budget.evict(cache, over=0) == [] and not aside.exists()
    outside = tmp_path / "elsewhere"
    (outside / "2.1.2").mkdir(parents=True)
    (outside / "2.1.2" / "data").write_bytes(os.urandom(1 << 20))
    shutil.rmtree(cache / "real-torch")
    (cache / "real-torch").symlink_to(outside, target_is_directory=True)  # a link out of the cache
    (cache / "wheelhouse").symlink_to(outside / "2.1.2", target_is_directory=True)
    assert [p.name for p, _ in _budget.evict(cache, over=100 << 20)] == ["wheel-corpus"]
    assert (outside / "2.1.2" / "data").exists()


def test_a_build_environment_the_run_did_not_use_is_evicted_one_it_used_never(tmp_path):
    """An environment keyed by a test's loopback index (a new port each run) is never used again: past the
    budget it goes, by its marker older than the run's start; one a build of this run used stays."""
    from wheelci.util.cache import USED

    cache = tmp_path / "cache"
    for name, used_at in (("torch-2.13.0-cpu-py311-from-0123456789ab", 1000.0), ("torch-2.13.0-cpu-py311", 5000.0)):
        env = cache / "envs" / name
        env.mkdir(parents=True)
        (env / "data").write_bytes(os.urandom(1 << 20))
        (env / USED).write_text("1")
        os.utime(env / USED, (used_at, used_at))
    gone = _budget.evict(cache, over=10 << 20, since=3000.0)
    assert [p.name for p, _ in gone] == ["torch-2.13.0-cpu-py311-from-0123456789ab"]
    assert (cache / "envs" / "torch-2.13.0-cpu-py311" / "data").exists()
    assert _budget.evict(cache, over=10 << 20) == []  # no run's start known: no environment is touched
    outside = tmp_path / "outside" / ".evicted-keep"  # an aside left there, reached through a link: not ours
    outside.mkdir(parents=True)
    shutil.rmtree(cache / "envs")
    (cache / "envs").symlink_to(outside.parent, target_is_directory=True)
    _budget.evict(cache, over=10 << 20, since=3000.0)
    assert outside.is_dir()


def test_a_timeout_stops_what_the_command_started_too(tmp_path):
    """A build's compile, a server: the command's whole session goes, not only the command."""
    pidfile = tmp_path / "grandchild"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    with pytest.raises(pytest.fail.Exception, match="ran past its 1 s timeout"):
        _proc.run(["sh", "-c", script], timeout=1)
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")

    def running() -> bool:  # gone, or a zombie its new parent has yet to reap: either way it runs no more
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False

    deadline = time.monotonic() + 10  # the signal is sent; dying takes the kernel a moment
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running()


def test_a_command_ends_before_its_tests_own_limit(monkeypatch):
    monkeypatch.setattr(_proc, "LIMIT", 300.0)
    assert _proc.default_limit() == 300.0 - _proc.MARGIN
    monkeypatch.setattr(_proc, "LIMIT", None)
    assert _proc.default_limit() == _proc.TIMEOUT
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert _proc.current_test() == "(no test)"
