"""What the wheel readers accept, checked through the stages a user runs: a wheel with two .dist-info
directories (pip and uv refuse it), and files of an unpacked or installed directory that are not regular
files (a FIFO would hang the open, a link to /dev/zero would read forever). Each is one error line,
exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.wheel.ondisk import read_regular
from tests._wheels import BAD_WHEELS, age_past_racy, bad_wheel, build_wheel, run_stage
from tests import _proc

FILES = {"demo/__init__.py": "VERSION = '1.0'\n", "demo/core.py": "x = 1\n"}
BOUND = 60  # seconds: a stage that hangs fails the test instead of the suite (no assert is on time)


def one_error_line(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def pip_refuses(wheel: Path, tmp_path: Path) -> str:
    r = _proc.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                   "--disable-pip-version-check", "--target", str(tmp_path / "pip-target"), str(wheel)],
                  capture_output=True, text=True)
    assert r.returncode != 0
    return r.stderr


@pytest.mark.parametrize("stage", ["ci.check", "ci.patch", "ci.index"])
def test_two_dist_info_directories_are_refused(tmp_path: Path, stage: str) -> None:
    whl = bad_wheel(tmp_path, "two-dist-info", FILES)
    assert "multiple .dist-info directories" in pip_refuses(whl, tmp_path)  # what we hold ourselves to
    out = tmp_path / "out"
    args = {"ci.check": [whl], "ci.patch": [whl, "--local-version", "x", "-w", out],
            "ci.index": [whl.parent, "--out", out]}[stage]
    line = one_error_line(run_stage(stage, *args), BAD_WHEELS["two-dist-info"], whl.name)
    assert "pip and uv refuse" in line
    assert not out.exists()


def test_one_dist_info_beside_a_nested_one_is_a_wheel(tmp_path: Path) -> None:
    """Only top-level directories count: a package may ship a .dist-info of its own below its root."""
    files = {**FILES, "demo/vendored/dep-1.0.dist-info/METADATA": "Name: dep\nVersion: 1.0\n"}
    whl = build_wheel(tmp_path, files=files)
    r = run_stage("ci.check", whl)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """An installed directory as pip --target makes it: the demo package and its .dist-info."""
    whl = build_wheel(tmp_path / "dist", files=FILES)
    target = tmp_path / "site"
    _proc.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
               "--disable-pip-version-check", "--target", str(target), str(whl)], check=True)
    return target


def _swap(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind,words", [("fifo", "is a FIFO"), ("zero", "is a character device")])
@pytest.mark.parametrize("stage", ["ci.preload", "ci.patch"])
def test_a_record_that_is_no_regular_file_is_refused(site: Path, tmp_path: Path, kind: str, words: str,
                                                    stage: str) -> None:
    """ci.preload DIR and ci.patch --preload-from DIR read the RECORDs of an installed directory."""
    record = site / "demo-1.0.dist-info" / "RECORD"
    _swap(record, kind)
    out = tmp_path / "out"
    args = {"ci.preload": [site, "--print-order"],
            "ci.patch": [build_wheel(tmp_path / "in", "app", files={"app/__init__.py": ""}), "--preload-from",
                         site, "-w", out]}[stage]
    r = _proc.run([sys.executable, "-m", stage, *map(str, args)], capture_output=True, text=True,
                  timeout=BOUND, cwd=Path(__file__).resolve().parent.parent)
    one_error_line(r, str(record), words, "not a regular file")
    assert not out.exists()


@pytest.mark.parametrize("kind,words", [("fifo", "is a FIFO"), ("zero", "is a character device")])
def test_an_index_metadata_file_that_is_no_regular_file_is_refused(tmp_path: Path, kind: str, words: str) -> None:
    """ci.index reads back the PEP 658 METADATA files it wrote (its cache says they are its own)."""
    repo = tmp_path / "repo"
    whl = build_wheel(repo, files=FILES)
    age_past_racy(repo)  # else the second run re-hashes the wheel (by design) and rewrites the sidecar
    assert run_stage("ci.index", repo).returncode == 0
    sidecar = whl.with_name(whl.name + ".metadata")
    pages = sorted(p.relative_to(repo) for p in repo.rglob("*") if p.is_file() and p != sidecar)
    _swap(sidecar, kind)
    r = _proc.run([sys.executable, "-m", "ci.index", str(repo)], capture_output=True, text=True,
                  timeout=BOUND, cwd=Path(__file__).resolve().parent.parent)
    one_error_line(r, str(sidecar), words)
    assert sorted(p.relative_to(repo) for p in repo.rglob("*") if p.is_file() and p != sidecar) == pages
    assert sidecar.is_fifo() if kind == "fifo" else sidecar.is_symlink()  # left as it was


def test_read_regular_bounds_what_it_reads(tmp_path: Path) -> None:
    f = tmp_path / "RECORD"
    f.write_bytes(b"x" * 100)
    assert read_regular(f, 100) == b"x" * 100
    f.write_bytes(b"x" * 101)
    with pytest.raises(CiError, match="is 101 bytes, over the"):
        read_regular(f, 100)
    link = tmp_path / "link"
    link.symlink_to(f)
    f.write_bytes(b"ok")
    assert read_regular(link, 100) == b"ok"  # a link to a regular file is read as that file
    with pytest.raises(CiError, match="is a directory"):
        read_regular(tmp_path, 100)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent", 100)
