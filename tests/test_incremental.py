"""Incremental builds: a project's build tree is kept (in the cache, keyed by project and Plan) and each
step's inputs recorded, so an unchanged rerun reuses every step, a changed source recompiles what changed
and reruns what depends on it (verification included), and --fresh starts over.

One real host CPU build of tests/fixtures/tiny_ext, then its reruns: the figures are printed (first build,
unchanged rerun, changed test file, changed C++ file); nothing here asserts a time."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests import _proc
from tests._wheels import run_stage

pytestmark = [pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
EPOCH = {"SOURCE_DATE_EPOCH": "1767323045"}  # not a git checkout: fixed timestamps, so equal inputs give equal bytes
REUSABLE = ["compile", "repair", "finish", "sbom", "check", "abi", "verify"]


def build(project: Path, out: Path, *args: str, env: dict[str, str] | None = None,
          ) -> tuple[subprocess.CompletedProcess, dict, float]:
    start = time.monotonic()
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, *args, env={**EPOCH, **(env or {})})
    seconds = time.monotonic() - start
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
    return r, report, seconds


def statuses(report: dict) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["steps"]}


def digest(out: Path) -> str:
    (wheel,) = out.glob("*.whl")
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_reruns_reuse_what_did_not_change_and_rebuild_what_did(tmp_path):
    from wheelci.compile.workdir import TREE, WORK_MARK
    from wheelci.util.cache import cache_dir

    project = tmp_path / "tiny_ext"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    # a second, small C++ file beside tiny.cpp (which takes most of a minute here: torch's headers)
    (project / "csrc" / "extra.cpp").write_text("int tiny_extra() { return 1; }\n")
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace('["csrc/tiny.cpp"]', '["csrc/tiny.cpp", "csrc/extra.cpp"]'))
    (project / "tiny_ext" / "dropped.py").write_text("DROPPED = True\n")  # shipped now, deleted below
    # a tree whose project is gone is removed by the next build; one that is not ours is left alone
    builds = cache_dir("builds")
    gone, foreign = builds / "0-gone-project", builds / "0-not-ours"
    for d in (gone, foreign):
        d.mkdir(parents=True, exist_ok=True)
        (d / TREE).write_text(json.dumps({"project": str(tmp_path / "deleted")}))
    (gone / WORK_MARK).write_text("")

    # the first build, twice at once: one waits for the build tree the other holds, then reuses every step
    # the environment run_stage gives the later builds: the variables are inputs of the compile too
    own = {"CCACHE_DIR": str(tmp_path / "ccache")}  # this test's own, so another's compiles never count in it
    env = {**os.environ, **EPOCH, **own, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "ci" / "src"),
                                                                os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    runs = [subprocess.Popen([sys.executable, "-m", "ci.build", str(project), "--cpu", "--engine", "host",
                              "-w", str(tmp_path / name)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for name in ("o1", "o2")]
    stderrs = [run.communicate(timeout=1200)[1] for run in runs]
    first_seconds = time.monotonic() - start
    assert [run.returncode for run in runs] == [0, 0], stderrs[0][-3000:] + stderrs[1][-3000:]
    reports = [json.loads((tmp_path / name / "report.json").read_text()) for name in ("o1", "o2")]
    kinds = sorted(tuple(sorted({statuses(r)[s] for s in REUSABLE})) for r in reports)
    assert kinds == [("ok",), ("reused",)], [r["steps"] for r in reports]
    waited = [i for i, r in enumerate(reports) if statuses(r)["compile"] == "reused"][0]
    assert "waiting for another run that is using the build tree" in stderrs[waited]
    report1 = reports[1 - waited]
    assert digest(tmp_path / "o1") == digest(tmp_path / "o2")
    tree = Path(report1["work_dir"])
    assert tree.parent == builds and reports[waited]["work_dir"] == str(tree)
    assert not gone.exists() and foreign.exists()
    shutil.rmtree(foreign)

    # unchanged: every step reused, said on a line each and in report.md, the same wheel and verify result
    rerun, report3, rerun_seconds = build(project, tmp_path / "o3", env=own)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert all(statuses(report3)[s] == "reused" for s in REUSABLE), report3["steps"]
    assert "compile: reused (its inputs are unchanged since" in rerun.stderr
    assert "Reused from the last build" in (tmp_path / "o3" / "report.md").read_text()
    assert digest(tmp_path / "o3") == digest(tmp_path / "o1")
    assert report3["verify"] == report1["verify"] and report3["passed"] is True

    # a changed test file: the compile runs but compiles nothing (ninja's tree is kept), and verify runs
    # the new test, which fails: verification is never skipped when what it reads changed
    test_file = project / "tests" / "test_tiny.py"
    (project / "tiny_ext" / "dropped.py").unlink()  # and a module deleted: it must not ship again
    test_file.write_text(test_file.read_text() + "\n\ndef test_added():\n    assert False, 'the added test ran'\n")
    failing, report4, _ = build(project, tmp_path / "o4", env=own)
    assert failing.returncode == 1 and report4["failed_step"] == "verify", failing.stderr[-3000:]
    assert statuses(report4)["compile"] == "ok" and statuses(report4)["verify"] == "failed"
    assert "ninja: no work to do" in (tree / "compile.log").read_text()

    # a changed C++ file (and the test fixed): that file alone is compiled again, and everything after runs
    test_file.write_text(test_file.read_text().replace("assert False, 'the added test ran'", "pass"))
    extra = project / "csrc" / "extra.cpp"
    extra.write_text(extra.read_text() + "int tiny_one_line_change() { return 42; }\n")  # new code, new bytes
    changed, report5, changed_seconds = build(project, tmp_path / "o5", env=own)
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert all(statuses(report5)[s] == "ok" for s in REUSABLE), report5["steps"]
    (wheel,) = (tmp_path / "o5").glob("*.whl")
    assert "tiny_ext/dropped.py" not in zipfile.ZipFile(wheel).namelist()
    assert "tiny_ext/dropped.py" in zipfile.ZipFile(next((tmp_path / "o1").glob("*.whl"))).namelist()
    log = (tree / "compile.log").read_text()
    assert "[1/1]" in log and "extra.cpp" in log and "tiny.cpp" not in log.split("[1/1]")[1].split("\n")[0], log
    # the frontend's check of the backend's requirements passed in this tree with the same answer: not run
    # again (for setuptools it runs setup.py once more, and so imports torch)
    assert "Getting build dependencies" not in log, log[:2000]

    # --fresh: an empty tree, every step run, the same bytes as the incremental build, and every compile a
    # hit of the local compile cache (the new tree's staged headers are new files with the same bytes)
    ccache = {**os.environ, **own}
    _proc.run(["ccache", "--zero-stats"], env=ccache, check=True, capture_output=True)
    fresh, report6, fresh_seconds = build(project, tmp_path / "o6", "--fresh", env=own)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    stats = dict(line.split("\t")[:2] for line in _proc.run(
        ["ccache", "--print-stats"], env=ccache, check=True, capture_output=True, text=True).stdout.splitlines())
    hits = int(stats["direct_cache_hit"]) + int(stats["preprocessed_cache_hit"])
    assert (hits, int(stats["cache_miss"])) == (2, 0), stats
    assert "Getting build dependencies" in (tree / "compile.log").read_text()  # a new tree checks them again
    assert all(statuses(report6)[s] == "ok" for s in REUSABLE), report6["steps"]
    assert digest(tmp_path / "o6") == digest(tmp_path / "o5")
    print(f"\ntiny_ext CPU: first build {first_seconds:.1f} s, unchanged rerun {rerun_seconds:.1f} s "
          f"({rerun_seconds / first_seconds:.0%}), one small C++ file changed {changed_seconds:.1f} s, "
          f"--fresh {fresh_seconds:.1f} s")


def test_a_header_search_path_change_recompiles_a_kept_setuptools_tree(tmp_path):
    """torch's cpp_extension compiles with ninja, which rebuilds by mtimes: CPATH pointing at another
    directory whose header has the same name (and an older mtime) must still recompile, and the kept
    tree's wheel must equal a --fresh build's."""
    project = tmp_path / "tiny_ext"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (project / "csrc" / "pick.cpp").write_text('#include <wheelci_pick.h>\nconst char* tiny_pick() { return PICK; }\n')
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace('["csrc/tiny.cpp"]', '["csrc/tiny.cpp", "csrc/pick.cpp"]'))
    for name in ("a", "b"):
        (tmp_path / "inc" / name).mkdir(parents=True)
        (tmp_path / "inc" / name / "wheelci_pick.h").write_text(f'#define PICK "wheelci-pick-{name * 3}"\n')
    os.utime(tmp_path / "inc" / "b" / "wheelci_pick.h", (1_000_000_000, 1_000_000_000))  # older than the object

    def built(out: Path, pick: str, *args: str) -> tuple[bytes, bytes]:
        """The wheel's bytes and its extension's."""
        r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", out, *args,
                      env={**EPOCH, "CPATH": str(tmp_path / "inc" / pick)})
        assert r.returncode == 0, r.stderr[-3000:]
        (wheel,) = out.glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            (ext,) = [n for n in z.namelist() if n.endswith(".so")]
            return wheel.read_bytes(), z.read(ext)

    assert b"wheelci-pick-aaa" in built(tmp_path / "w1", "a")[1]
    kept, ext = built(tmp_path / "w2", "b")
    assert b"wheelci-pick-bbb" in ext and b"wheelci-pick-aaa" not in ext
    assert hashlib.sha256(kept).hexdigest() == hashlib.sha256(built(tmp_path / "w3", "b", "--fresh")[0]).hexdigest()
