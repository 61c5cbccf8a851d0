"""The command-line contract as a user meets it, from a directory of their own.

Every entry point (`wheelci STAGE`, `python -m wheelci.STAGE`, `python -m ci.STAGE`, scripts/build) reads
relative paths against the directory it was run from, never the tool's; with --json, a failure is one
JSON object on stdout (`ok`, `error`, `exit_code`, `stage`) for every stage that has --json; `wheelci`
itself answers an unknown command in one line and names each stage `wheelci STAGE` in its help.

The user's directory holds a small extension (tests/fixtures/tiny_ext) and a `ci/` package of its own
that raises when imported, on PYTHONPATH: the tool taking the user's module for its own fails here.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._wheels import build_wheel
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "ci" / "src"  # the tool's package alone: no `ci` shim on this path
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
USER_CI = 'raise ImportError("the user\'s own ci package was imported")\n'
# What the installed console script runs (pip's wrapper: argv[0] is the command, exit with main's code).
CONSOLE = "import sys; from wheelci.__main__ import main; sys.argv[0] = 'wheelci'; sys.exit(main())"

ENTRY_POINTS = ("wheelci STAGE", "python -m wheelci STAGE", "python -m wheelci.STAGE", "python -m ci.STAGE")


def command(entry: str, stage: str) -> list[str]:
    return {
        "wheelci STAGE": [sys.executable, "-c", CONSOLE, stage],
        "python -m wheelci STAGE": [sys.executable, "-m", "wheelci", stage],
        "python -m wheelci.STAGE": [sys.executable, "-m", f"wheelci.{stage}"],
        "python -m ci.STAGE": [sys.executable, "-m", f"ci.{stage}"],
        "scripts/build": [str(ROOT / "scripts" / "build")],
    }[entry]


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """Another team's repository: the extension, a `ci/` package of its own, a wheel in dists/."""
    repo = tmp_path / "myproject"
    shutil.copytree(TINY, repo, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    (repo / "ci").mkdir()
    (repo / "ci" / "__init__.py").write_text(USER_CI)
    (repo / "ci" / "build.py").write_text(USER_CI)
    build_wheel(repo / "dists", name="demo")
    return repo.resolve()  # as the commands' working directory reads it


def run(entry: str, stage: str, *args: str | Path, repo: Path, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """`entry` run as the user would, from their repository with its `ci/` first on PYTHONPATH.

    `python -m ci.STAGE` is this checkout's own spelling (the repository root on PYTHONPATH): it runs from
    the directory above the user's repository, where no other `ci` is in the way, and `@/` in an
    argument stands for the user's repository as a relative path from wherever the command runs."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    if entry == "python -m ci.STAGE":
        cwd, prefix, path = repo.parent, f"{repo.name}/", [ROOT]
    else:
        cwd, prefix, path = repo, "", [repo, SRC]
    if entry == "scripts/build":
        path = [repo]  # scripts/build brings its own interpreter and package
    base["PYTHONPATH"] = os.pathsep.join(map(str, path))
    argv = [str(a).replace("@/", prefix) if str(a).startswith("@/") else str(a) for a in args]
    argv = [a if a != "@" else (prefix.rstrip("/") or ".") for a in argv]
    return _proc.run([*command(entry, stage), *argv], cwd=cwd, capture_output=True, text=True,
                     env={**base, **(env or {})}, timeout=timeout)


def error_text(r: subprocess.CompletedProcess) -> str:
    """The text of the one `...: error: TEXT` line on stderr."""
    (line,) = [line for line in r.stderr.splitlines() if ": error: " in line]
    return line.split(": error: ", 1)[1]


def failure(r: subprocess.CompletedProcess, stage: str, code: int) -> dict:
    """The --json failure document, checked against the exit status and the stderr line."""
    assert r.returncode == code, (r.returncode, r.stdout[-1000:], r.stderr[-2000:])
    doc = json.loads(r.stdout)
    assert isinstance(doc, dict), doc
    assert doc["ok"] is False and doc["exit_code"] == code and doc["stage"] == stage, doc
    assert doc["error"] == error_text(r) and "\n" not in doc["error"], (doc, r.stderr)
    return doc


# ---------------------------------------------------------------- paths are the user's


@pytest.mark.parametrize("entry", [*ENTRY_POINTS, "scripts/build"])
def test_every_entry_point_plans_the_users_project(entry, user_repo):
    """The reported case: `.wheelci/scripts/build .` changed into the tool's folder and planned its
    example. From the user's directory, `.` is their project, whichever way the tool is run."""
    r = run(entry, "build", "@", "--cpu", "--dry-run", "--json", repo=user_repo)
    assert r.returncode == 0, r.stderr[-3000:]
    plan = json.loads(r.stdout)
    assert plan["project"] == "tiny-ext" and Path(plan["project_dir"]) == user_repo, plan
    assert plan["backend"] == "setuptools" and plan["cuda"] is None
    assert "own ci package" not in r.stderr


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_relative_inputs_and_outputs_are_the_users(entry, user_repo):
    """DIR, --out, WHEEL and -w given relative land under the user's directory, and the results name
    them absolutely (a tool run elsewhere by the stage gets the same path)."""
    r = run(entry, "index", "@/dists", "--out", "@/site", "--json", repo=user_repo)
    assert r.returncode == 0, r.stderr[-2000:]
    assert Path(json.loads(r.stdout)["out"]) == user_repo / "site"
    assert (user_repo / "site" / "demo" / "index.html").is_file()

    r = run(entry, "patch", "@/dists/demo-1.0-py3-none-any.whl", "--local-version", "mine", "-w", "@/out",
            "--json", repo=user_repo)
    assert r.returncode == 0, r.stderr[-2000:]
    patched = Path(json.loads(r.stdout)["wheel"])
    assert patched == user_repo / "out" / "demo-1.0+mine-py3-none-any.whl" and patched.is_file()
    assert not (ROOT / "site").exists() and not (ROOT / "out" / patched.name).exists()


@pytest.mark.slow
@pytest.mark.network
def test_scripts_build_builds_the_users_project_into_their_directory(user_repo):
    """A real host build through scripts/build from the user's repository: the wheel, the report and
    the kept work files are under their directory; the tool's folder gets nothing."""
    before = {p.name for p in ROOT.iterdir()}
    r = run("scripts/build", "build", ".", "--cpu", "--engine", "host", "-w", "out", "--work-dir", "work",
            repo=user_repo, timeout=3000)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (user_repo / "out").glob("tiny_ext-*.whl")
    report = json.loads((user_repo / "out" / "report.json").read_text())
    assert report["passed"] is True and report["plan"]["project_dir"] == str(user_repo)
    assert [w["name"] for w in report["wheels"]] == [wheel.name]
    assert (user_repo / "work").is_dir() and any((user_repo / "work").iterdir())
    assert not (user_repo / "work" / "src" / "work").exists()  # the work directory is not source
    assert {p.name for p in ROOT.iterdir()} == before
    assert "own ci package" not in r.stderr


def test_the_scripts_work_from_another_directory(tmp_path):
    """scripts/bootstrap and scripts/test find the checkout from their own location, not the caller's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = _proc.run([str(ROOT / "scripts" / "bootstrap"), "--venv"], cwd=tmp_path, capture_output=True,
                  text=True, env=env)
    assert r.returncode == 0, r.stderr
    r = _proc.run([str(ROOT / "scripts" / "test"), "-p", "no:cacheprovider", "--collect-only", "-q",
                   "tests/test_cli_contract.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "test_cli_contract.py::test_the_scripts_work_from_another_directory" in r.stdout
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- --json failures are one document


MISSING = "nowhere-1.0-py3-none-any.whl"
# For every stage with --json: a failure cheap to reach, and its exit status. Usage errors (argparse's)
# and the stages' own checks alike; a finding (exit 1) where one needs no torch.
FAILURES: dict[str, list[tuple[list[str], int]]] = {
    "build": [(["./nowhere", "--cpu", "--dry-run", "--json"], 2),
              (["--json", "--cpu", "--cuda", "13.0"], 2)],
    "plan": [(["--cuda", "10.2", "--json"], 2)],
    "repair": [([MISSING, "-w", "out", "--json"], 2)],
    "check": [([MISSING, "--json"], 2),
              (["--json"], 2),
              (["dists/demo-1.0-py3-none-any.whl", "--limit", "100", "--json"], 1)],
    "split": [([MISSING, "--limit", "pypi", "-w", "out", "--json"], 2)],
    "patch": [([MISSING, "-w", "out", "--json"], 2)],
    "preload": [(["dists", "--inject", "dists/demo-1.0-py3-none-any.whl", "--json"], 2)],
    "index": [(["nowhere", "--json"], 2)],
    "upload": [(["--repository-url", "http://127.0.0.1:9/", "--json", MISSING], 2)],
    "verify": [([MISSING, "--torch-site", ".", "--json"], 2)],
    "abi": [([MISSING, "--json"], 2)],
    "image": [(["build", "--cuda", "10.2", "--dry-run", "--json"], 2),
              (["build", "--json"], 2)],
    "engine": [(["--json", "--no-such-option"], 2)],
    "cache": [(["prune", "--max-size", "lots", "--json"], 2)],
    "bench": [(["surgery", "--json", "--split-limit"], 2)],
}
CASES = [(stage, args, code) for stage, cases in FAILURES.items() for args, code in cases]


def test_every_stage_with_json_has_a_failure_case():
    """A stage that gains --json joins the table above (and so this contract)."""
    import importlib

    from wheelci.__main__ import STAGES
    from wheelci.cli import _has_json

    with_json = {s for s, m in STAGES.items()
                 if hasattr(mod := importlib.import_module(f"wheelci.commands.{m}"), "build_parser")
                 and _has_json(mod.build_parser())}
    assert with_json == set(FAILURES)


@pytest.mark.parametrize("stage, args, code", CASES, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(CASES)])
def test_a_json_failure_is_one_object_on_stdout(stage, args, code, user_repo):
    r = run("wheelci STAGE", stage, *args, repo=user_repo)
    doc = failure(r, stage, code)
    assert not (user_repo / "out").exists()  # nothing half-written
    if code == 1:  # the check's results, which it printed before failing, are kept inside
        (result,) = doc["result"]
        assert result["ok"] is False and Path(result["wheel"]) == user_repo / "dists" / "demo-1.0-py3-none-any.whl"
    else:
        assert "result" not in doc


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_gives_the_same_failure_document(entry, user_repo):
    r = run(entry, "check", f"@/{MISSING}", "--json", repo=user_repo)
    assert str(user_repo / MISSING) in failure(r, "check", 2)["error"]


def test_success_output_is_unchanged(user_repo):
    """The result alone, as before: no `ok` added to what a stage prints when it succeeds."""
    r = run("wheelci STAGE", "check", "dists/demo-1.0-py3-none-any.whl", "--json", repo=user_repo)
    assert r.returncode == 0, r.stderr
    (result,) = json.loads(r.stdout)
    assert result["ok"] is True and set(result) >= {"wheel", "size", "limit", "largest"}


def test_the_error_is_escaped_as_on_stderr(user_repo):
    """A terminal escape in an argument reaches neither stream raw; both carry the same escaped text."""
    r = run("wheelci STAGE", "engine", "--json", "--bad\x1b[2J", repo=user_repo)
    doc = failure(r, "engine", 2)
    assert "\x1b" not in r.stdout + r.stderr and "--bad\\x1b[2J" in doc["error"]


def refusing_server(secret: str):
    """An index on loopback that refuses every upload, repeating the request's Authorization header and
    `secret` in its error page, as a careless proxy does (test_upload's). Yields its host:port."""
    from tests.test_upload import echo_server

    return echo_server(f" ({secret})")


def test_secrets_stay_out_of_the_failure_document(user_repo):
    token = "Tok-3141-secret"
    with refusing_server(token) as address:
        r = run("wheelci STAGE", "upload", "--repository-url", f"http://alice:{token}@{address}/", "--retries", "0",
                "--json", "dists/demo-1.0-py3-none-any.whl", repo=user_repo, timeout=120)
    doc = failure(r, "upload", 1)
    assert "bad request from" in doc["error"]
    for secret in (token, base64.b64encode(f"alice:{token}".encode()).decode()):
        assert secret not in r.stdout and secret not in r.stderr


# ---------------------------------------------------------------- the `wheelci` command itself


def test_an_unknown_command_is_one_line_and_exit_2(user_repo):
    r = run("wheelci STAGE", "buidl", ".", repo=user_repo)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("wheelci: error: unknown command 'buidl'")
    assert "build" in r.stderr


def test_help_lists_every_stage_and_names_each_wheelci_stage(user_repo):
    from wheelci.__main__ import STAGES

    r = run("wheelci STAGE", "--help", repo=user_repo)
    assert r.returncode == 0 and r.stderr == ""
    assert all(stage in r.stdout for stage in STAGES)
    for stage in STAGES:
        r = run("wheelci STAGE", stage, "--help", repo=user_repo)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: wheelci {stage}"), (stage, r.stdout[:200], r.stderr)
    r = run("wheelci STAGE", "image", "build", "--help", repo=user_repo)
    assert r.returncode == 0 and r.stdout.startswith("usage: wheelci image build")


# ---------------------------------------------------------------- other stages named as the user runs the tool


# A Python the default torch line has wheels for and this interpreter is not (cibuildwheel would build it).
OTHER_PYTHON = "3.13" if sys.version_info[:2] == (3, 12) else "3.12"
# Each way of running `plan`, and how it names a stage: the console entry (`python -m wheelci STAGE` sets
# wheelci.util.invocation.COMMAND as the `wheelci` script does), the package's module, and this repository's `ci` package.
NAMING = {
    "python -m wheelci STAGE": ([sys.executable, "-m", "wheelci", "plan"], "wheelci {}"),
    "python -m wheelci.STAGE": ([sys.executable, "-m", "wheelci.plan"], "python -m wheelci.{}"),
    "python -m ci.STAGE": ([sys.executable, "-m", "ci.plan"], "python -m ci.{}"),
}


@pytest.mark.parametrize("entry", NAMING)
def test_an_error_names_another_stage_the_way_the_user_runs_the_tool(entry):
    """`plan --python X.Y` for a cp3X project, X.Y not the pipeline's Python, refuses and sends the user to
    the build stage under that Python: named as they ran the tool (`wheelci build` to a user of `wheelci`),
    never as another entry point spells it."""
    argv, spelling = NAMING[entry]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(SRC)])
    r = _proc.run([*argv, "--python", OTHER_PYTHON, "--engine", "host", "--project-dir", str(TINY)],
                  capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"{spelling.format('plan')}: error: --python {OTHER_PYTHON}: "), line
    assert line.endswith(f", or run {spelling.format('build')} with Python {OTHER_PYTHON}"), line
    for _, other in NAMING.values():
        if other != spelling:
            assert other.format("build") not in line, line


PACKAGE = SRC / "wheelci"
# The stage spellings in the package's strings that must stay as they are, each with why: (file, the string).
FIXED_SPELLINGS = {
    ("wheelci/cibw.py", " python -m wheelci.repair -w {dest_dir} {wheel}"):
        "cibuildwheel's repair command (REPAIR_COMMAND): it runs inside the build container, where this package "
        "is mounted at /opt/cuda-wheel-ci and `python -m wheelci.repair` is what is there, however the user "
        "ran the tool",
}


def stage_spellings(source: str, filename: str = "<source>") -> list[tuple[str, str]]:
    """(filename, the string) for each string constant of `source`, docstrings aside (comments are not in
    the tree), that spells a stage command the repository's way (`ci.index`, `python -m ci.index`) or
    names an entry point (`python -m wheelci.index`): text a user sees names a stage through
    wheelci.cli.command, as they run the tool. A module given to `-m` alone (`"wheelci.index"`) is no text."""
    import ast
    import re

    from wheelci.__main__ import STAGES

    stages = "|".join(STAGES)
    spelled = re.compile(rf"python -m (?:wheelci|ci)\.(?:{stages})\b|(?<![\w./-])ci\.(?:{stages})\b")
    tree = ast.parse(source, filename)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    hits = [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and spelled.search(node.value)]
    return [(filename, node.value) for node in sorted(hits, key=lambda n: (n.lineno, n.col_offset))]


def package_spellings() -> list[tuple[str, str]]:
    return [hit for path in sorted(PACKAGE.rglob("*.py"))
            for hit in stage_spellings(path.read_text(encoding="utf-8"), path.relative_to(SRC).as_posix())]


def test_no_string_of_the_package_spells_a_stage_command():
    assert len(list(PACKAGE.rglob("*.py"))) > 20  # the real package, not an empty glob
    found = package_spellings()
    offenders = [f"{name}: {text!r}" for name, text in found if (name, text) not in FIXED_SPELLINGS]
    assert not offenders, ("name stages through wheelci.cli.command (or add the string to FIXED_SPELLINGS, "
                           "with why): " + "; ".join(offenders))
    assert set(FIXED_SPELLINGS) <= set(found)  # each exception still exists: none outlives its string


def test_the_spelling_check_finds_them_in_generated_source():
    source = '''"""A stage that says `python -m ci.index` in its docstring (for developers)."""
from wheelci.cli import command
from wheelci.errors import CiError

def stage(x):
    """Runs ci.build."""
    # ci.split comment
    if x:
        raise CiError("no simple page: run ci.index first")
    if x > 1:
        raise CiError(f"{x}: see `python -m ci.build --help`")
    run(["-m", "wheelci.build", "wheelci.cdx.json", "ci.config", "ci.native.elf"])
    print(f"{command('index')} wrote it; python -m wheelci.split did not")
'''
    assert stage_spellings(source, "gen.py") == [
        ("gen.py", "no simple page: run ci.index first"), ("gen.py", ": see `python -m ci.build --help`"),
        ("gen.py", " wrote it; python -m wheelci.split did not")]
    offenders = stage_spellings(source.replace("ci.index first", "{command('index')} first"), "gen.py")
    assert ("gen.py", "no simple page: run ci.index first") not in offenders and len(offenders) == 2
