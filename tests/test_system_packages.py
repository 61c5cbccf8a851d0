"""Every program the pipeline and the suite run comes from somewhere a fresh machine gets it.

A fresh machine once errored in every container test (`FileNotFoundError: 'debootstrap'`): the tool
had been installed by hand where the tests were written. The rule now: each external command named in
`ci/` or `tests/` is either a console script of `.venv` (requirements-dev.txt) or listed, with its
Debian package, in `scripts/system-packages`, which `scripts/bootstrap --system` installs. This test
reads every subprocess call and `shutil.which` in the code and fails on a command that is neither.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from tests import _proc

ROOT = Path(__file__).resolve().parents[1]
CALLS = {"run", "Popen", "check_output", "check_call", "call", "_run", "which", "ensure_debian_package",
         "run_cmd"}
ARGV = {"cmd", "argv", "command", "args"}  # variables that hold a command line
COMMAND = re.compile(r"[a-z][a-z0-9+._-]*")
VENV_BIN = Path(sys.executable).parent


def listed() -> dict[str, str]:
    """scripts/system-packages: command -> Debian package."""
    out = {}
    for line in (ROOT / "scripts" / "system-packages").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            command, package, *_ = line.split()
            out[command] = package
    return out


def commands_in(path: Path) -> dict[str, int]:
    """Commands a file runs: the literal first word of each subprocess call, `which`, or command-line
    variable (`cmd = ["tool", ...]`), name -> line."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ARGV for t in node.targets):
            value = node.value.left if isinstance(node.value, ast.BinOp) else node.value  # [...] + more
            if isinstance(value, (ast.List, ast.Tuple)) and value.elts:
                first = value.elts[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and COMMAND.fullmatch(first.value):
                    found.setdefault(first.value, node.lineno)
            continue
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in CALLS:
            continue
        first = node.args[0]
        if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
            first = first.elts[0]
        elif name not in ("which", "ensure_debian_package", "_run"):
            continue
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and COMMAND.fullmatch(first.value):
            found.setdefault(first.value, node.lineno)
    return found


def sources() -> list[Path]:
    files = [*(ROOT / "ci").rglob("*.py"), *(ROOT / "tests").glob("*.py")]
    return sorted(f for f in files if "fixtures" not in f.parts)


def test_the_scan_finds_what_it_must():
    """The scan itself can fail: it sees the commands these files are known to run."""
    assert "debootstrap" in commands_in(ROOT / "tests" / "_standin.py")
    assert "bazel" in commands_in(ROOT / "tests" / "_bazel.py")
    assert "git" in commands_in(ROOT / "ci" / "src" / "wheelci" / "compile" / "workdir.py")


def test_every_command_run_is_installed_by_the_project():
    packages = listed()
    missing = []
    for path in sources():
        for command, line in commands_in(path).items():
            if command in packages or (VENV_BIN / command).exists():
                continue
            missing.append(f"{path.relative_to(ROOT)}:{line}: {command}")
    assert not missing, ("commands neither in scripts/system-packages nor from .venv:\n" + "\n".join(missing))


def test_every_listed_command_is_here_after_bootstrap():
    """What bootstrap promises to install is installed (CI and the developers' machines are root)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("not root with apt-get: scripts/bootstrap only names what is missing")
    r = _proc.run([str(ROOT / "scripts" / "bootstrap"), "--system"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    absent = [c for c, pkg in listed().items() if pkg != "-" and not shutil.which(c, path=path)]
    assert not absent, absent


def test_bootstrap_refuses_an_unknown_option():
    r = _proc.run([str(ROOT / "scripts" / "bootstrap"), "--sytem"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown option --sytem" in r.stderr
