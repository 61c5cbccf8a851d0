"""What a command may do in the directories it writes (wheelci.util.owned): a build's -w and --work-dir,
the kept build tree, repair's -w. Each case is the input that once broke it, through the real command:
a build whose setup.py fails at once (the cached CPU build environment, no compile), and a repair of a
wheel with a real ELF library."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import _proc
from tests._elfbuild import make_wheel
from tests._wheels import SLOW_SETUP, interrupted_build, run_stage

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tiny_ext"


def error_line(r, stage: str = "build") -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"python -m ci.{stage}: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return lines[0]


def failing_project(tmp_path: Path, setup: str = "import sys\nprint('no build today', flush=True)\nsys.exit(1)\n") -> Path:
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (project / "setup.py").write_text(setup)
    return project


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def earlier_build(out: Path, manifest: bool = True) -> Path:
    """-w as a passed earlier build left it: its wheel, the report that vouches for it and the ownership
    manifest that makes both ours (without it: a user's files that look like ours)."""
    wheel = make_wheel(out, "tiny-ext", {"tiny_ext/__init__.py": b""}, version="0.1.0",
                       tag="cp311-cp311-manylinux_2_28_x86_64")
    report = {"passed": True, "failed_step": None, "wheels": [{"name": wheel.name, "role": "main"}]}
    (out / "report.json").write_text(json.dumps(report))
    (out / "report.md").write_text("## the earlier build: passed\n")
    if manifest:
        (out / ".wheelci-owned.json").write_text(json.dumps(
            {"version": 1, "groups": {"build": [wheel.name], "report": ["report.json", "report.md"]}}))
    return wheel


@pytest.mark.parametrize("layout", ["wheels-in-work", "work-in-wheels", "same"])
def test_a_nested_wheel_dir_and_work_dir_are_refused_before_anything_is_written(tmp_path, layout):
    """`--work-dir W -w W/dist` once replaced the user's files in W/dist and left an unverified wheel there."""
    project = failing_project(tmp_path)
    work, out = {"wheels-in-work": (tmp_path / "w", tmp_path / "w" / "dist"),
                 "work-in-wheels": (tmp_path / "wh" / "work", tmp_path / "wh"),
                 "same": (tmp_path / "both", tmp_path / "both")}[layout]
    before = tree(tmp_path)
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, "--work-dir", work)
    assert r.returncode == 2, r.stderr[-3000:]
    line = error_line(r)
    assert "-w" in line and "--work-dir" in line and ("inside" in line or "the same directory" in line), line
    assert tree(tmp_path) == before


def test_a_failed_rebuild_sets_the_earlier_wheel_aside_and_the_report_names_where(tmp_path):
    """`upload wheelhouse/*.whl` after a failed rebuild published the earlier build's wheel, which sat
    beside a FAILED report."""
    out = tmp_path / "wheelhouse"
    wheel = earlier_build(out)
    (out / "notes.txt").write_text("the user's\n")
    r = run_stage("ci.build", failing_project(tmp_path), "--cpu", "--engine", "host", "-w", out,
                  "--work-dir", tmp_path / "work")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "compile failed" in error_line(r)
    assert not list(out.glob("*.whl")), tree(out)
    report = json.loads((out / "report.json").read_text())
    assert report["failed_step"] == "compile" and report["wheels"] == []
    aside = out / report["set_aside"]
    assert aside.parent == out and (aside / wheel.name).is_file()
    assert json.loads((aside / "report.json").read_text())["passed"] is True  # it still vouches for its wheel
    assert report["set_aside"] in (out / "report.md").read_text()
    assert (out / "notes.txt").read_text() == "the user's\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_rebuild_sets_the_earlier_wheel_aside(tmp_path, signum):
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    wheel = earlier_build(out)
    project = failing_project(tmp_path, SLOW_SETUP)
    returncode, stderr = interrupted_build(project, out, work, signum, wait=240)
    assert returncode == 128 + signum, stderr[-2000:]
    assert not list(out.glob("*.whl")), tree(out)
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is False and (out / report["set_aside"] / wheel.name).is_file()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_build_replaces_an_earlier_builds_report_with_its_own(tmp_path, signum):
    """A stopped build left the previous build's report.md in -w, describing another failure as if current."""
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    project = failing_project(tmp_path)  # the earlier build: its compile fails at once, its report in -w
    earlier = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, "--work-dir", work)
    assert earlier.returncode == 1 and (out / "report.md").is_file(), earlier.stderr[-3000:]
    earlier_md = (out / "report.md").read_text()
    assert "**Stopped at step compile** (failed after" in earlier_md, earlier_md
    (project / "setup.py").write_text(SLOW_SETUP)
    returncode, stderr = interrupted_build(project, out, work, signum, wait=240)
    assert returncode == 128 + signum, stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    (compiled,) = [s for s in report["steps"] if s["name"] == "compile"]
    why = "stopped by SIGTERM" if signum == signal.SIGTERM else "stopped by Ctrl-C (SIGINT)"
    assert report["failed_step"] == "compile" and report["passed"] is False, report
    assert compiled["status"] == "interrupted" and compiled["error"] == why, compiled
    md = (out / "report.md").read_text()
    assert md != earlier_md and f"**Stopped at step compile** (interrupted after" in md and why in md, md
    assert not list(out.glob("*.whl"))


