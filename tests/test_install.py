"""The tool as another team gets it: its own wheel and sdist (`python -m build ci`), installed with pip,
pipx and uvx into environments that know nothing of this checkout, then run on a project in a
separate git repository that has a `ci/` package of its own on PYTHONPATH.

A resource missing from the wheel (a container script, the Dockerfile, the constraints, the matrix,
the glibc compat headers) fails here: the installed command is all these tests run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from tests import _proc

pytestmark = pytest.mark.network  # the tool's dependencies come from the package index

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "ci"
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
# The user's own `ci` package: importing it would mean the tool took the user's module for its own.
USER_CI = 'raise ImportError("the user\'s own ci package was imported")\n'


def _clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that points Python at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """wheelci's wheel and sdist, built by `python -m build` from a copy of ci/ (the tree stays clean)."""
    tmp = tmp_path_factory.mktemp("dists")
    src = tmp / "ci"
    shutil.copytree(TOOL, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    r = _proc.run([sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(src)],
                  capture_output=True, text=True, env=_clean_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("wheelci-*-py3-none-any.whl")
    (sdist,) = (tmp / "dist").glob("wheelci-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory) -> Path:
    """A fresh venv with the tool installed from its wheel by pip: the venv's bin directory."""
    where = tmp_path_factory.mktemp("venv") / "v"
    venv.create(where, with_pip=True)
    r = _proc.run([str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", str(dists["wheel"])],
                  capture_output=True, text=True, env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    return where / "bin"


@pytest.fixture
def user_repo(tmp_path) -> Path:
    """Another team's repository: a small extension, a `ci/` package of its own, a git history."""
    repo = tmp_path / "myproject"
    shutil.copytree(TINY, repo, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    (repo / "ci").mkdir()
    (repo / "ci" / "__init__.py").write_text(USER_CI)
    (repo / "ci" / "build.py").write_text(USER_CI)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        _proc.run([*git, *cmd], cwd=repo, check=True, capture_output=True)
    return repo


def wheelci(bin_dir: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The installed console script, run from the user's repository with its `ci/` on PYTHONPATH."""
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return _proc.run([str(bin_dir / "wheelci"), *args], cwd=cwd, capture_output=True, text=True,
                     env=_clean_env(PATH=path, PYTHONPATH=str(cwd), **env))


def test_the_wheel_carries_every_file_of_the_package(dists):
    """Everything tracked under ci/src/wheelci (modules and resources alike) is in the wheel, and the
    sdist builds from itself: nothing the installed tool reads is left behind in this checkout."""
    tracked = _proc.run(["git", "ls-files", "-z", "src/wheelci"], cwd=TOOL, capture_output=True,
                        text=True, check=True).stdout.split("\0")
    want = {str(Path(p).relative_to("src")) for p in tracked if p}
    with zipfile.ZipFile(dists["wheel"]) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert want - names == set()
    assert {"wheelci/resources/docker/manylinux-cuda.Dockerfile", "wheelci/resources/build-constraints.txt",
            "wheelci/resources/container/ensure_ccache.sh", "wheelci/config/matrix.toml"} <= names
    assert not any(n.startswith("ci/") for n in names)  # the repository's shim never ships
    assert "wheelci = wheelci.__main__:main" in entry_points


def test_installed_command_plans_a_build_in_another_repository(installed, user_repo):
    r = wheelci(installed, "build", ".", "--cpu", "--dry-run", "--json", cwd=user_repo)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    assert plan["project"] == "tiny-ext" and Path(plan["project_dir"]) == user_repo.resolve()
    assert plan["cuda"] is None and plan["backend"] == "setuptools"
    assert "own ci package" not in r.stderr


def test_installed_command_refuses_what_it_does_not_know(installed, user_repo):
    r = wheelci(installed, "buidl", ".", cwd=user_repo)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]  # one line
    assert "unknown command 'buidl'" in r.stderr and "build" in r.stderr
    r = wheelci(installed, "frob", "--json", cwd=user_repo)  # --json: the failure as one object too
    assert r.returncode == 2 and json.loads(r.stdout) == {
        "ok": False, "exit_code": 2, "stage": None, "error": r.stderr.strip().removeprefix("wheelci: error: ")}
    r = wheelci(installed, "build", "--help", cwd=user_repo)
    assert r.returncode == 0 and r.stdout.startswith("usage: wheelci build")
    r = wheelci(installed, "--version", cwd=user_repo)
    assert r.returncode == 0 and r.stdout.startswith("wheelci ")


def test_pipx_and_uvx_run_the_wheel(dists, user_repo, tmp_path):
    """pipx installs the command into its own venv; uvx runs it from the wheel without installing."""
    pipx_env = _clean_env(PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"),
                          PIPX_MAN_DIR=str(tmp_path / "man"))
    r = _proc.run([sys.executable, "-m", "pipx", "install", str(dists["wheel"])], capture_output=True,
                  text=True, env=pipx_env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = wheelci(tmp_path / "bin", "build", ".", "--cpu", "--dry-run", "--json", cwd=user_repo)
    assert r.returncode == 0, r.stderr[-2000:]
    assert Path(json.loads(r.stdout)["project_dir"]) == user_repo.resolve()

    uv = Path(sys.executable).with_name("uv")
    r = _proc.run([str(uv), "tool", "run", "--from", str(dists["wheel"]), "wheelci", "build", ".", "--cpu",
                   "--dry-run", "--json"], cwd=user_repo, capture_output=True, text=True,
                  env=_clean_env(PYTHONPATH=str(user_repo), UV_TOOL_DIR=str(tmp_path / "uvtools")))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["project"] == "tiny-ext"


def test_pip_installs_the_sdist(dists, user_repo, tmp_path):
    where = tmp_path / "v"
    venv.create(where, with_pip=True)
    r = _proc.run([str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", str(dists["sdist"])],
                  capture_output=True, text=True, env=_clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    r = wheelci(where / "bin", "plan", "--cuda", "13.0", "--engine", "docker", "--json", cwd=user_repo)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    # the container scripts the plan names are the ones the sdist's install carries
    assert plan["cuda"] == "13.0" and "ensure_ccache.sh" in plan["environment"]["CIBW_BEFORE_ALL_LINUX"]


@pytest.mark.slow
def test_installed_command_builds_and_verifies_a_wheel_in_another_repository(installed, user_repo):
    """The whole job through the installed command: compile on the host, repair, check, verify."""
    r = wheelci(installed, "build", ".", "--cpu", "--engine", "host", "-w", "out", cwd=user_repo)
    assert r.returncode == 0, r.stderr[-3000:]
    wheels = sorted((user_repo / "out").glob("tiny_ext-*.whl"))
    assert len(wheels) == 1, wheels
    report = json.loads((user_repo / "out" / "report.json").read_text())
    assert report["passed"] is True, report
    assert report["verify"]["test_command"].startswith("ok ("), report["verify"]  # tiny_ext's own pytest tests
    assert "own ci package" not in r.stderr
