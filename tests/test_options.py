"""The options layer (wheelci.config.options): each setting declared once, resolved flags > WHEELCI_*
variables > [tool.wheelci] > defaults; the older [tool.ci] table still read with one deprecation line;
an unknown key or variable refused with the closest known name."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheelci.config import options
from wheelci.config.options import Table, read_table, resolve
from wheelci.errors import CiError
from tests._wheels import run_stage


def test_a_flag_wins_over_a_variable_which_wins_over_the_table():
    table = read_table({"limit": "pypi", "torch": "2.10.0", "test-command": "true"})
    o = resolve("build", {"limit": "3GB"}, {"WHEELCI_TORCH": "2.11.0"}, table)
    assert (o.limit, o.torch, o.test_command) == ("3GB", "2.11.0", "true")
    assert o.sources["limit"] == "flag" and o.sources["torch"] == "variable" and o.sources["test_command"] == "table"
    assert resolve("build", {}, {}, Table()).engine == "auto"  # the default


def test_lists_and_build_variables_add_up_over_the_sources():
    table = read_table({"exclude": "liba.so*", "env": {"A": "1", "B": "table"}})
    o = resolve("build", {"exclude": ["libc.so*"], "env": ["B=flag"]},
                {"WHEELCI_EXCLUDE": "libb.so*", "WHEELCI_ENV": "C='x y' B=variable"}, table)
    assert o.exclude == ("liba.so*", "libb.so*", "libc.so*")
    assert o.env == {"A": "1", "B": "flag", "C": "x y"}


def test_variables_are_typed():
    o = resolve("build", {}, {"WHEELCI_VARIANTS": "yes", "WHEELCI_ALLOW_NO_DEVICE_CODE": "0",
                              "WHEELCI_CUDA": "cpu", "WHEELCI_TEST_REQUIRES": "pytest numpy"})
    assert (o.variant, o.allow_no_device_code, o.cuda, o.test_requires) == (True, False, None, ("pytest", "numpy"))
    with pytest.raises(CiError, match="WHEELCI_VARIANTS='maybe': want 1, true"):
        resolve("build", {}, {"WHEELCI_VARIANTS": "maybe"})
    with pytest.raises(CiError, match="WHEELCI_ENGINE='lxc' must be one of auto, host, docker, podman"):
        resolve("build", {}, {"WHEELCI_ENGINE": "lxc"})


def test_an_unknown_variable_is_one_warning_with_the_closest_name_never_an_error():
    """The environment is the user's CI's: a WHEELCI_VERSION pinning the tool's own install, or a typo, is
    said once with the closest name, and the build goes on (as cibuildwheel and uv do)."""
    said: list[str] = []
    o = resolve("build", {}, {"WHEELCI_TEST_COMAND": "true", "WHEELCI_VERSION": "0.5.0", "WHEELCI_TORCH": "2.13.0"},
                warn=said.append)
    assert o.torch == "2.13.0" and o.test_command is None
    assert said == ["WHEELCI_TEST_COMAND is not a variable of this tool (did you mean WHEELCI_TEST_COMMAND?): ignored",
                    "WHEELCI_VERSION is not a variable of this tool (did you mean WHEELCI_LOCAL_VERSION?): ignored"]
    resolve("build", {}, {"WHEELCI_TEST_COMAND": "true"}, warn=said.append)
    assert len(said) == 2  # once per process


def test_every_variable_the_tool_reads_or_sets_is_declared():
    """One list of the tool's variables (the options' and util.variables'): every WHEELCI_* name written
    anywhere in the package, its resources and its workflows is in it, so none set by the tool itself is
    ever warned about as unknown (WHEELCI_SCCACHE_TIMEOUT once was refused)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    texts = [p.read_text() for p in (root / "ci" / "src" / "wheelci").rglob("*") if p.suffix in (".py", ".sh", ".json")]
    texts += [p.read_text() for p in (root / ".github").rglob("*.yml")]
    names = {n for t in texts for n in re.findall(r"\bWHEELCI_[A-Z0-9_]*[A-Z0-9]\b", t)}
    assert {"WHEELCI_SCCACHE_TIMEOUT", "WHEELCI_COMPILE_CACHE"} <= names
    assert not names - set(options.KNOWN_VARIABLES), sorted(names - set(options.KNOWN_VARIABLES))


def test_the_kind_table_goes_over_the_table_for_its_kind_only():
    table = read_table({"env": {"A": "1"}, "cuda": {"env": {"FORCE_CUDA": "1"}}})
    assert resolve("build", {"cuda": "13.0"}, {}, table).env == {"A": "1", "FORCE_CUDA": "1"}
    assert resolve("build", {"cpu": True}, {}, table).env == {"A": "1"}


def test_every_declaration_is_whole():
    """A flag for each option, variables under the one prefix, a known group, no key twice."""
    for o in options.OPTIONS:
        assert o.flags and o.group in options.GROUPS and set(o.commands) <= set(options.COMMANDS), o
        assert o.variable is None or o.variable.startswith("WHEELCI_"), o
    keys = [o.key for o in options.OPTIONS if o.key]
    assert len(keys) == len(set(keys))


