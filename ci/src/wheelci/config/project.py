"""What the user asked to build: a project directory or an sdist, its build backend and its settings.

An sdist is checked, bounded and extracted by ci.config.sdist.
Per-project settings come from `[tool.ci]` in the project's pyproject.toml; command-line options win.
"""

from __future__ import annotations

from enum import Enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from wheelci.config.sdist import extract_sdist, is_sdist
from wheelci.errors import CiError

from wheelci.util import toml as tomllib

# build-backend -> the name the plan shows; anything else builds through its backend all the same
class Backend(str, Enum):
    """The build systems a build knows how to drive, a closed set: each gets its own treatment in the
    compile (CMake definitions, a copy for in-tree builders, meson's build directory), and a backend
    outside it goes the generic PEP 517 way, never another backend's."""

    SETUPTOOLS = "setuptools"
    SCIKIT_BUILD_CORE = "scikit-build-core"
    MESON_PYTHON = "meson-python"
    PEP517 = "pep517"  # any other backend: `python -m build` from a copy, the compilers' variables only

    def __str__(self) -> str:
        return self.value


BACKENDS = {"scikit_build_core.build": Backend.SCIKIT_BUILD_CORE, "setuptools.build_meta": Backend.SETUPTOOLS,
            "setuptools.build_meta:__legacy__": Backend.SETUPTOOLS, "mesonpy": Backend.MESON_PYTHON}
# Backends that make pure-Python wheels only: a PyTorch extension built by one would ship no library.
PURE_PYTHON_BACKENDS = ("flit_core.buildapi", "hatchling.build", "poetry.core.masonry.api", "pdm.backend",
                        "uv_build")


@dataclass(frozen=True)
class Settings:
    """[tool.ci] of the project, merged with command-line options."""

    test_command: str | None = None
    test_requires: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    limit: str | None = None
    stable_abi: str | None = None  # "2.10": build stable-ABI wheels serving every torch from it on
    variants: bool = False  # PEP 825 variant wheels for CUDA builds, the plain wheel for CPU ones
    public_env: list[str] = field(default_factory=list)  # env names whose values may be shown (the rest: ***)
    cuda_env: dict[str, str] = field(default_factory=dict)  # [tool.ci.cuda] env: CUDA builds only, over env
    cpu_env: dict[str, str] = field(default_factory=dict)  # [tool.ci.cpu] env: CPU builds only, over env
    compile_cache: str | None = None  # a remote compile cache's URL (wheelci.config.compilecache)

    def env_for(self, cuda: bool) -> dict[str, str]:
        """The build variables of a CUDA build (`cuda`) or a CPU one: env, then its kind's table over it
        (FORCE_CUDA=1 in [tool.ci.cuda] reaches no CPU build)."""
        return {**self.env, **(self.cuda_env if cuda else self.cpu_env)}


def _words(key: str, value: object) -> list[str]:
    """A list of strings; a string is whitespace-separated items (one pattern, one requirement),
    never one item per character."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise CiError(f"[tool.ci] {key} must be a string or a list of strings, not {_toml(value)}")


def _command(key: str, value: object) -> str:
    """One shell command; a list is run in order, stopping at the first that fails."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return " && ".join(value)
    raise CiError(f"[tool.ci] {key} must be a non-empty string or list of strings, not {_toml(value)}")


def _env(key: str, value: object) -> dict[str, str]:
    return _env_table(f"[tool.ci] {key}", value)


def _env_table(what: str, value: object) -> dict[str, str]:
    """A table of build variables (`what` names it in the error): string values under variable names."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise CiError(f"{what} must be a table of strings, e.g. {{ FORCE_CUDA = \"1\" }}")
    for name in value:
        if not name.isidentifier():
            raise CiError(f"{what}: {name!r} is not a variable name")
    return dict(value)


def _kind_table(kind: str):
    """The reader of [tool.ci.cuda] or [tool.ci.cpu]: a table of the settings that differ by build kind
    (only `env` today), its keys checked as strictly as [tool.ci]'s."""

    def read(key: str, value: object) -> dict[str, str]:
        from wheelci.config.strict import check_keys

        where = f"[tool.ci.{kind}]"
        if not isinstance(value, dict):
            raise CiError(f"{where} must be a table (e.g. {where} env = {{ FORCE_CUDA = \"1\" }}), not {_toml(value)}")
        check_keys(value, KIND_SETTINGS, where)
        return _env_table(f"{where} env", value.get("env", {}))

    return read


