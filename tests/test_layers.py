"""The layering of ci/ (pyproject's [tool.importlinter]): imports go one way, a stage never imports
another stage, the library never imports the command line (wheelci.commands, wheelci.cli), and
ci/resources imports nothing of ci. Checked with import-linter on the real tree,
and shown able to fail on a copy with one import against the grain."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent / "ci"  # the tool's distribution: its pyproject holds the contract
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    return _proc.run([str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")], cwd=root,
                     capture_output=True, text=True, env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"})


def test_the_layers_hold():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "3 kept, 0 broken" in r.stdout


def test_an_import_against_the_layers_breaks_the_contract(tmp_path):
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "src" / "wheelci", copy / "src" / "wheelci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    names = copy / "src" / "wheelci" / "wheel" / "names.py"
    names.write_text(names.read_text() + "\n\ndef _late():\n    from wheelci.split import split_wheel  # a stage, from below\n")
    check = copy / "src" / "wheelci" / "check.py"  # a stage that reaches for the command line
    check.write_text(check.read_text() + "\n\ndef _late():\n    from wheelci.cli import parser\n")
    probe = copy / "src" / "wheelci" / "resources" / "verify_probe.py"
    probe.write_text(probe.read_text() + "\nfrom wheelci.errors import CiError\n")
    r = lint(copy)
    assert r.returncode != 0
    assert "0 kept, 3 broken" in r.stdout, r.stdout[-3000:]
    assert "wheelci.wheel.names -> wheelci.split" in r.stdout and "wheelci.resources.verify_probe -> wheelci.errors" in r.stdout
    assert "wheelci.check -> wheelci.cli" in r.stdout


def _contract() -> tuple[set[str], set[str]]:
    """The modules the layers name, and those the resources contract names."""
    from wheelci.util import toml

    config = toml.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {m.strip() for c in config if c["type"] == "layers" for layer in c["layers"] for m in layer.split("|")}
    sources = {m for c in config if c["type"] == "forbidden" for m in c["source_modules"]}
    return layered, sources


def test_every_module_is_in_a_layer():
    """A new module in no layer would pass lint-imports unchecked: each top-level module and package of
    wheelci is named by the contract (the package's own __init__ aside)."""
    layered, sources = _contract()
    package = ROOT / "src" / "wheelci"
    tops = {f"wheelci.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    tops |= {f"wheelci.{p.parent.name}" for p in package.glob("*/__init__.py")}
    assert tops - layered - sources == set()
    assert (layered | sources) - tops == set()  # and the contract names nothing that is gone


def test_a_module_in_no_layer_fails_the_completeness_check(tmp_path, monkeypatch):
    copy = tmp_path / "ci"
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / "src" / "wheelci" / "signature.py").write_text('"""a new step nobody placed"""\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", copy)
    with pytest.raises(AssertionError, match="wheelci.signature"):
        test_every_module_is_in_a_layer()
