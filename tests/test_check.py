"""ci.check: limits by profile or size, the 10 largest members when over, exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wheelci.check import check_wheel
from wheelci.util.sizes import PROFILES, parse_limit
from tests._wheels import build_wheel, raw_zip, run_stage, wheel_entries
from tests import _proc


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    files = {f"demo/blob{i:02d}.bin": os.urandom(1000 * (i + 1)) for i in range(12)}  # incompressible
    files["demo/__init__.py"] = ""
    return build_wheel(tmp_path / "in", files=files)


def test_profiles() -> None:
    assert parse_limit("pypi") == 100 * 2**20 == PROFILES["pypi"]
    assert parse_limit("GitHub") == 2 * 2**30 - 1
    assert parse_limit("3GB") == 3 * 10**9
    assert parse_limit(None) is None


def test_within_limit(wheel: Path) -> None:
    r = check_wheel(wheel, "pypi")
    assert r.ok and r.size == wheel.stat().st_size
    assert r.unpacked == sum(len(d) for _, d, _ in wheel_entries(wheel))
    run = run_stage("ci.check", wheel)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stderr


def test_over_limit_lists_ten_largest_and_exits_1(wheel: Path) -> None:
    r = check_wheel(wheel, "50KB")
    assert not r.ok and len(r.largest) == 10
    assert [m.name for m in r.largest[:3]] == ["demo/blob11.bin", "demo/blob10.bin", "demo/blob09.bin"]
    run = run_stage("ci.check", wheel, "--limit", "50KB")
    assert run.returncode == 1
    assert "OVER" in run.stdout and "demo/blob11.bin" in run.stdout and "demo/blob01.bin" not in run.stdout
    assert run.stderr.strip().count("\n") == 0 and "1 of 1 wheel(s) over the limit" in run.stderr


def test_unpacked_limit_and_json_for_several_wheels(wheel: Path, tmp_path: Path) -> None:
    small = build_wheel(tmp_path / "small", name="small")
    run = run_stage("ci.check", wheel, small, "--limit", "github", "--unpacked-limit", "10KiB", "--json")
    assert run.returncode == 1
    failure = json.loads(run.stdout)  # the --json failure document, the results inside
    assert failure["ok"] is False and failure["exit_code"] == 1 and "over the limit" in failure["error"]
    results = {Path(r["wheel"]).name: r for r in failure["result"]}
    assert results[wheel.name]["ok"] is False and "unpacked" in results[wheel.name]["problems"][0]
    assert results[small.name]["ok"] is True


def test_reads_only_the_central_directory(wheel: Path, tmp_path: Path) -> None:
    # corrupt every member's data: a central-directory-only reader does not notice
    data = bytearray(wheel.read_bytes())
    for i in range(40, len(data) // 2, 97):
        data[i] ^= 0xFF
    broken = tmp_path / "broken" / wheel.name
    broken.parent.mkdir()
    broken.write_bytes(bytes(data))
    assert check_wheel(broken, "pypi").ok


BAD = {
    "not-a-zip": "not a zip file",
    "symlink": "symlink member",
    "bad-limit": "not a size",
    "bad-name": "invalid wheel file name",
    "missing": "no such wheel",
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_input_exits_2_with_one_line(wheel: Path, tmp_path: Path, kind: str) -> None:
    args = [wheel]
    if kind == "not-a-zip":
        p = tmp_path / "x" / wheel.name
        p.parent.mkdir()
        p.write_text("nope")
        args = [p]
    elif kind == "symlink":
        args = [raw_zip(tmp_path / "x" / wheel.name, wheel_entries(wheel) + [("demo/l", b"x", 0o120777)])]
    elif kind == "bad-limit":
        args = [wheel, "--limit", "huge"]
    elif kind == "bad-name":
        p = tmp_path / "x" / "demo.whl"
        p.parent.mkdir()
        p.write_bytes(wheel.read_bytes())
        args = [p]
    elif kind == "missing":
        args = [tmp_path / "demo-9-py3-none-any.whl"]
    run = run_stage("ci.check", *args)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and BAD[kind] in lines[0], run.stderr


@pytest.mark.parametrize("stage", ["ci.check", "ci.split"])
@pytest.mark.parametrize("limit", ["1e400MB", "infGB", "nan", "1e19"])
def test_absurd_limits_are_refused_in_one_line(wheel: Path, tmp_path: Path, stage: str, limit: str) -> None:
    before = wheel.read_bytes()
    extra = ["-w", str(tmp_path / "out")] if stage == "ci.split" else []
    run = run_stage(stage, wheel, "--limit", limit, *extra)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a size" in lines[0] and "Traceback" not in run.stderr
    assert wheel.read_bytes() == before and not (tmp_path / "out").exists()


def test_an_unanticipated_exception_is_one_line_exit_2_and_debug_shows_it() -> None:
    import subprocess
    import sys
    code = ("from wheelci.cli import parser, run\n"
            "def main(args):\n    return dict()['missing key']\n"
            "run(parser('demo', 'a stage with a bug'), main, {argv})")
    r = _proc.run([sys.executable, "-c", code.format(argv="[]")], capture_output=True, text=True)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("python -m ci.demo: error: unexpected KeyError") and "--debug" in line
    r = _proc.run([sys.executable, "-c", code.format(argv="['--debug']")], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" in r.stderr  # --debug shows it; the exit code stays
    assert r.stderr.strip().splitlines()[-1] == line


@pytest.mark.parametrize("stage, args", [
    ("ci.check", ["--limit", "pypi"]), ("ci.split", ["--limit", "1KB", "-w", "OUT"]),
    ("ci.patch", ["--local-version", "x", "-w", "OUT"]), ("ci.index", []),
])
def test_debug_shows_the_traceback_and_keeps_exit_2_for_bad_input(tmp_path: Path, stage: str, args) -> None:
    """--debug re-raised CiError, so bad input exited 1 (a finding) in every stage."""
    missing = tmp_path / ("nowhere" if stage == "ci.index" else "absent-1.0-py3-none-any.whl")
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    plain = run_stage(stage, missing, *args)
    debug = run_stage(stage, missing, *args, "--debug")
    assert plain.returncode == debug.returncode == 2, (plain.stderr, debug.stderr)
    (line,) = plain.stderr.strip().splitlines()
    assert "Traceback" in debug.stderr and debug.stderr.strip().splitlines()[-1] == line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("body, words", [
    ("open('/dev/full', 'wb', buffering=0).write(b'x')", "No space left on device (free space"),
    ("import subprocess; subprocess.run(['sh', '-c', 'echo the reason >&2; exit 3'], check=True, "
     "capture_output=True)", "sh failed with exit status 3: the reason"),
])
def test_machine_and_tool_errors_say_what_failed_not_unexpected(body: str, words: str) -> None:
    """Finding 22: a full disk or a failed tool read as "unexpected ... an input this stage does not
    handle yet", a bug report for what is the machine's or the tool's answer."""
    import subprocess
    import sys
    code = f"from wheelci.cli import parser, run\ndef main(args):\n    {body}\nrun(parser('demo', 'x'), main, [])"
    r = _proc.run([sys.executable, "-c", code], capture_output=True, text=True)
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "unexpected" not in line and words in line, line


