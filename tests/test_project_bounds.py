"""What a build reads of a project is bounded: a project file, all of them together, and its pyproject.toml
are refused by their size, in one error line naming the file and the limit, before a byte is read. The
files are sparse (truncate: no disk blocks), the stages real, each under an address-space limit
(tests._bounded), so a reader that would read one whole fails the test with a MemoryError."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelci.compile import workdir
from wheelci.errors import CiError
from tests import _proc
from tests._bounded import bounded_stage

PYPROJECT = ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
             '[project]\nname = "pkg"\nversion = "1.0"\n')


def project(tmp_path: Path) -> Path:
    """A git checkout (the build lists its files with git) with a pyproject.toml and one source file."""
    p = tmp_path / "proj"
    (p / "pkg").mkdir(parents=True)
    (p / "pyproject.toml").write_text(PYPROJECT)
    (p / "pkg" / "__init__.py").write_text("X = 1\n")
    _proc.run(["git", "init", "-q", str(p)], check=True)
    return p


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "Traceback" not in stderr and "unexpected" not in stderr, stderr
    return lines[0]


def test_a_sparse_64_gib_project_file_is_refused_by_its_size(tmp_path):
    p = project(tmp_path)
    big = sparse(p / "data.bin", 64 * 2**30)
    out = tmp_path / "out"
    r = bounded_stage("ci.build", p, "--cpu", "--engine", "host", "-w", out,
                      env={"WHEELCI_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert str(big) in line and "64.0 GiB" in line and "4.0 GiB" in line, line
    assert not out.exists() and big.stat().st_size == 64 * 2**30  # nothing written, the input untouched


def test_a_sparse_pyproject_is_refused_in_a_dry_run(tmp_path):
    p = project(tmp_path)
    sparse(p / "pyproject.toml", 64 * 2**30)
    r = bounded_stage("ci.build", p, "--cpu", "--engine", "host", "--dry-run",
                      env={"WHEELCI_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 2, r.stderr
    line = one_error_line(r.stderr)
    assert f"{p / 'pyproject.toml'} is {64 * 2**30} bytes" in line and "16 MiB" in line, line


def test_files_each_under_the_limit_but_over_the_total_are_refused_before_any_is_read(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    for i in range(5):
        sparse(p / f"part{i}.bin", workdir.MAX_SOURCE_FILE - 1)
    with pytest.raises(CiError, match=r"hold 20\.0 GiB, over the 16\.0 GiB a build copies \(the largest: part"):
        workdir.snapshot_sources(p, work)
    with pytest.raises(CiError, match=r"over the 16\.0 GiB"):  # the container's copy, with no snapshot
        workdir.stage_project(p, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_a_file_that_changed_since_the_snapshot_leaves_no_copy(tmp_path):
    p, work = project(tmp_path), tmp_path / "work"
    work.mkdir()
    files, _ = workdir.snapshot_sources(p, work)
    (p / "pkg" / "__init__.py").write_text("X = 2\n")
    with pytest.raises(workdir.SourcesChanged, match="changed while the build was reading"):
        workdir.stage_project(p, tmp_path / "dest", files)
    assert not (tmp_path / "dest" / "pkg" / "__init__.py").exists()
