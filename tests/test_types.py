"""The wheelci package type-checks: mypy over it, as ci/pyproject.toml's [tool.mypy] configures it (--strict's
checks, in every module), finds nothing. Annotations nobody checks drift from the code (a tuple default for a
list, a str rebound to a Path, a None not ruled out); run here, a change that breaks them fails the suite. Shown
able to fail: the same configuration on a generated module with a type error and a stale ignore reports both,
and on a generated package with an untyped function in any module reports each.

The suite's helper modules (tests/_*.py) get mypy --strict, as tests/mypy.ini
configures it: what every test runs through (processes, servers, wheels) says what it takes and gives."""

from __future__ import annotations

import sys
from pathlib import Path

from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "ci" / "pyproject.toml"
HELPERS_CONFIG = ROOT / "tests" / "mypy.ini"  # tests/_*.py, strictly


def test_the_package_type_checks(tmp_path):
    # a cache of its own: one in the tree, cut off by an interrupted run, fails every later run (malformed sqlite)
    r = _proc.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT / "ci",
                  capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "Success: no issues found" in r.stdout, r.stdout[-2000:]


def test_the_check_reports_a_type_error(tmp_path):
    module = tmp_path / "generated.py"
    module.write_text('def first(names: list[str]) -> str:\n    return names[0]\n\n\n'
                      'count: int = first(["a"])\n'
                      'fine = 1  # type: ignore[assignment]\n')
    r = _proc.run([sys.executable, "-m", "mypy", "--config-file", str(CONFIG), str(module)], cwd=tmp_path,
                  capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ('generated.py:5: error: Incompatible types in assignment (expression has type "str", variable has '
            'type "int")  [assignment]') in r.stdout, r.stdout
    # warn_unused_ignores: the configuration, not mypy's defaults, is what ran
    assert 'generated.py:6: error: Unused "type: ignore" comment  [unused-ignore]' in r.stdout, r.stdout


def test_the_whole_package_is_checked_strictly(tmp_path):
    """mypy --strict's checks (ci/pyproject.toml's `strict`) in every module of the package, the one the data
    flows through (steps), any other, and wheelci.resources (no override exempts what runs elsewhere): an
    untyped function, a generic without its type arguments and a name taken from a module that only imports
    it are errors anywhere. mypy's defaults pass all three."""
    package = tmp_path / "src" / "wheelci"
    (package / "resources").mkdir(parents=True)
    for init in ("__init__.py", "resources/__init__.py"):
        (package / init).write_text("")
    untyped = ("steps.py", "other.py", "resources/verify_probe.py")
    for name in untyped:
        (package / name).write_text("def untyped(x):\n    return x\n")
    (package / "bare.py").write_text("import subprocess\n\n\ndef bare(p: subprocess.Popen) -> None:\n    pass\n")
    (package / "reexport.py").write_text("from wheelci.bare import subprocess\n\nsubprocess.run([])\n")
    r = _proc.run([sys.executable, "-m", "mypy", "--config-file", str(CONFIG), "--cache-dir", str(tmp_path / "cache"),
                   "src/wheelci"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    for name in untyped:
        assert f"src/wheelci/{name}:1: error: Function is missing a type annotation  [no-untyped-def]" in r.stdout, \
            r.stdout
    assert 'src/wheelci/bare.py:4: error: Missing type arguments for generic type "Popen"  [type-arg]' in r.stdout, \
        r.stdout
    assert ('src/wheelci/reexport.py:1: error: Module "wheelci.bare" does not explicitly export attribute '
            '"subprocess"  [attr-defined]') in r.stdout, r.stdout
    assert "Found 5 errors in 5 files (checked 7 source files)" in r.stdout, r.stdout


def test_the_suite_helpers_type_check_strictly(tmp_path):
    r = _proc.run([sys.executable, "-m", "mypy", "--config-file", str(HELPERS_CONFIG),
                   "--cache-dir", str(tmp_path / "cache")],
                  cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    helpers = len(list((ROOT / "tests").glob("_*.py")))
    assert f"Success: no issues found in {helpers} source files" in r.stdout, r.stdout[-2000:]


def test_the_helpers_check_reports_an_untyped_function(tmp_path):
    """The same configuration over a copy of tests/_proc.py with an untyped function and a bare Popen
    added: --strict's checks, not mypy's defaults, ran (both pass without them)."""
    copy = tmp_path / "tree" / "tests" / "_proc.py"
    copy.parent.mkdir(parents=True)
    text = (ROOT / "tests" / "_proc.py").read_text()
    line = text.count("\n") + 3
    copy.write_text(text + "\n\ndef untyped(x):\n    return x\n\n\ndef bare(p: subprocess.Popen) -> None:\n    pass\n")
    r = _proc.run([sys.executable, "-m", "mypy", "--config-file", str(HELPERS_CONFIG),
                   "--cache-dir", str(tmp_path / "cache")],
                  cwd=copy.parent.parent, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"tests/_proc.py:{line}: error: Function is missing a type annotation  [no-untyped-def]"
            in r.stdout), r.stdout
    assert (f'tests/_proc.py:{line + 4}: error: Missing type arguments for generic type "Popen"  [type-arg]'
            in r.stdout), r.stdout
    assert "Found 2 errors in 1 file (checked 1 source file)" in r.stdout, r.stdout
