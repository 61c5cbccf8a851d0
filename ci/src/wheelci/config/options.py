"""Every setting of `wheelci build` and `wheelci plan`, declared once: its name, type, default, help,
`[tool.wheelci]` key, `WHEELCI_*` variable, flag, the commands that take it and its help group.

The parsers (wheelci.build, wheelci.plan), the `[tool.wheelci]` reader (wheelci.config.project), the
JSON schema and docs/reference.md are all made from OPTIONS, so an option has one name, shape and help
everywhere. resolve() turns the sources into one frozen Options, in cibuildwheel's order:

    command line  >  WHEELCI_* variable  >  [tool.wheelci.cuda] / [tool.wheelci.cpu]  >  [tool.wheelci]  >  default

A single value (a string, a flag) is taken from the first source that sets it. A list (`exclude`,
`test-requires`, `public-env`) and the build variables (`env`) add up over the sources instead, the
higher source's value winning for a variable set twice: a project's excludes stay when a job adds one.

The older spellings are still read, each with one deprecation line naming the new one: the `[tool.ci]`
table here, and the tool's variables under the `CI_` and `CUDA_WHEEL_CI_` prefixes in
wheelci.util.variables. Variables the build hands to the project (`CI_STABLE_ABI`, `CI_BUILD_DIR`) keep
their names: the project's build scripts and tests read them. Standard library only: `wheelci --help` and `plan
--workflow-matrix` (on a bare Python) import it.
"""

from __future__ import annotations

import difflib
import shlex
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from wheelci.config import stores
from wheelci.errors import CiError
from wheelci.util import log, variables
from wheelci.util.log import heartbeat_seconds
from wheelci.util.untrusted import cut

TABLE = "tool.wheelci"  # the project's table in pyproject.toml
OLD_TABLE = "tool.ci"  # read, with a deprecation line, when the project has no [tool.wheelci]
PREFIX = "WHEELCI_"
KINDS = ("cuda", "cpu")  # [tool.wheelci.cuda] and [tool.wheelci.cpu]: what one kind of build gets
COMMANDS = ("build", "plan")

# help groups, in the order `build --help` shows them (cibuildwheel's docs: what, where, outputs, ...)
GROUPS = {
    "target": "what to build",
    "where": "where and how to build",
    "outputs": "outputs",
    "verify": "verify",
    "publish": "publish",
    "run": "the run",
}


@dataclass(frozen=True)
class Option:
    """One setting. `kind` says how each source's value is read (VALUE_KINDS); `key` is its
    `[tool.wheelci]` key and `variable` its environment variable (None: not settable there); `per_kind`:
    also a key of [tool.wheelci.cuda] / [tool.wheelci.cpu]. `summary`: the short text of the schema and
    the tables of docs/reference.md (the help's first sentence when not given)."""

    name: str
    kind: str
    help: str
    group: str
    commands: tuple[str, ...] = COMMANDS
    flags: tuple[str, ...] = ()
    key: str | None = None
    variable: str | None = None
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    per_kind: bool = False

    @property
    def flag(self) -> str:
        return self.flags[-1]


OPTION = "wheelci.option"  # the metadata key under which an Options field holds its declaration


@dataclass(frozen=True)
class _Declared:
    kind: str
    help: str
    group: str
    key: bool | str
    variable: bool | str
    flags: tuple[str, ...]
    commands: tuple[str, ...]
    default: object
    metavar: str | None
    choices: tuple[str, ...] | None
    per_kind: bool


