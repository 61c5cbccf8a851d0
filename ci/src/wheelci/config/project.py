"""What the user asked to build: a project directory or an sdist, its build backend and its settings.

An sdist is checked, bounded and extracted by ci.config.sdist.
Per-project settings come from `[tool.wheelci]` in the project's pyproject.toml (the older `[tool.ci]` is
still read); WHEELCI_* variables and command-line options go over them (wheelci.config.options).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from wheelci.config import options
from wheelci.config.sdist import extract_sdist, is_sdist
from wheelci.errors import CiError
from wheelci.util import toml as tomllib
from wheelci.wheel.ondisk import read_regular_text
from wheelci.wheel.requirements import parse_requirement

if TYPE_CHECKING:
    from wheelci.config.fetch import Fetched


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
    """The project's [tool.wheelci] (or older [tool.ci]) table, read against the declarations
    (wheelci.config.options); command-line options and WHEELCI_* variables go over it in
    options.resolve. The properties are the table's values by their old names."""

    table: options.Table = field(default_factory=options.Table)

    def _get(self, name: str, default: Any) -> Any:
        return self.table.values.get(name, default)

    def _text(self, name: str) -> str | None:
        """A string option's value (its reader gave a str), None when unset."""
        value: str | None = self._get(name, None)
        return value

    @property
    def test_command(self) -> str | None:
        return self._text("test_command")

    @property
    def test_requires(self) -> list[str]:
        return list(self._get("test_requires", []))

    @property
    def env(self) -> dict[str, str]:
        return dict(self._get("env", {}))

    @property
    def exclude(self) -> list[str]:
        return list(self._get("exclude", []))

    @property
    def limit(self) -> str | None:
        return self._text("limit")

    @property
    def stable_abi(self) -> str | None:  # "2.10": stable-ABI wheels serving every torch from it on
        return self._text("stable_abi")

    @property
    def variants(self) -> bool:  # PEP 825 variant wheels for CUDA builds, the plain wheel for CPU ones
        return bool(self._get("variant", False))

    @property
    def public_env(self) -> list[str]:  # env names whose values may be shown (the rest: ***)
        return list(self._get("public_env", []))

    @property
    def cuda_env(self) -> dict[str, str]:  # [tool.wheelci.cuda] env: CUDA builds only, over env
        return dict(self.table.kinds.get("cuda", {}).get("env", {}))

    @property
    def cpu_env(self) -> dict[str, str]:  # [tool.wheelci.cpu] env: CPU builds only, over env
        return dict(self.table.kinds.get("cpu", {}).get("env", {}))

    def env_for(self, cuda: bool) -> dict[str, str]:
        """The build variables of a CUDA build (`cuda`) or a CPU one: env, then its kind's table over it
        (FORCE_CUDA=1 in [tool.wheelci.cuda] reaches no CPU build)."""
        return dict(self.table.for_kind(cuda).get("env", {}))


# the table's keys (options.KEYS) and its per-kind tables: the whole schema, declared in wheelci.config.options
SETTINGS = {key: option.name for key, option in options.KEYS.items()}
KIND_TABLES = options.KINDS
KIND_SETTINGS = tuple(o.key for o in options.OPTIONS if o.per_kind and o.key)  # the keys of those tables


PYPROJECT_CAP = 16 * 2**20  # a pyproject.toml is read whole: larger is no configuration file


def load_pyproject(project_dir: Path) -> dict[str, Any] | None:
    """The project's pyproject.toml as data (None without one); a broken one is one line."""
    path = project_dir / "pyproject.toml"
    if not path.is_file():
        return None

    try:
        return tomllib.loads(read_regular_text(path, PYPROJECT_CAP))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise CiError(f"bad {path}: {e}") from None