def _project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                             '"setuptools.build_meta"\n[project]\nname = "p"\nversion = "1"\n' + table)
    return tmp_path


def test_the_old_table_is_read_with_one_deprecation_line(tmp_path):
    project = _project(tmp_path, '[tool.ci]\nlimit = "github"\n')
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith("limit")] == ["limit           github"] or \
        "github" in [line for line in r.stdout.splitlines() if line.startswith("limit")][0]
    (line,) = [line for line in r.stderr.splitlines() if "deprecated" in line]
    assert "[tool.ci]" in line and "use [tool.wheelci]" in line, r.stderr


def test_both_tables_is_one_error(tmp_path):
    project = _project(tmp_path, '[tool.wheelci]\nlimit = "pypi"\n[tool.ci]\nlimit = "github"\n')
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "both [tool.wheelci] and [tool.ci]" in line, r.stderr


def test_a_typo_in_the_new_table_gets_the_closest_key(tmp_path):
    project = _project(tmp_path, '[tool.wheelci]\ntest_command = "true"\n')
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "unknown key 'test_command' in [tool.wheelci] (did you mean 'test-command'?)" in line


def test_build_needs_a_kind_from_a_flag_or_a_variable(tmp_path):
    project = _project(tmp_path, "")
    r = run_stage("ci.build", project, "--engine", "host", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "one of the arguments --cuda --cpu is required" in line, r.stderr
    r = run_stage("ci.build", project, "--engine", "host", "--dry-run", env={"WHEELCI_CUDA": "cpu"})
    assert r.returncode == 0 and "none (CPU build)" in r.stdout, r.stderr


def test_an_old_variable_is_read_with_one_deprecation_line(tmp_path):
    from wheelci.util import variables

    assert variables.read({"CUDA_WHEEL_CI_CACHE": "/old"}, variables.CACHE_DIR) == "/old"
    assert variables.read({"CUDA_WHEEL_CI_CACHE": "/old", "WHEELCI_CACHE_DIR": "/new"}, variables.CACHE_DIR) == "/new"
    project = _project(tmp_path, "")
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "--dry-run",
                  env={"CI_HEARTBEAT": "30", "CUDA_WHEEL_CI_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if "deprecated" in line]
    assert len(lines) == 2 and any("$CI_HEARTBEAT is deprecated: use $WHEELCI_HEARTBEAT" in x for x in lines), lines
    assert f"ccache          {tmp_path / 'cache' / 'ccache'}" in r.stdout or str(tmp_path / "cache") in r.stdout


# ---------------------------------------------------------------- one plan, whichever source names it

SETTINGS = [  # (flag words, [tool.wheelci] line, WHEELCI_* variable)
    (["--engine", "host"], 'engine = "host"', ("WHEELCI_ENGINE", "host")),
    (["--limit", "github"], 'limit = "github"', ("WHEELCI_LIMIT", "github")),
    (["--exclude", "liba.so*", "--exclude", "libb.so*"], 'exclude = ["liba.so*", "libb.so*"]',
     ("WHEELCI_EXCLUDE", "liba.so* libb.so*")),
    (["--test-command", "python -c 1"], 'test-command = "python -c 1"', ("WHEELCI_TEST_COMMAND", "python -c 1")),
    (["--test-requires", "pytest"], 'test-requires = ["pytest"]', ("WHEELCI_TEST_REQUIRES", "pytest")),
    (["--env", "A=1", "--env", "B=two words"], 'env = { A = "1", B = "two words" }', ("WHEELCI_ENV", "A=1 'B=two words'")),
    (["--public-env", "A"], 'public-env = ["A"]', ("WHEELCI_PUBLIC_ENV", "A")),
    (["--local-version", "mylabel"], 'local-version = "mylabel"', ("WHEELCI_LOCAL_VERSION", "mylabel")),
    (["--allow-no-device-code"], "allow-no-device-code = true", ("WHEELCI_ALLOW_NO_DEVICE_CODE", "1")),
    (["--nvcc", "wheel"], 'nvcc = "wheel"', ("WHEELCI_NVCC", "wheel")),
]


def _plan_json(project: Path, *args: str, env: dict[str, str] | None = None, stage: str = "ci.build") -> dict:
    import json

    extra = ["--dry-run"] if stage == "ci.build" else []
    r = run_stage(stage, project, *args, *extra, "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_table_the_variables_and_the_flags_make_the_same_plan(tmp_path):
    """A project configured only with [tool.wheelci], or only with WHEELCI_* variables, gets the plan that
    the flags give, and `plan --json` is `build --dry-run --json` (one resolution, one plan)."""
    import sys

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    project = _project(tmp_path, "")
    flags = [word for words, _, _ in SETTINGS for word in words]
    by_flags = _plan_json(project, "--cpu", "--python", python, *flags)
    by_plan = _plan_json(project, "--cpu", "--python", python, *flags, stage="ci.plan")
    by_variables = _plan_json(project, env={"WHEELCI_CUDA": "cpu", "WHEELCI_PYTHON": python,
                                            **dict(variable for _, _, variable in SETTINGS)})
    _project(tmp_path, "[tool.wheelci]\n" + f'python = "{python}"\n' + "\n".join(line for _, line, _ in SETTINGS) + "\n")
    by_table = _plan_json(project, "--cpu")
    assert by_flags["limit"] == "github" and by_flags["engine"] == "host" and by_flags["label"] == "mylabel"
    assert by_flags["build_env"] == {"A": "1", "B": "***"} and by_flags["excludes"] == ["liba.so*", "libb.so*"]
    assert by_variables == by_flags
    assert by_table == by_flags
    assert by_plan == by_flags
    # and the comparison can fail: one setting left out changes the plan
    assert _plan_json(project, "--cpu", "--limit", "pypi") != by_flags


def test_the_workflow_s_own_variable_is_known():
    """A runner that sets WHEELCI_TOOL_SOURCE (.github/workflows/build.yml reads it) still builds."""
    workflow = (Path(__file__).resolve().parent.parent / ".github" / "workflows" / "build.yml").read_text()
    import re

    named = set(re.findall(r"\bWHEELCI_[A-Z_]+\b", workflow))
    assert named and named <= set(options.KNOWN_VARIABLES), named - set(options.KNOWN_VARIABLES)
    resolve("build", {"cpu": True}, {"WHEELCI_TOOL_SOURCE": "wheelci==1"})


@pytest.mark.parametrize("name, value", [("WHEELCI_HEARTBEAT", "nan"), ("WHEELCI_HEARTBEAT", "-1"),
                                         ("WHEELCI_CACHE_MAX_SIZE", "lots")])
@pytest.mark.parametrize("stage", [["ci.plan"], ["ci.build", "--cpu", "--engine", "host", "--dry-run"]])
def test_a_bad_tool_setting_stops_the_plan_and_the_dry_run_in_one_line(name, value, stage):
    """WHEELCI_HEARTBEAT=nan and WHEELCI_CACHE_MAX_SIZE=lots passed plan and the dry run with exit 0:
    the build then stopped on them. Refused where the options are resolved."""
    r = run_stage(*stage, env={name: value})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert name in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_every_field_is_typed_as_its_kind_reads():
    """No Any between a kind's reader and the field it fills: each Options field's annotation is KIND_TYPES'
    type for its kind (optional where the default is None)."""
    import typing

    hints = typing.get_type_hints(options.Options)
    for o in options.OPTIONS:
        want = options.KIND_TYPES[o.kind]
        got = hints[o.name]
        import types

        union = typing.get_origin(got) in (typing.Union, types.UnionType)
        origins = {typing.get_origin(a) or a for a in (typing.get_args(got) if union else (got,))} - {type(None)}
        assert origins == {want}, (o.name, got, want)


def test_an_option_added_as_the_guide_says_works_by_flag_variable_and_key(tmp_path):
    """docs/contributing.md's recipe, followed in a scratch copy of the package: one field of Options, and
    the option is taken from its flag, its variable and its table key (the recipe once gave a TypeError)."""
    import re
    import shutil
    import sys
    from pathlib import Path

    from tests import _proc

    root = Path(__file__).resolve().parent.parent
    guide = (root / "docs" / "contributing.md").read_text()
    assert "one field of `Options`" in guide and "_opt(kind, help, group" in guide
    copy = tmp_path / "src"
    shutil.copytree(root / "ci" / "src" / "wheelci", copy / "wheelci", ignore=shutil.ignore_patterns("__pycache__"))
    source = copy / "wheelci" / "config" / "options.py"
    text = source.read_text()
    anchor = re.search(r"\n    sources: dict\[str, str\] = field", text)
    assert anchor
    source.write_text(text[:anchor.start()] + '\n    shiny_level: str | None = _opt("str", "how shiny", "outputs")'
                      + text[anchor.start():])
    probe = (
        "import sys\n"
        "from wheelci.cli import Parser\n"
        "from wheelci.config import options\n"
        "p = Parser(prog='wheelci build')\n"
        "options.add_arguments(p, 'build')\n"
        "given = vars(p.parse_args(sys.argv[1:]))\n"
        "table = options.read_table({'shiny-level': 'from-the-table'})\n"
        "import os\n"
        "o = options.resolve('build', given, dict(os.environ), table)\n"
        "print(o.shiny_level, o.sources['shiny_level'])\n")
    env = {"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}
    runs = {"flag": (["--shiny-level", "from-the-flag"], {}),
            "variable": ([], {"WHEELCI_SHINY_LEVEL": "from-the-variable"}), "table": ([], {})}
    for where, (args, extra) in runs.items():
        r = _proc.run([sys.executable, "-c", probe, *args], env={**env, **extra}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [f"from-the-{where}", where], (where, r.stdout, r.stderr)
