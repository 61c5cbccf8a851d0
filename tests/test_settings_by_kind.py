"""[tool.wheelci.cuda] env and [tool.wheelci.cpu] env: build variables for one kind of build only, over [tool.wheelci]
env, with --env over all of them. A project that needs FORCE_CUDA=1 on its CUDA builds sets it there,
and its CPU build never sees it. Checked through `ci.build --dry-run` on a copy of the setuptools fixture,
as tests/test_settings.py checks the rest of [tool.wheelci]."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wheelci.config.project import merge, read_settings
from wheelci.errors import CiError
from tests._wheels import run_stage

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_ext"


def project_with(tmp_path: Path, text: str) -> Path:
    """The fixture with `text` at the end of its [tool.wheelci] table (keys of it, then its sub-tables)."""
    dest = tmp_path / "tiny_ext"
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pyproject = (dest / "pyproject.toml").read_text()
    end = pyproject.index("[tool.pytest")
    (dest / "pyproject.toml").write_text(pyproject[:end] + text + "\n\n" + pyproject[end:])
    return dest


KINDS = '''env = { EVERY = "1", SHARED = "all" }

[tool.wheelci.cuda]
env = { FORCE_CUDA = "1", SHARED = "cuda" }

[tool.wheelci.cpu]
env = { CPU_ONLY = "1" }
'''


def test_each_kind_gets_env_and_its_own_table(tmp_path):
    s = read_settings(project_with(tmp_path, KINDS))
    assert s.env == {"EVERY": "1", "SHARED": "all"}
    assert s.env_for(cuda=True) == {"EVERY": "1", "SHARED": "cuda", "FORCE_CUDA": "1"}
    assert s.env_for(cuda=False) == {"EVERY": "1", "SHARED": "all", "CPU_ONLY": "1"}


def dry_run(project: Path, *args: str) -> str:
    r = run_stage("ci.build", project, *args, "--engine", "host", "--public-env", "SHARED", "--dry-run")
    assert r.returncode == 0, r.stderr
    (line,) = [line for line in r.stdout.splitlines() if line.startswith("build env")]
    return line


def test_a_cpu_dry_run_does_not_show_force_cuda_and_a_cuda_one_does(tmp_path):
    project = project_with(tmp_path, KINDS)
    cpu = dry_run(project, "--cpu")
    cuda = dry_run(project, "--cuda", "13.0")
    assert "FORCE_CUDA" not in cpu and "CPU_ONLY=***" in cpu and "EVERY=***" in cpu and "SHARED=all" in cpu
    # a build switch of the conventions table is no secret: shown with its value (wheelci.config.switches)
    assert "FORCE_CUDA=1" in cuda and "CPU_ONLY" not in cuda and "EVERY=***" in cuda and "SHARED=cuda" in cuda


def test_env_on_the_command_line_wins_over_every_table(tmp_path):
    project = project_with(tmp_path, KINDS)
    assert "SHARED=given" in dry_run(project, "--cuda", "13.0", "--env", "SHARED=given")
    assert "SHARED=given" in dry_run(project, "--cpu", "--env", "SHARED=given")
    s = merge(read_settings(project), test_command=None, test_requires=[], env=["SHARED=x", "NEW=1"], exclude=[],
              limit=None)
    assert s.env_for(cuda=True) == {"EVERY": "1", "SHARED": "x", "NEW": "1", "FORCE_CUDA": "1"}
    assert s.env_for(cuda=False) == {"EVERY": "1", "SHARED": "x", "NEW": "1", "CPU_ONLY": "1"}


@pytest.mark.parametrize("tables, words", [
    ('[tool.wheelci.cuda]\nenvv = { FORCE_CUDA = "1" }', "unknown key 'envv' in [tool.wheelci.cuda] (did you mean 'env'?)"),
    ('[tool.wheelci.cpu]\nlimit = "pypi"', "unknown key 'limit' in [tool.wheelci.cpu]"),
    ("[tool.wheelci.cuda]\nenv = { FORCE_CUDA = 1 }", "[tool.wheelci.cuda] env must be a table of strings"),
    ('[tool.wheelci.cpu]\nenv = { "not a name" = "x" }', "[tool.wheelci.cpu] env: 'not a name' is not a variable name"),
    ('cuda = "FORCE_CUDA=1"', "[tool.wheelci.cuda] must be a table"),
    ('[tool.wheelci.gpu]\nenv = { FORCE_CUDA = "1" }', "unknown key 'gpu' in [tool.wheelci]"),
])
def test_bad_kind_tables_are_one_line_before_anything_runs(tmp_path, tables, words):
    project = project_with(tmp_path, tables)
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and words in line, r.stderr
    with pytest.raises(CiError):
        read_settings(project)