def _opt(kind: str, help: str, group: str, *, key: bool | str = True, variable: bool | str = True,
         flags: tuple[str, ...] = (), commands: tuple[str, ...] = COMMANDS, default: object = None,
         metavar: str | None = None, choices: tuple[str, ...] | None = None, per_kind: bool = False) -> Any:
    """A field of Options that declares its option (as scikit-build-core's settings do): the field's name is
    the option's, its key, variable and flag are the name's (`test_command`: `test-command`,
    `WHEELCI_TEST_COMMAND`, `--test-command`) unless given or turned off, and its default is the kind's
    (an empty list or table, False) unless given."""
    declared = _Declared(kind, help, group, key, variable, flags, commands, default, metavar, choices, per_kind)
    meta = {OPTION: declared}
    if kind == "env":
        return field(default_factory=dict, metadata=meta)
    if kind == "words":
        return field(default=(), metadata=meta)
    return field(default=bool(default) if kind == "bool" else default, metadata=meta)


@dataclass(frozen=True)
class Options:
    """The settings of one `build` or `plan` run, resolved (see the module's docstring), and the one
    declaration of each: a field here is an option of the flag, the variable and the table key its
    declaration names (OPTIONS is read off these fields). The Plan is made from these, never from the
    parsed arguments. `cuda` None is a CPU build (--cpu, WHEELCI_CUDA=cpu); `compile_cache` "" is none.
    `sources`: option name -> where its value came from ("flag", "variable", "table", "default"), which
    the dry run can show."""

    # what to build
    cuda: str | None = _opt("str", "CUDA version to build for (with --stable-abi: a major such as 13); build takes --cuda "
        "or --cpu, WHEELCI_CUDA a version or cpu; plan --workflow-matrix: a comma list of the jobs to keep "
        "(CUDA versions, or cpu)", "target", key=False)
    cpu: bool = _opt("bool", "a CPU-only build", "target", key=False, variable=False)
    torch: str | None = _opt("str", "torch version to build against, or latest (default: the matrix row's); plan: also a "
        "range of releases (>=2.12, 2.12-2.15) or the newest N minors (last:4), each crossed with the CUDA builds "
        "the index has of it (the jobs, or --workflow-matrix's)", "target")
    torch_index_url: str | None = _opt("str", "where to get that torch, and read its metadata (default: the matrix row's index)",
        "target", metavar="URL")
    python: str | None = _opt("csv", "comma-separated Python versions, e.g. 3.10,3.11 (default: [tool.cibuildwheel] build, "
        "else this Python); verify runs with the Python running wheelci, so a host build of another is refused",
        "target")
    arch_list: str | None = _opt("str", 'TORCH_CUDA_ARCH_LIST, e.g. "8.0;9.0" (default: the matrix row\'s)', "target")
    keep_project_archs: bool = _opt("bool", "keep the device targets the project's own nvcc flags name (-gencode, -arch, "
        "CMAKE_CUDA_ARCHITECTURES); by default --arch-list, when given, replaces them", "target", default=False)
    archs: str | None = _opt("csv", "machine architectures, comma-separated: x86_64 (default), aarch64, native "
        "(cibuildwheel's --archs); another than this machine's builds in a container, under QEMU emulation",
        "target", metavar="ARCHS")
    stable_abi: str | None = _opt("stable_abi", "build against LibTorch's stable ABI: one wheel per variant (cpu, cu12, "
        "cu13) for every torch >= X.Y (>= 2.10)", "target", metavar="X.Y")
    variant: bool = _opt("bool", "PEP 825 wheel variants: a CUDA build writes a variant wheel (no local label, "
        "labelled cu130 / cu13), plus its local-labelled twin unless --local-version none; a CPU build writes "
        "the release's plain wheel (auto means none); plan --workflow-matrix: the jobs of a variant set",
        "target", key="variants", variable="WHEELCI_VARIANTS", default=False)
    # where and how
    engine: str = _opt("choice", "where to build: auto (a responding container engine, else the host when it can), "
        "host, docker or podman", "where", default="auto", choices=("auto", "host", "docker", "podman"))
    image: str | None = _opt("str", "container builds: build in this image instead of the matrix's (a manylinux-layout "
        "image with CUDA under /usr/local/cuda)", "where")
    find_links: Path | None = _opt("path", "container builds: a wheel directory the container's pip uses (mounted "
        "read-only); torch comes from it before any index", "where", key=False, metavar="DIR")
    nvcc: str = _opt("choice", "host builds: the host nvcc if its version matches (auto), only it (host), or "
        "NVIDIA's wheels (wheel)", "where", default="auto", choices=("auto", "host", "wheel"))
    env: dict[str, str] = _opt("env", "a build variable, e.g. FORCE_CUDA=1 (repeatable); shown as NAME=*** unless NAME is "
        "public", "where", metavar="NAME=VALUE", per_kind=True)
    build_requires: tuple[str, ...] = _opt("words", "a build requirement the project does not declare, installed into "
        "its build environment beside its own (repeatable), e.g. psutil for a setup_requires the build cannot read",
        "where", metavar="REQ")
    public_env: tuple[str, ...] = _opt("words", "a build variable whose value may be shown (plan, report, logs), e.g. "
        "TORCH_CUDA_ARCH_LIST (repeatable)", "where", metavar="NAME")
    compile_cache: str | None = _opt("str", "share compiles with other machines through a remote store, with sccache (host "
        f"and container builds): {stores.forms()} (S3 keys from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)", "where",
        metavar="URL")
    work_dir: Path | None = _opt("path", "the build tree (default: one per project and plan in the cache); new, empty or made "
        "by an earlier build; may be inside the project, not inside -w nor hold it", "where",
        commands=("build",), key=False, metavar="DIR")
    keep_work: bool = _opt("bool", "no effect, kept for the scripts that pass it: every build tree is kept, an sdist's "
        "too (in the cache, by the sdist's digest, within its cap)", "where", commands=("build",), key=False)
    fresh: bool = _opt("bool", "start from an empty build tree and run every step (default: steps whose inputs are "
        "unchanged since the last build are reused)", "where", commands=("build",), key=False)
    # outputs
    wheel_dir: Path | None = _opt("path", "output directory for wheels and the report", "outputs", commands=("build",),
        key=False, flags=("-w", "--wheel-dir"), metavar="DIR")
    local_version: str = _opt("str", "local version label: auto (default) names torch and CUDA, e.g. "
        "0.1.0+pt2.13.0.cu130; none for no label", "outputs", default="auto", metavar="auto|none|LABEL")
    limit: str | None = _opt("limit", "size limit per wheel: pypi, github or a size like 3GB; a wheel over it is split",
        "outputs")
    exclude: tuple[str, ...] = _opt("words", "another library pattern auditwheel must not graft, besides torch, CUDA, cuDNN, "
        "OpenMP (repeatable)", "outputs", metavar="PATTERN")
    allow_no_device_code: bool = _opt("bool", "accept a --cuda wheel with no compiled device code (kernels compiled at "
        "run time)", "outputs", default=False)
    # verify
    test_command: str | None = _opt("command", 'run in the verify venv after install, e.g. "pytest {project}/tests" '
        "(placeholders {project} and {wheel})", "verify", metavar="CMD")
    test_requires: tuple[str, ...] = _opt("words", "installed before the test command (repeatable)", "verify", metavar="REQ")
    # publish
    upload: str | None = _opt("str", "upload the verified wheels to this repository URL (as wheelci upload --skip-existing: "
        "a rerun that finds the same file on the index succeeds; a different file under its name fails)",
        "publish", key=False,
        metavar="URL")
    # the run
    dry_run: bool = _opt("bool", "print the plan and run nothing", "run", commands=("build",), key=False,
        variable=False)
    json: bool = _opt("bool", "machine-readable output on stdout (build: the report; with --dry-run and plan: the "
        "plan)", "run", key=False, variable=False)
    compile_only: bool = _opt("bool", "compile and stop: no repair, verify or wheel in -w (the report says what the "
        "compile cache did); with --compile-cache it warms the store for another build (the workflow's "
        "arch-jobs)", "run", commands=("build",), key=False, variable=False)
    warm_for: str | None = _opt("str", "with --compile-only and --compile-cache: the arch list of the build this one fills the "
        "store for, --arch-list being its part (the workflow's arch-jobs): each architecture's device code is "
        "compiled as that build compiles it, so it takes them from the store", "run", commands=("build",),
        key=False, variable=False, metavar="ARCH_LIST")
    arch_jobs: str | None = _opt("str", "with --workflow-matrix: the fan-out instead, each CUDA job's arch list (--arch-list, "
        "else the project's, else the row's) dealt into N (2 to 16) compile-only jobs, each naming its part "
        "(arch_list), that fill a remote compile cache", "run",
        commands=("plan",), key=False, variable=False, metavar="N")
    workflow_matrix: bool = _opt("bool", "print the CI jobs the project needs as a GitHub Actions matrix (JSON): one "
        "per CUDA version, or one per variant for stable-ABI wheels; each job's engine is host for CPU, docker "
        "for CUDA, or --engine's for every job", "run", commands=("plan",), key=False,
        variable=False)
    skip_published: str | None = _opt("str", "plan: drop every job whose wheel is already on this simple index (the "
        "destination's, PEP 691 or 503; `upload`: TWINE_REPOSITORY_URL's, as the upload reads it back; credentials "
        "in the URL, else TWINE_USERNAME/TWINE_PASSWORD), matched by name, version, label or variant, and tags; the plan says what it dropped",
        "run", commands=("plan",), key=False, metavar="INDEX")
    sources: dict[str, str] = field(default_factory=dict, compare=False)


