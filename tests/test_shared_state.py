"""Shared state under concurrency: runs sharing an index directory or a build environment take turns.

Real processes at once (`python -m ci.index`, cached_env in separate interpreters), never threads in
one process: flock is per open file, and what breaks is processes interleaving a read-modify-write.
A run that must wait says so on stderr; where the test needs a run to wait, it holds the lock itself
and waits for that line (no sleeps, no timing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wheelci.util.lock import locked_dir, locked_file
from tests._wheels import build_wheel
from tests import _proc

ROOT = Path(__file__).resolve().parents[1]
RUNS = 6


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "ci" / "src")]))


def _start(*args: str | Path) -> subprocess.Popen:
    return subprocess.Popen([str(a) for a in args], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_line(p: subprocess.Popen, words: str) -> str:
    """Read p's stderr until a line with `words` (or its end: then the assertion fails)."""
    seen = []
    for line in p.stderr:
        seen.append(line)
        if words in line:
            return line
    raise AssertionError(f"no line with {words!r}: {''.join(seen)}")


@pytest.fixture(scope="module")
def projects(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("projects")
    return [build_wheel(d, name=f"proj{i}", version="1.0") for i in range(RUNS)]


def test_concurrent_index_runs_each_adding_a_wheel_keep_every_project(tmp_path, projects):
    """Each run copies its own wheel into DIR and indexes DIR, all at once (CI jobs publishing to one
    directory). Interleaved without a lock, a run that scanned fewer wheels wrote the root page and
    the ownership list last: projects went missing, and every later run was refused."""
    repo = tmp_path / "repo"
    repo.mkdir()
    script = 'cp "$1" "$2"/ && exec "$3" -m ci.index "$2" --json'
    procs = [_start("sh", "-c", script, "sh", whl, repo, sys.executable) for whl in projects]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * RUNS, [o[1] for o in outs]
    root_page = (repo / "simple" / "index.html").read_text()
    cache = json.loads((repo / "simple" / ".ci-index-cache.json").read_text())
    for i in range(RUNS):
        assert f'href="proj{i}/"' in root_page, root_page
        assert f"proj{i}/index.html" in cache["pages"]
        assert (repo / "simple" / f"proj{i}" / "index.html").is_file()
    again = _proc.run([sys.executable, "-m", "ci.index", str(repo), "--json"], cwd=ROOT, env=_env(),
                      capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["written"] == []


def test_a_second_index_run_waits_and_says_so(tmp_path, projects):
    """While DIR is locked (here by the test, as another run would hold it) ci.index waits, says so on
    a progress line, and finishes once the lock is released."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(projects[0], repo)
    with locked_dir(repo, "the test's hold on the index"):
        p = _start(sys.executable, "-m", "ci.index", repo)
        line = _wait_for_line(p, "waiting")
        assert line.startswith("ci.index: waiting for another run that is using the index"), line
        assert not (repo / "simple").exists() or not any((repo / "simple").iterdir())
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert (repo / "simple" / "proj0" / "index.html").is_file()


# ---------------------------------------------------------------- build environments

# A cheap environment made the way ensure_env makes one (a venv, a site-packages holding torch), by
# cached_env, the function ensure_env runs: each creation appends a line to the log.
ENV_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    from wheelci.compile.hostenv import cached_env

    root, log = Path(sys.argv[1]), Path(sys.argv[2])

    def create(where):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
        site = where / "site"
        (site / "torch").mkdir(parents=True)
        (site / "torch" / "__init__.py").write_text("")
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        return {"site": str(site), "version": "0.0", "cuda": None, "requires": []}

    env = cached_env(root, create)
    print(subprocess.run([str(env.python), "-c", "import sys; print(sys.prefix)"], check=True,
                         capture_output=True, text=True).stdout.strip())
""")


def _env_run(root: Path, log: Path) -> subprocess.Popen:
    return _start(sys.executable, "-c", ENV_SCRIPT, root, log)


def _creations(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_concurrent_processes_create_one_environment_once(tmp_path):
    root, log = tmp_path / "envs" / "torch-x", tmp_path / "created.log"
    procs = [_env_run(root, log) for _ in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [o[1] for o in outs]
    assert _creations(log) == 1
    assert {o[0].strip() for o in outs} == {str(root)}


def test_a_waiting_process_says_so_and_uses_what_the_first_made(tmp_path):
    root, log = tmp_path / "envs" / "torch-x", tmp_path / "created.log"
    with locked_file(root.with_name(root.name + ".lock"), "the test's hold"):
        p = _env_run(root, log)
        line = _wait_for_line(p, "waiting")
        assert "waiting for another run that is using the build environment torch-x" in line, line
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert out.strip() == str(root) and _creations(log) == 1


def _truncate(root: Path) -> None:
    stamp = root / ".complete.json"
    stamp.write_bytes(stamp.read_bytes()[:10])


def _corrupt(root: Path) -> None:
    (root / ".complete.json").write_text('{"site": 1}')


def _no_interpreter(root: Path) -> None:
    for p in (root / "bin").glob("python*"):
        p.unlink()


def _emptied(root: Path) -> None:
    for p in root.iterdir():
        if p.name != ".complete.json":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _dangling(root: Path) -> None:
    """The Python the venv was made from is gone: bin/python points nowhere."""
    python = root / "bin" / "python"
    python.unlink()
    python.symlink_to(root / "no-such-python")


@pytest.mark.parametrize("damage, why", [
    (_truncate, "its stamp is cut off or corrupt"),
    (_corrupt, "its stamp is cut off or corrupt"),
    (_no_interpreter, "its interpreter is missing"),
    (_dangling, "its interpreter is missing"),
    (_emptied, "its interpreter is missing"),
])
def test_a_broken_environment_is_rebuilt(tmp_path, damage, why):
    """Before: "unexpected JSONDecodeError" or "pip is not installed", on every run after."""
    root, log = tmp_path / "envs" / "torch-x", tmp_path / "created.log"
    first = _env_run(root, log)
    assert first.communicate(timeout=600) and first.returncode == 0
    damage(root)
    p = _env_run(root, log)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert f"rebuilding the build environment {root}: {why}" in err
    assert out.strip() == str(root) and _creations(log) == 2
    again = _env_run(root, log)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0 and "rebuilding" not in err and _creations(log) == 2


def test_sibling_environments_store_identical_large_files_once(tmp_path):
    """A new environment's files identical to a sibling's (path, size, mode, bytes) become hard links;
    anything else stays its own copy, and every file reads as before."""
    from wheelci.util.share import SMALLEST, link_identical

    big = os.urandom(SMALLEST + 5)
    files = {"nvidia/lib/libsame.so": (big, 0o755), "nvidia/lib/libother.so": (big[:-1] + b"x", 0o755),
             "nvidia/lib/libmode.so": (big, 0o644), "small.py": (b"x = 1\n", 0o644),
             "only-new.so": (big, 0o755)}
    old, new = tmp_path / "envs" / "old", tmp_path / "envs" / "new"
    for root in (old, new):
        for rel, (data, mode) in files.items():
            if root is old and rel == "only-new.so":
                continue
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if root is new or rel != "nvidia/lib/libother.so" else big)
            path.chmod(mode if root is new or rel != "nvidia/lib/libmode.so" else 0o755)
    saved = link_identical(new, [old])
    assert saved == len(big)
    linked = {rel for rel in files if (new / rel).stat().st_nlink > 1}
    assert linked == {"nvidia/lib/libsame.so"}
    assert (new / "nvidia/lib/libsame.so").stat().st_ino == (old / "nvidia/lib/libsame.so").stat().st_ino
    for rel, (data, mode) in files.items():
        assert (new / rel).read_bytes() == data and (new / rel).stat().st_mode & 0o777 == mode, rel
    assert link_identical(new, [old]) == 0  # already one file: nothing more
    assert not [p for p in new.rglob(".*link-*")]
