"""A build never changes the cached environment, and every build gets exactly its own requirements
(wheelci.compile.overlay): the shared torch environment under a venv of the build tree's own.

Real builds (`--compile-only`: the environment is all these ask about) of pure-Python setuptools projects,
each of whose setup.py says which setuptools it runs with; one installs a package into its running
interpreter while it builds, as one real backend did."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests._servers import build_wheel
from tests._wheels import run_stage
from wheelci.compile import overlay
from wheelci.compile.hostenv import CHANGED, BuildEnv, TorchSpec, _load_env, ensure_env

SETUP = """\
import importlib.metadata, os, subprocess, sys
from setuptools import setup
print("setuptools in the build:", importlib.metadata.version("setuptools"), flush=True)
if os.environ.get("INSTALL_WHILE_BUILDING"):  # a backend that pip-installs into the running environment
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                           os.environ["INSTALL_WHILE_BUILDING"]])
setup(name="{name}", version="1.0", py_modules=["{name}"])
"""


def project(tmp: Path, name: str, requires: str) -> Path:
    root = tmp / name
    root.mkdir()
    (root / "pyproject.toml").write_text(f'[build-system]\nrequires = ["{requires}", "torch"]\n'
                                         'build-backend = "setuptools.build_meta"\n')
    (root / "setup.py").write_text(SETUP.format(name=name))
    (root / f"{name}.py").write_text("VALUE = 1\n")
    return root


def compiled(tmp: Path, root: Path, **env: str) -> str:
    """The setuptools version the project's build ran with (its compile log says)."""
    work = tmp / f"work-{root.name}"
    r = run_stage("ci.build", root, "--cpu", "--engine", "host", "--compile-only", "-w", tmp / f"out-{root.name}",
                  "--work-dir", work, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "the build changed the shared build environment" not in r.stderr
    m = re.search(r"^setuptools in the build: (\S+)$", (work / "compile.log").read_text(), re.M)
    assert m, (work / "compile.log").read_text()[-2000:]
    return m[1]


def shared() -> BuildEnv:
    return ensure_env(TorchSpec("2.13.0", None, None, False))


@pytest.mark.slow
@pytest.mark.network
def test_conflicting_build_requirements_each_get_their_own_in_either_order(tmp_path):
    old, new = project(tmp_path, "wants_old", "setuptools<81"), project(tmp_path, "wants_new", "setuptools>=82")
    before = overlay.fingerprint(shared())
    first = [compiled(tmp_path, old), compiled(tmp_path, new)]
    again = [compiled(tmp_path, new), compiled(tmp_path, old)]  # the other order, each tree reused
    assert [int(v.split(".")[0]) < 81 for v in first] == [True, False], first
    assert again == first[::-1]
    assert overlay.fingerprint(shared()) == before  # neither reached the shared environment


@pytest.mark.slow
@pytest.mark.network
def test_a_backend_that_installs_while_it_builds_leaves_the_shared_environment_as_it_was(tmp_path):
    wheel = build_wheel(tmp_path / "wheels", name="installed_while_building", module="installed_while_building")
    root = project(tmp_path, "installer", "setuptools")
    env = shared()
    before = overlay.fingerprint(env)
    compiled(tmp_path, root, INSTALL_WHILE_BUILDING=str(wheel))
    assert overlay.fingerprint(env) == before
    assert not list(env.site.glob("installed_while_building*"))
    own = next((tmp_path / "work-installer" / overlay.OVERLAY).glob("lib/python*/site-packages"))
    assert list(own.glob("installed_while_building*.dist-info")), "it went into the build's own environment"


def test_a_shared_environment_changed_anyway_is_marked_and_made_again(tmp_path):
    """What the fingerprint sees (an install, an upgrade's new .dist-info, a reinstall's RECORD) and what a
    change does: the environment is marked, and the next build's load of it refuses it."""
    root = tmp_path / "env"
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (root / "bin").mkdir()
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (root / ".complete.json").write_text(json.dumps({"site": str(site), "version": "2.13.0", "cuda": None,
                                                      "requires": []}))
    env, why = _load_env(root)
    assert env is not None, why
    before = overlay.fingerprint(env)
    (site / "torch" / "__pycache__").mkdir()  # importing torch writes this: not a change
    assert not overlay.changed_by_the_build(env, before)
    (site / "sympy-1.14.0.dist-info").mkdir()
    (site / "sympy-1.14.0.dist-info" / "RECORD").write_text("x\n")
    assert overlay.changed_by_the_build(env, before)
    assert (root / CHANGED).is_file()
    assert _load_env(root) == (None, "a build changed it (wheelci.compile.overlay)")
    # a reinstall of the same version rewrites RECORD: seen too
    (root / CHANGED).unlink()
    again = overlay.fingerprint(env)
    (site / "sympy-1.14.0.dist-info" / "RECORD").write_text("x\ny\n")
    assert overlay.fingerprint(env) != again


@pytest.mark.slow
@pytest.mark.network
def test_what_the_frontend_finds_the_project_asks_for_is_installed_and_remembered(tmp_path):
    """A setup_requires the build cannot read from [build-system] (flash-attn's psutil): the frontend's
    check names it, the build installs it into its own environment and compiles again; the next build of
    the tree has it from the start."""
    wheel = build_wheel(tmp_path / "wheels", name="asked_for", module="asked_for")
    root = project(tmp_path, "asker", "setuptools")
    setup = root / "setup.py"
    setup.write_text(setup.read_text().replace('py_modules=["asker"])', 'py_modules=["asker"], setup_requires=["asked_for"])'))
    links = {"PIP_FIND_LINKS": " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS"), str(wheel.parent)]))}
    env = shared()
    before = overlay.fingerprint(env)
    for attempt in range(2):
        r = run_stage("ci.build", root, "--cpu", "--engine", "host", "--compile-only", "-w", tmp_path / "out",
                      "--work-dir", tmp_path / "work", env=links)
        assert r.returncode == 0, r.stderr[-3000:]
        said = "the project asks for asked_for to build (its setup_requires)" in r.stderr
        assert said == (attempt == 0), r.stderr[-2000:]
    assert overlay.fingerprint(env) == before and not list(env.site.glob("asked_for*"))


@pytest.mark.slow
@pytest.mark.network
def test_a_requirement_that_wants_another_torch_is_one_error_not_a_second_torch(tmp_path):
    """torchvision 0.20.0 pins torch 2.5.0: the build's venv keeps the shared torch (a constraint), so pip
    refuses the set instead of installing a second torch in front of the plan's."""
    root = project(tmp_path, "vision", "setuptools")
    r = run_stage("ci.build", root, "--cpu", "--engine", "host", "--compile-only", "--build-requires",
                  "torchvision==0.20.0", "-w", tmp_path / "out", "--work-dir", tmp_path / "work")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "installing the build requirements" in r.stderr.splitlines()[-1] and "torch" in r.stderr.splitlines()[-1]
    assert not list((tmp_path / "work" / overlay.OVERLAY).glob("lib/python*/site-packages/torch"))