def _table(data: dict[str, Any], key: str, where: Path, parent: str = "") -> dict[str, Any]:
    """data[key], a table ({} when absent); `parent`: where data sits (`tool.`), for the message."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise CiError(f"{where}: [{parent}{key}] must be a table, not {options.toml_text(value)}")
    return value


def _backend_of(data: dict[str, Any] | None, project_dir: Path) -> Backend:
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


def _settings_of(data: dict[str, Any] | None, path: Path) -> Settings:
    """[tool.wheelci] checked against the declarations (wheelci.config.options): an unknown key (a typo) is
    refused with the closest known one, and each value is read by its option's reader, so no value is
    silently misread. A project that still has [tool.ci] is read the same way, with one deprecation line
    once the table is read (an error in it stays the one line)."""
    tool = _table(data or {}, "tool", path)
    new, old = "wheelci" in tool, "ci" in tool
    if new and old:
        raise CiError(f"{path}: both [tool.wheelci] and [tool.ci]: move [tool.ci]'s keys into [tool.wheelci]")
    name = "wheelci" if new or not old else "ci"
    table = _table(tool, name, path, "tool.")
    try:
        read = options.read_table(table, f"[tool.{name}]")
    except CiError as e:
        raise CiError(f"{path}: {e}") from None
    if old:
        options.deprecated(f"[tool.ci] in {path}", "[tool.wheelci]")
    return Settings(read)


def read_settings(project_dir: Path) -> Settings:
    """[tool.wheelci] of the project (reads pyproject.toml: a build takes Project.settings)."""
    return _settings_of(load_pyproject(project_dir), project_dir / "pyproject.toml")


@dataclass(frozen=True)
class Project:
    """The project as its pyproject.toml says (setup.py's name where it has none): read and checked once
    per build by read_project, then passed along (the plan, the compile and the settings take this, never
    the file again). Values outside [tool.wheelci] are checked too: a string `requires` would install one
    package per letter, and a malformed `requires-python` would fail deep in the plan."""

    name: str
    requires_python: str  # a PEP 440 specifier set, "" for none
    build_requires: list[str]  # [build-system] requires, PEP 508 requirements as written
    cibw_build: list[str]  # [tool.cibuildwheel] build selectors
    py_api: str = ""  # [tool.scikit-build] wheel.py-api ("py3": one wheel serves every Python)
    backend: Backend = Backend.SCIKIT_BUILD_CORE
    settings: Settings = field(default_factory=Settings)  # [tool.wheelci], before variables and options
    root: Path = Path(".")  # the directory built
    pyproject: bool = True  # False: setup.py alone, no pyproject.toml
    fetched: Fetched | None = None  # named by its requirement: the sdist fetched for it
    torch_bound: str | None = None  # the torch specifier of its own requirements (torch<2.8), torch_bound()

    @classmethod
    def read(cls, project_dir: Path) -> "Project":
        return read_project(project_dir)

    def default_python(self) -> list[str]:
        """Pythons named by [tool.cibuildwheel] build (cp311-... -> 3.11), else the one running this."""
        found = [f"{m[1]}.{m[2]}" for s in self.cibw_build if (m := re.match(r"cp(3)(\d+)-", s))]
        return found or [f"{sys.version_info.major}.{sys.version_info.minor}"]  # the Python verify uses


def _strings(value: object, what: str, path: Path) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CiError(f"{path}: {what} must be a list of strings, not {options.toml_text(value)}")
    return list(value)


def _build_requires(system: dict[str, Any], default: list[str], path: Path) -> list[str]:
    """[build-system] requires: a list of PEP 508 requirements (a string would be one per letter)."""

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


def _requires_python(project: dict[str, Any], path: Path) -> str:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    value = project.get("requires-python", "")
    if not isinstance(value, str):
        raise CiError(f"{path}: [project] requires-python must be a string, not {options.toml_text(value)}")
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
        # setup.py names the project (a PEP 518-only pyproject.toml, or none): known once built; until
        # then the directory's name stands for it, made a valid name (it is shown: a report, a plan)
        stand_in = re.sub(r"[^A-Za-z0-9._-]+", "-", project_dir.resolve().name).strip("._-")[:100] or "project"
        return Project(stand_in, "", _build_requires(system, ["setuptools", "wheel"], path), [],
                       "", kind, settings, project_dir, pyproject=has_pyproject, torch_bound=torch_bound(data))
    if not name:
        raise CiError(f"{path} has no [project] name")
    if not isinstance(name, str):
        raise CiError(f"{path}: [project] name must be a string, not {options.toml_text(name)}")
    _check_name_and_version(name, meta.get("version"), path)
    build = _table(tool, "cibuildwheel", path, "tool.").get("build", "")
    selectors = build.split() if isinstance(build, str) else _strings(build, "[tool.cibuildwheel] build", path)
    return Project(name, _requires_python(meta, path), _build_requires(system, [], path), selectors,
                   _py_api(tool, path), kind, settings, project_dir, torch_bound=torch_bound(data))


# PEP 508's name (as packaging's canonicalize_name(validate=True) reads it), at most 200 characters
_NAME = re.compile(r"(?i)[A-Z0-9](?:[A-Z0-9._-]{0,198}[A-Z0-9])?")


def _check_name_and_version(name: str, version: object, path: Path) -> None:
    """[project] name a PEP 508 name and a static version a PEP 440 one: checked before either reaches
    any output (a plan, report.md, the workflow's log), where a newline or markup in them would be
    lines of their own. Neither is shown as given when refused, only its length."""
    from packaging.version import InvalidVersion, Version

    if not _NAME.fullmatch(name):
        raise CiError(f"{path}: [project] name is not a valid project name ({len(name)} characters; PEP 508: "
                      "letters, digits, `.`, `_` and `-`, starting and ending with a letter or digit)")
    if version is None:
        return
    if not isinstance(version, str):
        raise CiError(f"{path}: [project] version must be a string, not {options.toml_text(version)}")
    try:
        Version(version)
    except InvalidVersion:
        raise CiError(f"{path}: [project] version is not a PEP 440 version ({len(version)} characters)") from None


def _py_api(tool: dict[str, Any], path: Path) -> str:
    """[tool.scikit-build] wheel.py-api ("" when unset): "py3" makes one wheel for every Python, "cp3X" an
    abi3 one for every Python from 3.X on."""
    skbuild = _table(tool, "scikit-build", path, "tool.")
    py_api = _table(skbuild, "wheel", path, "tool.scikit-build.").get("py-api", "")
    if not isinstance(py_api, str):
        raise CiError(f"{path}: [tool.scikit-build] wheel.py-api must be a string, not {options.toml_text(py_api)}")
    return py_api


def _torch_requirements(data: dict[str, Any]) -> list[str]:
    system, meta = data.get("build-system", {}), data.get("project", {})
    return [r for table, key in ((system, "requires"), (meta, "dependencies")) if isinstance(table, dict)
            and isinstance(table.get(key), list) for r in table[key] if isinstance(r, str)]


def names_torch_bound(data: dict[str, Any]) -> bool:
    """Whether the requirements put any specifier on torch (`torch<2.8`), read with the standard library:
    what tells a bare Python that packaging must read it."""
    return any(re.match(r"\s*torch\s*(\[[^\]]*\]\s*)?[<>=!~]", r, re.I) for r in _torch_requirements(data))


def torch_bound(data: dict[str, Any]) -> str | None:
    """The torch specifier a pyproject.toml's own requirements put on torch: [build-system] requires (the
    torch it builds against) and [project] dependencies (the one it runs with, which the wheel pins), read
    with the standard library's data and packaging (wheelci.config.torchaxis.project_bound)."""
    from wheelci.config.torchaxis import project_bound

    return project_bound(_torch_requirements(data))


def read_py_api(project_dir: Path) -> str:
    """The project's wheel.py-api, read with the standard library alone (`plan --workflow-matrix` runs on
    a bare Python, where read_project, which checks requirements with packaging, cannot)."""
    data = load_pyproject(Path(project_dir)) or {}
    path = Path(project_dir) / "pyproject.toml"
    return _py_api(_table(data, "tool", path), path)


def merge(settings: Settings, *, test_command: str | None, test_requires: list[str], env: list[str],
          exclude: list[str], limit: str | None, stable_abi: str | None = None, variants: bool = False,
          public_env: Sequence[str] = ()) -> Settings:
    """Command-line options over the table, as options.resolve takes them (lists add up, single values
    from the command line win); `--env NAME=VALUE` checked here. A --env variable wins over the table's
    env and over its .cuda / .cpu env alike."""
    given = options.parse_assignments(env)
    values = dict(settings.table.values)
    values.update({k: v for k, v in (("test_command", test_command), ("limit", limit)) if v})
    if stable_abi:
        values["stable_abi"] = options.stable_abi(stable_abi, "--stable-abi")
    values.update(test_requires=settings.test_requires + list(test_requires), env={**settings.env, **given},
                  exclude=settings.exclude + list(exclude), variant=variants or settings.variants,
                  public_env=sorted({*settings.public_env, *public_env}))
    kinds = {kind: {**table, "env": {**table.get("env", {}), **{k: v for k, v in given.items()
                                                               if k in table.get("env", {})}}}
             for kind, table in settings.table.kinds.items()}
    return Settings(options.Table(values, kinds, settings.table.name))


def resolve(project: Path | str, work: Path, env: Mapping[str, str] | None = None) -> Project:
    """The project to build, read once: the project directory itself, or the sdist extracted into work, or
    a requirement's sdist fetched from the index (wheelci.config.fetch) and extracted."""
    root, fetched = locate(project, work, env)
    return replace(read_project(root), fetched=fetched) if fetched else read_project(root)


def locate(project: Path | str, work: Path, env: Mapping[str, str] | None = None) -> tuple[Path, Fetched | None]:
    """The directory the project argument names (an sdist extracted into work), and what was fetched for a
    requirement: a word that names no file and reads as no path (wheelci.cli.project_argument)."""
    if isinstance(project, str):
        # packaging and requests, which the plan job's bare Python lacks, only for a requirement
        from wheelci.config.fetch import fetch

        got = fetch(project, os.environ if env is None else env)
        return extract_sdist(got.path, work / "sdist"), got
    if project.is_dir():
        return project.resolve(), None  # read_project refuses a directory that is no project
    if project.is_file() and is_sdist(project):
        return extract_sdist(project, work / "sdist"), None
    if not project.exists():
        raise CiError(f"{project}: no such file or directory")
    raise CiError(f"{project}: neither a project directory nor an sdist (.tar.gz)")
