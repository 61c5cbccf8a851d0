"""Reproducible wheels: two checkouts of one commit, built in different directories, give byte-identical
wheels; no path of the checkout, the work directory, the build environment or the interpreter is left
in the shipped library; every timestamp is SOURCE_DATE_EPOCH, else the commit's time."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from tests._wheels import run_stage
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
COMMIT_TIME = "2026-01-02T03:04:05Z"
COMMIT_EPOCH = 1767323045


def checkout(where: Path) -> Path:
    """tests/fixtures/tiny_ext committed in a git repository of its own, at a fixed time."""
    project = where / "tiny_ext"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    env = {"GIT_AUTHOR_DATE": COMMIT_TIME, "GIT_COMMITTER_DATE": COMMIT_TIME, "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "x"]):
        _proc.run(["git", *cmd], cwd=project, env=env, check=True)
    return project


def test_the_plan_takes_timestamps_from_the_commit_or_source_date_epoch(tmp_path):
    project = checkout(tmp_path)
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", "--json",
                  env={"SOURCE_DATE_EPOCH": ""})
    assert json.loads(r.stdout)["source_date_epoch"] == COMMIT_EPOCH
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", "--json",
                  env={"SOURCE_DATE_EPOCH": "1234567890"})
    assert json.loads(r.stdout)["source_date_epoch"] == 1234567890
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run", env={"SOURCE_DATE_EPOCH": "soon"})
    assert r.returncode == 2 and r.stderr.strip() == (
        "python -m ci.build: error: SOURCE_DATE_EPOCH is not an integer: 'soon'"), r.stderr


def test_prefix_maps_put_the_most_specific_path_last(tmp_path):
    """GCC applies the last matching -ffile-prefix-map: a checkout inside the work directory must win."""
    from wheelci.compile.host import prefix_maps

    work = tmp_path / "work"
    maps = prefix_maps(work / "src", work, tmp_path / "env" / "bin" / "python", tmp_path / "compat")
    olds = [m.split("=", 1)[1].rsplit("=", 1)[0] for m in maps]
    assert olds.index(str(work)) < olds.index(str(work / "src"))
    assert f"-ffile-prefix-map={work / 'src'}=/wheelci/src" in maps


@pytest.mark.slow
def test_two_checkouts_of_one_commit_build_the_same_bytes(tmp_path):
    wheels, dirs = [], []
    for name in ("first", "second-checkout"):
        project = checkout(tmp_path / name)
        work = tmp_path / name / "work"
        r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", tmp_path / name / "out",
                      "--work-dir", work, env={"SOURCE_DATE_EPOCH": ""})
        assert r.returncode == 0, r.stderr[-3000:]
        (wheel,) = (tmp_path / name / "out").glob("*.whl")
        wheels.append(wheel)
        dirs += [str(project), str(work)]
    digests = [hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels]
    with zipfile.ZipFile(wheels[0]) as z:
        assert {i.date_time for i in z.infolist()} == {(2026, 1, 2, 3, 4, 4)}  # zip keeps even seconds
        (so,) = [n for n in z.namelist() if n.endswith(".so")]
        library = z.read(so)
    assert digests[0] == digests[1], [w.name for w in wheels]
    leaked = [d for d in (*dirs, str(Path.home()), "/tmp/") if d.encode() in library]
    assert not leaked, leaked