def test_a_link_planted_in_the_kept_tree_is_replaced_never_followed(tmp_path):
    """compile.log linked to a file outside the tree: the compile's log overwrote it. dist linked to a
    path that is not there: every later build failed until --fresh."""
    project, work, out = failing_project(tmp_path), tmp_path / "work", tmp_path / "out"
    first = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, "--work-dir", work)
    assert first.returncode == 1 and "compile failed" in error_line(first), first.stderr[-3000:]
    victim = tmp_path / "victim.txt"
    victim.write_text("not the tree's\n")
    (work / "compile.log").unlink()
    (work / "compile.log").symlink_to(victim)
    shutil.rmtree(work / "dist")
    (work / "dist").symlink_to(tmp_path / "elsewhere")
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, "--work-dir", work)
    assert r.returncode == 1 and "compile failed" in error_line(r), r.stderr[-3000:]
    assert victim.read_text() == "not the tree's\n" and not (tmp_path / "elsewhere").exists()
    assert not (work / "compile.log").is_symlink() and "no build today" in (work / "compile.log").read_text()
    assert (work / "dist").is_dir() and not (work / "dist").is_symlink()


def test_a_refused_repair_leaves_no_directory_it_made(tmp_path):
    from tests.test_repair import _torch_op

    lib = _torch_op(tmp_path)  # links LibTorch: repair writes its torch pin, and so the metadata
    # a second Version header: refused when the Requires-Dist is written, after auditwheel ran
    wheel = make_wheel(tmp_path / "in", "omp-op", {"omp_op/__init__.py": b"", "omp_op/libomp_op.so": lib},
                       requires_python=">=3\nVersion: 2.0")
    r = run_stage("ci.repair", wheel, "-w", tmp_path / "out" / "deep", "--torch", "2.13.0",
                  "--torch-requires", "filelock")
    assert r.returncode == 2, r.stderr
    assert "2 Version headers" in error_line(r, "repair")
    assert not (tmp_path / "out").exists()


def test_a_second_build_into_the_same_wheel_dir_waits_for_the_first(tmp_path):
    """Two builds writing one -w interleaved: each moved its wheels in and wrote the report from what it
    saw, so the report beside a wheel could be the other build's."""
    out = tmp_path / "wheelhouse"
    slow = failing_project(tmp_path, SLOW_SETUP)
    fast = tmp_path / "fast"
    shutil.copytree(failing_project(tmp_path / "f"), fast)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "ci" / "src")])}

    def start(project: Path, work: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "ci.build", str(project), "--cpu", "--engine", "host",
                                 "-w", str(out), "--work-dir", str(work)], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=functools.partial(signal.signal, signal.SIGTERM, signal.SIG_DFL))
    first = start(slow, tmp_path / "work1")
    second = None
    try:
        deadline = time.monotonic() + 240
        log = tmp_path / "work1" / "compile.log"
        while "compiling slowly" not in (log.read_text() if log.exists() else ""):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-2000:]
            time.sleep(0.2)
        second = start(fast, tmp_path / "work2")
        seen = []
        assert second.stderr is not None
        for line in second.stderr:  # it blocks on the lock after saying so; without a lock it runs to its end
            seen.append(line)
            if "waiting for another run that is using -w" in line:
                break
        else:
            raise AssertionError("".join(seen)[-3000:])
        assert not (tmp_path / "work2" / "compile.log").exists()  # nothing of it ran meanwhile
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
        rest = second.communicate(timeout=240)[1]
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert second.returncode == 1 and "compile failed" in rest, rest[-3000:]
    assert json.loads((out / "report.json").read_text())["failed_step"] == "compile"