def _limit(key: str, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a byte count
    raise CiError(f"[tool.ci] {key} must be a size or a profile name (a string), not {_toml(value)}")


def _stable_abi(key: str, value: object) -> str:
    """A torch minor as a string: a TOML number 2.10 would arrive as 2.1, another torch."""
    from wheelci.config.stable import parse_target

    if not isinstance(value, str):
        raise CiError(f'[tool.ci] {key} must be a string such as "2.10" (a TOML number 2.10 reads as 2.1), '
                      f"not {_toml(value)}")
    parse_target(value)
    return value.strip()


def _url(key: str, value: object) -> str:
    """A URL, read as written (wheelci.config.compilecache parses it where the plan is made)."""
    if not isinstance(value, str):
        raise CiError(f"[tool.ci] {key} must be a URL (a string), not {type(value).__name__}")
    return value


def _flag(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise CiError(f"[tool.ci] {key} must be true or false, not {_toml(value)}")
    return value


def _toml(value: object) -> str:
    """A value as the user wrote it in TOML (true, not True)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


# [tool.ci] key -> (Settings field, reader): the whole schema, as data.
SETTINGS = {
    "test-command": ("test_command", _command),
    "test-requires": ("test_requires", _words),
    "env": ("env", _env),
    "exclude": ("exclude", _words),
    "limit": ("limit", _limit),
    "stable-abi": ("stable_abi", _stable_abi),
    "variants": ("variants", _flag),
    "public-env": ("public_env", _words),
    "compile-cache": ("compile_cache", _url),
}
# [tool.ci.cuda] and [tool.ci.cpu]: what only one kind of build gets, read into Settings.cuda_env / cpu_env
KIND_TABLES = {
    "cuda": ("cuda_env", _kind_table("cuda")),
    "cpu": ("cpu_env", _kind_table("cpu")),
}
KIND_SETTINGS = ("env",)  # the keys of those tables


PYPROJECT_CAP = 16 * 2**20  # a pyproject.toml is read whole: larger is no configuration file


def load_pyproject(project_dir: Path) -> dict | None:
    """The project's pyproject.toml as data (None without one); a broken one is one line."""
    path = project_dir / "pyproject.toml"
    if not path.is_file():
        return None
    from wheelci.wheel.ondisk import read_regular_text

    try:
        return tomllib.loads(read_regular_text(path, PYPROJECT_CAP))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise CiError(f"bad {path}: {e}") from None


def _table(data: dict, key: str, where: Path, parent: str = "") -> dict:
    """data[key], a table ({} when absent); `parent`: where data sits (`tool.`), for the message."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise CiError(f"{where}: [{parent}{key}] must be a table, not {_toml(value)}")
    return value


def _backend_of(data: dict | None, project_dir: Path) -> Backend:
    """The build system `data` (the pyproject.toml, None without one) names, one of Backend; a pure-Python
    backend is refused (no extension to build)."""
    if data is not None:
        name = _table(data, "build-system", project_dir / "pyproject.toml").get("build-backend")
        if name is not None and not isinstance(name, str):
            raise CiError(f"{project_dir / 'pyproject.toml'}: [build-system] build-backend must be a string")
        if name in PURE_PYTHON_BACKENDS:
            raise CiError(f"{project_dir / 'pyproject.toml'}: build-backend {name!r} makes pure-Python wheels; a "
                          "PyTorch extension builds with setuptools, scikit-build-core, meson-python or "
                          "another PEP 517 backend that compiles")
        # PEP 517: a pyproject.toml that names no backend is built by setuptools' legacy backend
        return BACKENDS.get(name, Backend.PEP517) if name else Backend.SETUPTOOLS
    if (project_dir / "setup.py").is_file():
        return Backend.SETUPTOOLS
    raise CiError(f"{project_dir}: neither pyproject.toml nor setup.py: not a Python project")


def backend(project_dir: Path) -> Backend:
    """The project's build system, one of Backend (reads pyproject.toml: a build takes Project.backend)."""
    return _backend_of(load_pyproject(project_dir), project_dir)


def _settings_of(data: dict | None, path: Path) -> Settings:
    """[tool.ci] checked against SETTINGS: an unknown key (a typo) is refused with the closest known
    one, and each value is read by its own reader, so no value is silently misread."""
    from wheelci.config.strict import check_keys

    table = _table(_table(data or {}, "tool", path), "ci", path, "tool.")
    try:
        check_keys(table, [*SETTINGS, *KIND_TABLES], "[tool.ci]")
    except CiError as e:
        raise CiError(f"{path}: {e}") from None
    values = {}
    for key, value in table.items():
        name, reader = SETTINGS[key] if key in SETTINGS else KIND_TABLES[key]
        values[name] = reader(key, value)
    # each value is its field's reader's result (SETTINGS pairs them), which a dict cannot say
    return Settings(**values)  # type: ignore[arg-type]


def read_settings(project_dir: Path) -> Settings:
    """[tool.ci] of the project (reads pyproject.toml: a build takes Project.settings)."""
    return _settings_of(load_pyproject(project_dir), project_dir / "pyproject.toml")


@dataclass(frozen=True)
class Project:
    """The project as its pyproject.toml says (setup.py's name where it has none): read and checked once
    per build by read_project, then passed along (the plan, the compile and the settings take this, never
    the file again). Values outside [tool.ci] are checked too: a string `requires` would install one
    package per letter, and a malformed `requires-python` would fail deep in the plan."""

    name: str
    requires_python: str  # a PEP 440 specifier set, "" for none
    build_requires: list[str]  # [build-system] requires, PEP 508 requirements as written
    cibw_build: list[str]  # [tool.cibuildwheel] build selectors
    py_api: str = ""  # [tool.scikit-build] wheel.py-api ("py3": one wheel serves every Python)
    backend: Backend = Backend.SCIKIT_BUILD_CORE
    settings: Settings = field(default_factory=Settings)  # [tool.ci], before command-line options
    root: Path = Path(".")  # the directory built
    pyproject: bool = True  # False: setup.py alone, no pyproject.toml

    @classmethod
    def read(cls, project_dir: Path) -> "Project":
        return read_project(project_dir)

    def default_python(self) -> list[str]:
        """Pythons named by [tool.cibuildwheel] build (cp311-... -> 3.11), else the one running this."""
        import re
        import sys

        found = [f"{m[1]}.{m[2]}" for s in self.cibw_build if (m := re.match(r"cp(3)(\d+)-", s))]
        return found or [f"{sys.version_info.major}.{sys.version_info.minor}"]  # the Python verify uses


def _strings(value: object, what: str, path: Path) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CiError(f"{path}: {what} must be a list of strings, not {_toml(value)}")
    return list(value)


def _build_requires(system: dict, default: list[str], path: Path) -> list[str]:
    """[build-system] requires: a list of PEP 508 requirements (a string would be one per letter)."""
    from wheelci.wheel.requirements import parse_requirement

    if "requires" not in system:
        return list(default)
    value = system["requires"]
    if isinstance(value, str):
        raise CiError(f"{path}: [build-system] requires must be a list of requirements, e.g. "
                      f"[{value.strip()!r}], not the string {value!r}")
    requires = _strings(value, "[build-system] requires", path)
    for line in requires:
        try:
            parse_requirement(line)
        except CiError as e:
            raise CiError(f"{path}: [build-system] requires: {e}") from None
    return requires


def _requires_python(project: dict, path: Path) -> str:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    value = project.get("requires-python", "")
    if not isinstance(value, str):
        raise CiError(f"{path}: [project] requires-python must be a string, not {_toml(value)}")
    try:
        SpecifierSet(value)
    except InvalidSpecifier as e:
        raise CiError(f"{path}: [project] requires-python {value!r} is not a version specifier "
                      f"(PEP 440, e.g. \">=3.10\"): {e}") from None
    return value


def read_project(project_dir: Path) -> Project:
    """The one read of pyproject.toml in a build, every value the build uses checked here."""
    project_dir = Path(project_dir)
    path = project_dir / "pyproject.toml"
    data = load_pyproject(project_dir)
    kind = _backend_of(data, project_dir)
    has_pyproject, data = data is not None, data or {}
    settings = _settings_of(data, path)
    system, meta, tool = (_table(data, key, path) for key in ("build-system", "project", "tool"))
    name = meta.get("name")
    if not name and (project_dir / "setup.py").is_file():
        # setup.py names the project (a PEP 518-only pyproject.toml, or none): known once built
        return Project(project_dir.resolve().name, "", _build_requires(system, ["setuptools", "wheel"], path), [],
                       "", kind, settings, project_dir, pyproject=has_pyproject)
    if not name:
        raise CiError(f"{path} has no [project] name")
    if not isinstance(name, str):
        raise CiError(f"{path}: [project] name must be a string, not {_toml(name)}")
    build = _table(tool, "cibuildwheel", path, "tool.").get("build", "")
    selectors = build.split() if isinstance(build, str) else _strings(build, "[tool.cibuildwheel] build", path)
    return Project(name, _requires_python(meta, path), _build_requires(system, [], path), selectors,
                   _py_api(tool, path), kind, settings, project_dir)


def _py_api(tool: dict, path: Path) -> str:
    """[tool.scikit-build] wheel.py-api ("" when unset): "py3" makes one wheel for every Python, "cp3X" an
    abi3 one for every Python from 3.X on."""
    skbuild = _table(tool, "scikit-build", path, "tool.")
    py_api = _table(skbuild, "wheel", path, "tool.scikit-build.").get("py-api", "")
    if not isinstance(py_api, str):
        raise CiError(f"{path}: [tool.scikit-build] wheel.py-api must be a string, not {_toml(py_api)}")
    return py_api


def read_py_api(project_dir: Path) -> str:
    """The project's wheel.py-api, read with the standard library alone (`plan --workflow-matrix` runs on
    a bare Python, where read_project, which checks requirements with packaging, cannot)."""
    data = load_pyproject(Path(project_dir)) or {}
    path = Path(project_dir) / "pyproject.toml"
    return _py_api(_table(data, "tool", path), path)


def merge(settings: Settings, *, test_command: str | None, test_requires: list[str], env: list[str],
          exclude: list[str], limit: str | None, stable_abi: str | None = None, variants: bool = False,
          public_env: Sequence[str] = ()) -> Settings:
    """Command-line options over [tool.ci]; `--env NAME=VALUE` checked here. A --env variable wins over
    [tool.ci] env and over [tool.ci.cuda] / [tool.ci.cpu] env alike."""
    given: dict[str, str] = {}
    for item in env:
        name, sep, value = item.partition("=")
        if not sep:  # the whole word may be the value itself: never echoed
            raise CiError("bad --env: an item has no '=' (want NAME=VALUE; the item is not shown, it may be a secret)")
        if not name.isidentifier():
            raise CiError(f"bad --env {name[:64]!r}=***: {name[:64]!r} is not a variable name (want NAME=VALUE)")
        given[name] = value
    return Settings(test_command or settings.test_command, settings.test_requires + list(test_requires),
                    {**settings.env, **given}, settings.exclude + list(exclude), limit or settings.limit,
                    _stable_abi("--stable-abi", stable_abi) if stable_abi else settings.stable_abi,
                    variants or settings.variants, sorted({*settings.public_env, *public_env}),
                    {**settings.cuda_env, **{k: v for k, v in given.items() if k in settings.cuda_env}},
                    {**settings.cpu_env, **{k: v for k, v in given.items() if k in settings.cpu_env}},
                    settings.compile_cache)


def resolve(project: Path, work: Path) -> Project:
    """The project to build, read once: the project directory itself, or the sdist extracted into work."""
    if project.is_dir():
        return read_project(project.resolve())  # refuses a directory that is no project
    if project.is_file() and is_sdist(project):
        return read_project(extract_sdist(project, work / "sdist"))
    if not project.exists():
        raise CiError(f"{project}: no such file or directory")
    raise CiError(f"{project}: neither a project directory nor an sdist (.tar.gz)")
