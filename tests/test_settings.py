"""[tool.wheelci] is read into a typed model: unknown keys are refused with a suggestion, each value is
type-checked, a string where a list is wanted is one item (never one item per character), and
command-line options win. Checked through `ci.build --dry-run` on a copy of the setuptools fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.config.project import merge, read_settings
from tests._wheels import run_stage
from tests import _proc

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_ext"


def project_with(tmp_path: Path, table: str) -> Path:
    dest = tmp_path / "tiny_ext"
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    text = (dest / "pyproject.toml").read_text()
    start = text.index("[tool.wheelci]")
    end = text.index("[tool.pytest")
    (dest / "pyproject.toml").write_text(text[:start] + "[tool.wheelci]\n" + table + "\n\n" + text[end:])
    return dest


def test_a_string_exclude_is_one_pattern_not_one_per_character(tmp_path: Path) -> None:
    """`exclude = "libfoo*.so*"` became ['l', 'i', 'b', ..., '*']: the `*` pattern kept auditwheel
    from grafting anything."""
    s = read_settings(project_with(tmp_path, 'exclude = "libfoo*.so*"'))
    assert s.exclude == ["libfoo*.so*"]


def test_a_list_test_command_runs_each_command(tmp_path: Path) -> None:
    s = read_settings(project_with(tmp_path, 'test-command = ["python -c 1", "python -c 2"]'))
    assert s.test_command == "python -c 1 && python -c 2"


@pytest.mark.parametrize("table, words", [
    ('test_command = "pytest"', "unknown key 'test_command' in [tool.wheelci] (did you mean 'test-command'?)"),
    ('limt = "pypi"', "unknown key 'limt' in [tool.wheelci] (did you mean 'limit'?)"),
    ("limit = true", "[tool.wheelci] limit must be a size or a profile name (a string), not true"),
    ("exclude = [1, 2]", "[tool.wheelci] exclude must be a string or a list of strings"),
    ("env = { A = 1 }", "[tool.wheelci] env must be a table of strings"),
    ('env = { "not a name" = "x" }', "[tool.wheelci] env: 'not a name' is not a variable name"),
    ('env = { X = "a\\u0000b" }', "[tool.wheelci] env: X's value holds a NUL character"),
    ('test-command = "pytest\\u0000x"', "[tool.wheelci] test-command must be a non-empty string"),
    ("test-requires = 3", "[tool.wheelci] test-requires must be a string or a list of strings"),
    ("test-command = []", "[tool.wheelci] test-command must be a non-empty string or list of strings"),
    ('[tool.wheelci.extra]\nx = 1', "unknown key 'extra' in [tool.wheelci]"),
])
def test_bad_settings_are_one_line_before_anything_runs(tmp_path: Path, table: str, words: str) -> None:
    project = project_with(tmp_path, table)
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and words in line, r.stderr
    with pytest.raises(CiError):
        read_settings(project)


def test_a_broken_pyproject_is_one_line(tmp_path: Path) -> None:
    project = project_with(tmp_path, 'limit = "pypi"')
    (project / "pyproject.toml").write_bytes(b"[tool.wheelci]\nlimit = \xff\n")
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "pyproject.toml" in line and "unexpected" not in line, r.stderr


def test_command_line_options_win_and_lists_add_up(tmp_path: Path) -> None:
    s = read_settings(project_with(tmp_path, 'limit = "pypi"\nexclude = ["liba.so*"]\ntest-requires = "pytest numpy"\n'
                                             'env = { A = "1" }'))
    assert s.test_requires == ["pytest", "numpy"]
    m = merge(s, test_command="true", test_requires=["scipy"], env=["A=2", "B=3"], exclude=["libb.so*"], limit="3GB")
    assert (m.limit, m.test_command, m.exclude, m.test_requires, m.env) == (
        "3GB", "true", ["liba.so*", "libb.so*"], ["pytest", "numpy", "scipy"], {"A": "2", "B": "3"})


def test_a_setup_py_project_with_a_pep518_only_pyproject_builds(tmp_path: Path) -> None:
    """A pyproject.toml with only [build-system] (setup.py names the project) was refused as having
    no [project] name, while the same project without pyproject.toml built."""
    project = project_with(tmp_path, "")
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text[: text.index("[project]")])
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "built with setuptools" in r.stdout


def _git(*args: str, cwd: Path) -> None:
    import subprocess
    _proc.run(["git", "-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t", *args],
              cwd=cwd, check=True, capture_output=True)


def test_staging_takes_submodules_and_forgets_deleted_sources(tmp_path: Path) -> None:
    """A cutlass-style submodule was left out of the staged sources (git lists it as one entry), and a
    reused --work-dir kept files the project had deleted."""
    from wheelci.compile.workdir import stage_project
    sub = tmp_path / "cutlass"
    (sub / "include").mkdir(parents=True)
    (sub / "include" / "gemm.h").write_text("#define GEMM 1\n")
    _git("init", "-q", cwd=sub)
    _git("add", ".", cwd=sub)
    _git("commit", "-qm", "sub", cwd=sub)
    project = project_with(tmp_path, "")
    _git("init", "-q", cwd=project)
    _git("add", ".", cwd=project)
    _git("submodule", "add", "-q", str(sub), "third_party/cutlass", cwd=project)
    _git("commit", "-qm", "project", cwd=project)
    dest = tmp_path / "work" / "src"
    stage_project(project, dest)
    assert (dest / "third_party" / "cutlass" / "include" / "gemm.h").read_text() == "#define GEMM 1\n"
    assert (dest / "setup.py").is_file()
    (project / "tiny_ext" / "extra.py").write_text("x = 1\n")
    stage_project(project, dest)
    assert (dest / "tiny_ext" / "extra.py").is_file()  # untracked but not ignored: staged
    (project / "tiny_ext" / "extra.py").unlink()
    stage_project(project, dest)
    assert not (dest / "tiny_ext" / "extra.py").exists()


@pytest.mark.parametrize("engine", ["host", "docker"])
def test_a_python_verify_cannot_install_is_refused_in_the_plan(engine: str) -> None:
    """`--python 3.12` on a per-Python (setuptools) project built the cp312 wheel, then failed verify,
    which installs with the pipeline's own Python: said in the plan now, before any build."""
    import sys
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    r = run_stage("ci.build", FIXTURE, "--cpu", "--engine", engine, "--python", other, "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and f"--python {other}: verify installs each wheel with this pipeline's Python" in line, r.stderr
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert run_stage("ci.build", FIXTURE, "--cpu", "--engine", engine, "--python", here, "--dry-run").returncode == 0


@pytest.mark.parametrize("declared, kind", [
    ('build-backend = "scikit_build_core.build"', "scikit-build-core"),
    ('build-backend = "setuptools.build_meta"', "setuptools"),
    ("", "setuptools"),  # PEP 517: no backend named is setuptools' legacy one
    ('build-backend = "mesonpy"', "meson-python"),  # once given setuptools' treatment silently
    ('build-backend = "in_tree_backend"\nbackend-path = ["_build"]', "pep517"),
])
def test_backends_are_a_closed_set(tmp_path, declared, kind):
    from wheelci.config.project import Backend, backend

    (tmp_path / "pyproject.toml").write_text(f'[build-system]\nrequires = ["x"]\n{declared}\n')
    found = backend(tmp_path)
    assert isinstance(found, Backend) and found == kind and str(found) == kind


@pytest.mark.parametrize("name", ["hatchling.build", "flit_core.buildapi", "poetry.core.masonry.api"])
def test_a_pure_python_backend_is_refused_in_one_line(tmp_path, name):
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[build-system]\nrequires = ["x"]\nbuild-backend = "{name}"\n'
                                            '[project]\nname = "p"\nversion = "1"\n')
    r = run_stage("ci.build", project, "--cpu", "--dry-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"build-backend '{name}' makes pure-Python wheels" in r.stderr


def test_an_sdist_made_with_tar_dot_has_a_root_member(tmp_path):
    """`tar czf x.tar.gz -C dir .` writes `./` first: an empty one was "unexpected IndexError", a full one
    builds like any sdist."""
    import tarfile

    from wheelci.config.project import extract_sdist

    empty = tmp_path / "empty-1.0.tar.gz"
    with tarfile.open(empty, "w:gz") as tar:
        tar.add(tmp_path, arcname=".", recursive=False)
    with pytest.raises(CiError, match="one top directory, this has 0"):
        extract_sdist(empty, tmp_path / "x")
    src = tmp_path / "src" / "p-1.0"
    src.mkdir(parents=True)
    (src / "setup.py").write_text("")
    full = tmp_path / "p-1.0.tar.gz"
    with tarfile.open(full, "w:gz") as tar:
        tar.add(tmp_path / "src", arcname=".")
    assert extract_sdist(full, tmp_path / "y").name == "p-1.0"


def project_file(tmp_path: Path, old: str, new: str) -> Path:
    """The setuptools fixture with one line of its pyproject.toml (outside [tool.wheelci]) replaced."""
    dest = project_with(tmp_path, 'test-requires = ["pytest"]')
    text = (dest / "pyproject.toml").read_text()
    assert old in text
    (dest / "pyproject.toml").write_text(text.replace(old, new, 1))
    return dest


@pytest.mark.parametrize("old, new, words", [
    # a string is a sequence too: it installed the one-letter packages s, e, t, u, p, ...
    ('requires = ["setuptools>=64", "torch"]', 'requires = "setuptools"',
     "[build-system] requires must be a list of requirements, e.g. ['setuptools'], not the string 'setuptools'"),
    ('requires = ["setuptools>=64", "torch"]', 'requires = ["setuptools>=64", 3]',
     "[build-system] requires must be a list of strings, not ['setuptools>=64', 3]"),
    ('requires = ["setuptools>=64", "torch"]', 'requires = ["setuptools>=64", "torch >= two"]',
     "[build-system] requires: invalid requirement 'torch >= two'"),
    # "unexpected InvalidSpecifier" once, deep in the plan
    ('requires-python = ">=3.10"', 'requires-python = "=>3.10"',
     "[project] requires-python '=>3.10' is not a version specifier (PEP 440"),
    ('requires-python = ">=3.10"', 'requires-python = 3.10', "[project] requires-python must be a string, not 3.1"),
    ('[build-system]\n', 'tool.cibuildwheel = "cp311-*"\n[build-system]\n',
     "[tool.cibuildwheel] must be a table, not 'cp311-*'"),
])
def test_bad_pyproject_values_outside_tool_ci_are_one_line(tmp_path: Path, old: str, new: str, words: str) -> None:
    project = project_file(tmp_path, old, new)
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and line.startswith("python -m ci.build: error: ") and words in line, r.stderr
    assert str(project / "pyproject.toml") in line and "unexpected" not in line


def test_a_build_reads_pyproject_once(tmp_path: Path) -> None:
    """The project's settings, backend, name, Python range and build requirements come from one read,
    passed along: an audit hook counts every open of the file during a dry run."""
    import subprocess
    import sys

    project = project_with(tmp_path, 'test-requires = ["pytest"]')
    probe = ("import sys\nopened = []\n"
             "sys.addaudithook(lambda event, args: event == 'open' and str(args[0]).endswith('pyproject.toml')"
             " and opened.append(str(args[0])))\n"
             "from wheelci.__main__ import main\n"
             "try:\n    main(sys.argv[1:])\nfinally:\n    print('OPENED', len(opened), file=sys.stderr)\n")
    root = Path(__file__).resolve().parent.parent
    r = _proc.run([sys.executable, "-c", probe, "build", str(project), "--cpu", "--engine", "host", "--dry-run"],
                  capture_output=True, text=True, cwd=root, env={**__import__("os").environ,
                                                                "PYTHONPATH": str(root / "ci" / "src")})
    assert r.returncode == 0, r.stderr
    assert "build requires  setuptools>=64 torch" in r.stdout  # the dry run shows what it read
    assert r.stderr.strip().splitlines()[-1] == "OPENED 1", r.stderr