def test_a_kept_tree_replaced_by_a_link_is_made_anew_not_written_through(tmp_path):
    """The cache's tree of a project (builds/<key>) linked to a directory elsewhere: the build wrote there."""
    project, out = failing_project(tmp_path), tmp_path / "out"
    first = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out)
    assert first.returncode == 1 and "compile failed" in error_line(first), first.stderr[-3000:]
    kept = Path(json.loads((out / "report.json").read_text())["work_dir"])
    elsewhere = tmp_path / "elsewhere"
    shutil.move(kept, elsewhere)
    kept.symlink_to(elsewhere)
    before = {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    try:
        r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out)
        assert r.returncode == 1 and "compile failed" in error_line(r), r.stderr[-3000:]
        assert {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before
        assert kept.is_dir() and not kept.is_symlink() and "no build today" in (kept / "compile.log").read_text()
    finally:
        if kept.is_symlink():
            kept.unlink()
        shutil.rmtree(kept, ignore_errors=True)  # the shared cache keeps no tree of a test's project


def test_a_forged_manifest_never_makes_a_user_file_or_directory_ours(tmp_path):
    """A manifest copied in with a wheelhouse (or written by hand) names a user's note and a user's
    directory: split removes neither, and finishes."""
    wheel = make_wheel(tmp_path / "in", "forged", {"forged/__init__.py": b"X = 1\n"})
    out = tmp_path / "out"
    (out / "userdir").mkdir(parents=True)
    (out / "userdir" / "keep.txt").write_text("mine\n")
    (out / "mynotes.txt").write_text("mine\n")
    (out / ".wheelci-owned.json").write_text(json.dumps(
        {"version": 1, "groups": {wheel.name: ["mynotes.txt", "userdir", "../escape.whl"]}}))
    r = run_stage("ci.split", wheel, "--limit", "pypi", "-w", out)
    assert r.returncode == 0, r.stderr
    assert (out / "mynotes.txt").read_text() == "mine\n" and (out / "userdir" / "keep.txt").read_text() == "mine\n"
    assert (out / wheel.name).is_file()


def test_a_users_report_md_in_the_wheel_dir_is_refused_not_replaced(tmp_path):
    out = tmp_path / "wheelhouse"
    out.mkdir()
    (out / "report.md").write_text("USER NOTES\n")
    r = run_stage("ci.build", FIXTURE, "--cpu", "--engine", "host", "-w", out)
    assert r.returncode == 2 and "report.md, which no wheelci build wrote" in error_line(r), r.stderr
    assert (out / "report.md").read_text() == "USER NOTES\n" and sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_a_report_shaped_like_ours_without_the_manifest_is_a_users_and_nothing_moves(tmp_path):
    """A report.json in -w shaped like an earlier build's, naming the user's own wheel: no manifest lists
    it, so it is the user's: the build is refused in one line, the wheel and the report never moved."""
    out = tmp_path / "wheelhouse"
    wheel = earlier_build(out, manifest=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = run_stage("ci.build", failing_project(tmp_path), "--cpu", "--engine", "host", "-w", out,
                  "--work-dir", tmp_path / "work")
    assert r.returncode == 2 and "which no wheelci build wrote there" in error_line(r), r.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and (out / wheel.name).is_file()


def test_only_the_manifest_makes_a_wheel_ours_to_set_aside(tmp_path):
    """The manifest lists the report and one wheel: a failed build sets those aside, never the user's
    other wheel, nor a directory named like a report."""
    from wheelci.util.owned import output_dir

    out = tmp_path / "wheelhouse"
    wheel = earlier_build(out)
    users = make_wheel(out, "users-own", {"users_own/__init__.py": b""}, version="1.0", tag="py3-none-any")
    with output_dir(out, "-w") as held:
        assert held.owned == {wheel.name, "report.json", "report.md"}
        aside = held.set_aside([wheel.name, users.name, "report.json", "report.md"])
    assert aside and (out / aside / wheel.name).is_file() and (out / users.name).is_file()