def _option(f: Field[object]) -> Option:
    d: _Declared = f.metadata[OPTION]
    dashed = f.name.replace("_", "-")
    return Option(f.name, d.kind, d.help, d.group, d.commands, d.flags or (f"--{dashed}",),
                  dashed if d.key is True else d.key or None,
                  PREFIX + f.name.upper() if d.variable is True else d.variable or None,
                  d.default, d.metavar, d.choices, d.per_kind)


OPTIONS: tuple[Option, ...] = tuple(_option(f) for f in fields(Options) if OPTION in f.metadata)
BY_NAME = {o.name: o for o in OPTIONS}
KEYS = {o.key: o for o in OPTIONS if o.key}


KNOWN_VARIABLES = (*(o.variable for o in OPTIONS if o.variable), *(v.name for v in variables.VARIABLES))

_warned: set[str] = set()


def deprecated(old: str, new: str, warn: Callable[[str], None] | None = None) -> None:
    """The one deprecation line for an old spelling, once per process."""
    if old in _warned:
        return
    _warned.add(old)
    (warn or log.warning)(f"{old} is deprecated: use {new} (the old name is still read)")


# ---------------------------------------------------------------- reading one source's value


def toml_text(value: object) -> str:
    """A value as the user wrote it in TOML (true, not True), at most 80 characters of it (an error echoes it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:79]}… ({type(value).__name__}, {len(text)} characters)"


def _words(value: object, what: str) -> list[str]:
    """A list of strings; a string is whitespace-separated items (one pattern, one requirement)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CiError(f"{what} must be a string or a list of strings, not {toml_text(value)}")