def test_an_output_directory_that_is_a_file_is_named_in_one_line(wheel: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("a file where the output directory should be\n")
    run = run_stage("ci.patch", wheel, "--local-version", "x", "-w", blocker / "sub")
    (line,) = run.stderr.strip().splitlines()
    assert run.returncode == 2 and "unexpected" not in line and str(blocker) in line, line


@pytest.mark.parametrize("stage, args", [("ci.build", ["--cpu", "--eng", "x"]), ("ci.check", ["--lim", "x"]),
                                         ("ci.index", ["--ou", "x"])])
def test_abbreviated_options_are_refused(tmp_path: Path, stage: str, args: list[str]) -> None:
    """`--eng docker` was taken as `--engine`: an abbreviation's meaning changes when an option is added."""
    abbreviated = args[-2]
    run = run_stage(stage, tmp_path, *args)
    (line,) = run.stderr.strip().splitlines()
    assert run.returncode == 2 and f"unrecognized arguments: {abbreviated}" in line, run.stderr


def test_pypi_refuses_a_local_version_label_whatever_the_size(tmp_path: Path) -> None:
    """The default label (`+pt2.13.0.cu130`) cannot be uploaded to PyPI: the pypi profile says so (exit 1),
    another limit does not."""
    labelled = build_wheel(tmp_path / "in", version="0.1.0+pt2.13.0.cu130", files={"demo/__init__.py": ""})
    r = check_wheel(labelled, "pypi")
    assert not r.ok and not r.problems and "+pt2.13.0.cu130" in r.refused[0] and "PyPI refuses" in r.refused[0]
    assert check_wheel(labelled, "github").ok and check_wheel(labelled, "1GB").ok
    run = run_stage("ci.check", labelled)  # pypi is the default
    assert run.returncode == 1 and run.stdout.startswith("REFUSED ") and "--local-version none" in run.stdout
    assert "refused by pypi" in run.stderr.strip().splitlines()[-1], run.stderr
    doc = json.loads(run_stage("ci.check", labelled, "--json").stdout)
    assert doc["exit_code"] == 1 and doc["result"][0]["ok"] is False and doc["result"][0]["refused"], doc
    plain = build_wheel(tmp_path / "plain", version="0.1.0", files={"demo/__init__.py": ""})
    assert check_wheel(plain, "pypi").ok