def _csv(value: object, what: str) -> str:
    """Comma-separated names (`3.10,3.11`); a TOML list of strings is joined."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, str) and value.strip():
        return value
    raise CiError(f"{what} must be a string or a list of strings, not {toml_text(value)}")


def _command(value: object, what: str) -> str:
    """One shell command; a list is run in order, stopping at the first that fails."""
    if isinstance(value, str) and value.strip() and "\0" not in value:
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() and "\0" not in v for v in value):
        return " && ".join(value)
    raise CiError(f"{what} must be a non-empty string or list of strings, not {toml_text(value)}")


def env_table(value: object, what: str) -> dict[str, str]:
    """A table of build variables: string values under variable names."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise CiError(f"{what} must be a table of strings, e.g. {{ FORCE_CUDA = \"1\" }}")
    for name, text in value.items():
        if not name.isidentifier():
            raise CiError(f"{what}: {name!r} is not a variable name")
        if "\0" in text:  # no process environment can hold it: refused here, not at the compile
            raise CiError(f"{what}: {name}'s value holds a NUL character (the value is not shown)")
    return dict(value)


def _limit(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a byte count
    raise CiError(f"{what} must be a size or a profile name (a string), not {toml_text(value)}")


def stable_abi(value: object, what: str) -> str:
    """A torch minor as a string: a TOML number 2.10 would arrive as 2.1, another torch."""
    if not isinstance(value, str):
        raise CiError(f'{what} must be a string such as "2.10" (a TOML number 2.10 reads as 2.1), '
                      f"not {toml_text(value)}")
    from wheelci.config.stable import parse_target  # the matrix: only when a stable build is asked for

    parse_target(value)
    return value.strip()


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise CiError(f"{what} must be true or false, not {toml_text(value)}")
    return value


def _string(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CiError(f"{what} must be a non-empty string, not {toml_text(value)}")
    return value.strip()


def _choice(option: Option) -> Callable[[object, str], str]:
    def read(value: object, what: str) -> str:
        if value not in (option.choices or ()):
            raise CiError(f"{what} must be one of {', '.join(option.choices or ())}, not {toml_text(value)}")
        return str(value)

    return read


# kind -> the reader of a TOML value (also what a variable's text becomes, through from_text)
VALUE_KINDS: dict[str, Callable[[object, str], Any]] = {
    "str": _string, "csv": _csv, "command": _command, "words": _words, "env": env_table, "limit": _limit,
    "stable_abi": stable_abi, "bool": _flag, "path": _string,
}


# kind -> the type of the Options field it fills, whichever source the value came from (a test holds every
# field's annotation to it)
KIND_TYPES: dict[str, type] = {
    "str": str, "csv": str, "command": str, "limit": str, "stable_abi": str, "choice": str, "bool": bool,
    "words": tuple, "env": dict, "path": Path,
}


def read_value(option: Option, value: object, what: str) -> Any:
    """A `[tool.wheelci]` value of `option` checked by its kind's reader; `what` names it in an error."""
    reader = _choice(option) if option.kind == "choice" else VALUE_KINDS[option.kind]
    return reader(value, what)


TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def from_text(option: Option, text: str) -> Any:
    """A WHEELCI_* variable's text as the option's value: a flag is 1/true/yes/on or 0/false/no/off, a list
    whitespace-separated words, build variables `NAME=VALUE` words as a shell splits them."""
    what = f"{option.variable}={text[:64]!r}" if option.kind not in ("env",) else str(option.variable)
    if option.kind == "bool":
        if text.strip().lower() not in TRUE + FALSE:
            raise CiError(f"{what}: want 1, true, yes or on (or 0, false, no, off)")
        return text.strip().lower() in TRUE
    if option.kind == "env":
        try:
            words = shlex.split(text)
        except ValueError as e:
            raise CiError(f"{option.variable}: {e} (want NAME=VALUE words, quoted as in a shell)") from None
        return parse_assignments(words, option.variable or "")
    if option.kind == "words":
        return text.split()
    if option.kind == "path":
        return Path(_string(text, what))
    return read_value(option, text, what)


def parse_assignments(items: Sequence[str], what: str = "--env") -> dict[str, str]:
    """`NAME=VALUE` items as a table; a value is never echoed in an error (it may be a secret)."""
    given: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:  # the whole word may be the value itself: never echoed
            raise CiError(f"bad {what}: an item has no '=' (want NAME=VALUE; the item is not shown, it may be a secret)")
        if not name.isidentifier():
            raise CiError(f"bad {what} {name[:64]!r}=***: {name[:64]!r} is not a variable name (want NAME=VALUE)")
        if "\0" in value:
            raise CiError(f"bad {what} {name}=***: the value holds a NUL character (it is not shown)")
        given[name] = value
    return given


# ---------------------------------------------------------------- the project's table


@dataclass(frozen=True)
class Table:
    """`[tool.wheelci]` as read: option name -> value, each checked by its option's reader; `kinds`: the
    per-kind tables ([tool.wheelci.cuda], [tool.wheelci.cpu]), kind -> option name -> value."""

    values: Mapping[str, Any] = field(default_factory=dict)
    kinds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    name: str = f"[{TABLE}]"  # the table the values came from, for messages

    def for_kind(self, cuda: bool) -> dict[str, Any]:
        """The values a CUDA build (`cuda`) or a CPU one reads: the kind's table over the base, its build
        variables over the base's."""
        kind = dict(self.kinds.get("cuda" if cuda else "cpu", {}))
        out = {**self.values, **kind}
        if "env" in kind:
            out["env"] = {**self.values.get("env", {}), **kind["env"]}
        return out


def read_table(table: Mapping[str, Any], name: str = f"[{TABLE}]") -> Table:
    """The project's table checked against OPTIONS: an unknown key (a typo) is refused with the closest
    known one, and each value is read by its option's reader. `name`: `[tool.wheelci]` or `[tool.ci]`."""
    from wheelci.config.strict import check_keys

    check_keys(table, [*KEYS, *KINDS], name)
    values, kinds = {}, {}
    for key, value in table.items():
        if key in KINDS:
            kinds[key] = _read_kind(value, f"{name[:-1]}.{key}]")
        else:
            values[KEYS[key].name] = read_value(KEYS[key], value, f"{name} {key}")
    return Table(values, kinds, name)


def _read_kind(value: object, where: str) -> dict[str, Any]:
    from wheelci.config.strict import check_keys

    if not isinstance(value, dict):
        raise CiError(f"{where} must be a table (e.g. {where} env = {{ FORCE_CUDA = \"1\" }}), not {toml_text(value)}")
    per_kind = {o.key: o for o in OPTIONS if o.per_kind and o.key}
    check_keys(value, per_kind, where)
    return {per_kind[k].name: read_value(per_kind[k], v, f"{where} {k}") for k, v in value.items()}


# ---------------------------------------------------------------- resolving


LISTS = ("words",)  # kinds whose values add up over the sources


def resolve(command: str, given: Mapping[str, Any], environ: Mapping[str, str], table: Table | None = None,
            warn: Callable[[str], None] | None = None) -> Options:
    """The Options of `command` from the command line (`given`: option name -> value, None when not
    given), the environment and the project's table. A WHEELCI_* variable no option knows is one
    warning with the closest known name (check_variables); a deprecated one is read with one deprecation
    line."""
    table = Table() if table is None else table
    check_variables(environ, warn)
    taken = [o for o in OPTIONS if command in o.commands]
    cuda = _cuda(given, environ)
    values = table.for_kind(cuda is not None)
    out: dict[str, Any] = {"cuda": cuda}
    sources: dict[str, str] = {"cuda": "flag" if given.get("cuda") or given.get("cpu") else
                               "variable" if cuda is not None or environ.get("WHEELCI_CUDA") else "default"}
    for o in taken:
        if o.name in ("cuda", "cpu"):
            continue
        layers = [("table", values.get(o.name)),
                  ("variable", from_text(o, environ[o.variable]) if o.variable and o.variable in environ else None),
                  ("flag", _given(o, given.get(o.name)))]
        layers = [(where, v) for where, v in layers if v is not None]
        if not layers:
            continue
        if o.kind in LISTS:
            out[o.name] = tuple(dict.fromkeys(x for _, v in layers for x in v))
        elif o.kind == "env":
            out[o.name] = {k: v for _, table_ in layers for k, v in table_.items()}
        else:
            out[o.name] = layers[-1][1]
        sources[o.name] = layers[-1][0]
    out["cpu"] = cuda is None
    for name, value in out.items():  # each kind's reader fills its field with the field's type (KIND_TYPES)
        if value is not None and not isinstance(value, KIND_TYPES[BY_NAME[name].kind]):
            raise TypeError(f"option {name}: its {BY_NAME[name].kind} reader gave a {type(value).__name__}")
    return Options(**out, sources=sources)


def _given(option: Option, value: Any) -> Any:
    """A command-line value as the option's: the items of a repeated one (--env NAME=VALUE checked)."""
    if value is None or value is False and option.kind == "bool":
        return None
    if option.kind == "env":
        return parse_assignments(value)
    if option.kind == "stable_abi":
        return stable_abi(value, option.flag)
    if option.kind == "words":
        return list(value)
    return value


def _cuda(given: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """The CUDA version to build for, None for a CPU build: --cuda or --cpu, else WHEELCI_CUDA (`cpu` or a
    version)."""
    if given.get("cpu"):
        return None
    if given.get("cuda"):
        return str(given["cuda"])
    text = environ.get("WHEELCI_CUDA", "").strip()
    return None if text in ("", "cpu") else text


def kind_given(given: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Whether the build kind is named: --cuda, --cpu or WHEELCI_CUDA."""
    return bool(given.get("cuda") or given.get("cpu") or environ.get("WHEELCI_CUDA", "").strip())


def check_variables(environ: Mapping[str, str], warn: Callable[[str], None] | None = None) -> None:
    """A WHEELCI_* variable no option or tool setting knows: one warning with the closest name, once per
    process, never an error: the environment is the user's CI's, which may keep a variable of its own under
    the prefix (cibuildwheel and uv ignore unknown variables of their prefixes)."""
    for name in sorted(environ):
        if name.startswith(PREFIX) and name not in KNOWN_VARIABLES and name not in _warned:
            _warned.add(name)
            close = difflib.get_close_matches(name, KNOWN_VARIABLES, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            (warn or log.warning)(f"{cut(name, 64)} is not a variable of this tool{hint}: ignored")
    # the tool's own settings read later (a build's heartbeat, its cache cap): bad input now, one line, not a
    # plan or dry run that passes and a build that stops on them
    from wheelci.util.cache import max_size

    heartbeat_seconds(environ)
    max_size(environ)


# ---------------------------------------------------------------- the command line


def add_arguments(parser: Any, command: str) -> None:
    """`command`'s options on an argparse parser, in their help groups. Every default is None (or False):
    resolve() tells an option given from one left to the other sources; the help names the default, the
    `[tool.wheelci]` key and the variable."""
    groups = {g: parser.add_argument_group(title) for g, title in GROUPS.items()
              if any(o.group == g and command in o.commands for o in OPTIONS)}
    kind_group = None
    for o in OPTIONS:
        if command not in o.commands:
            continue
        where = groups[o.group]
        if o.name in ("cuda", "cpu"):
            kind_group = kind_group or where.add_mutually_exclusive_group()
            where = kind_group
        kw: dict[str, Any] = {"dest": o.name, "help": help_text(o)}
        if o.kind == "bool":
            kw["action"] = "store_true"
            kw["default"] = None
        else:
            kw["default"] = None
            if o.metavar:
                kw["metavar"] = o.metavar
            if o.choices:
                kw["choices"] = o.choices
            if o.kind in ("words", "env"):
                kw["action"] = "append"
            if o.kind == "path":
                kw["type"] = Path
        where.add_argument(*o.flags, **kw)


def help_text(o: Option) -> str:
    """The option's help, its default and the other places it may be set: `(default auto; WHEELCI_ENGINE,
    [tool.wheelci] engine)`. `%` is escaped for argparse."""
    also = [f"default {o.default}"] if o.default not in (None, False) else []
    also += [o.variable] if o.variable else []
    also += [f"[{TABLE}] {o.key}" + (" (and .cuda/.cpu)" if o.per_kind else "")] if o.key else []
    text = o.help + (f" ({'; '.join(also)})" if also else "")
    return text.replace("%", "%%")
