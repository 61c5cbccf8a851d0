"""One place that turns the settings, the environment and this machine's facts into a build plan.

Modelled on cibuildwheel's options.py: every later stage reads the Plan, never the arguments. make_plan
is a function of what it is given: the settings (arguments, pyproject, the CUDA matrix), an environment
mapping and the Facts the edge probed (wheelci.engine.detect_facts). It never reads os.environ or asks
an engine; what a run uses is in the Plan, and the dry run shows all of it, secrets masked.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlsplit

from wheelci import archs as arch, engine as eng
from wheelci.cibw import ContainerInputs, cibw_quote, container_environment
from wheelci.config import constraints, matrix as mx, torchaxis
from wheelci.config.compilecache import for_the_store, parse, torch_finds_ccache
from wheelci.config.options import Options
from wheelci.config.project import Backend, Project
from wheelci.config.releases import TorchIndex, choose_torch, release_note
from wheelci.config.stable import StablePlan, minor_of, newest_torch, parse_target, pick_row, plan_stable
from wheelci.config.switches import ScriptReading, gencode_note, plan_switches, read_scripts
from wheelci.engine import Engine, Facts, detect_facts
from wheelci.errors import CiError
from wheelci.native.stable_abi import FLOOR
from wheelci.util import epoch, secret, variables
from wheelci.util.cache import cache_dir
from wheelci.util.invocation import command
from wheelci.util.log import on_github_actions
from wheelci.util.sizes import parse_limit
from wheelci.util.untrusted import cut, one_line, workflow_commands_off
from wheelci.wheel.names import cuda_tag, local_version, normalize
from wheelci.wheel.requirements import read_requirement

if TYPE_CHECKING:
    from wheelci.config.compilecache import CompileCache

ENGINES = ("auto", *(e.value for e in Engine))
AUTO_NEEDS_CONTAINER = ("no container engine responds, and CUDA {cuda} needs docker or podman: the host "
                        "cannot build it ({why})")
_PY = re.compile(r"3\.\d{1,2}")  # fullmatch: `$` passes a trailing newline
# What names a CUDA toolkit to a build script: torch's cpp_extension, CMake's CUDA language and FindCUDAToolkit.
CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDA_ROOT", "CUDAToolkit_ROOT")
# CMake's FindCUDAToolkit looks in /usr/local/cuda whatever PATH holds: a CPU build turns it off
CMAKE_NO_CUDA = ("CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON",)
# What a host build takes from the shell that changes its result: compilers and their flags, parallelism,
# and where pip finds the build environment's packages. The plan names those set.
INHERITED = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "MAX_JOBS", "CUDAHOSTCXX", "NVCC_APPEND_FLAGS",
             "NVCC_PREPEND_FLAGS", "CMAKE_ARGS", "CMAKE_GENERATOR", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
             "PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_CONFIG_FILE")


@dataclass(frozen=True)
class CpuView:
    """What a CPU host build hides of this machine's CUDA toolkit. A build script that compiles CUDA code
    whenever it finds nvcc (torchsort's setup.py runs it) fails under a CPU torch, whose cpp_extension
    has no CUDA_HOME; so the compile finds no nvcc on PATH, none of CUDA_VARIABLES, and a CMake project
    no CUDAToolkit package. A PATH entry holding nvcc is seen through a copy of it without nvcc, not dropped:
    /usr/bin may hold the distribution's nvcc and the C++ compiler both."""

    nvcc_dirs: list[str]  # PATH entries holding an nvcc
    unset: list[str]  # the CUDA_VARIABLES the environment sets
    cmake_defines: list[str] = field(default_factory=list)  # CMAKE_NO_CUDA, for a CMake project

    def describe(self) -> str:
        hidden = [f"PATH's {d} seen without nvcc" for d in self.nvcc_dirs]
        hidden += [f"{', '.join(self.unset)} unset"] if self.unset else []
        hidden += ["CMake's find_package(CUDAToolkit) off"] if self.cmake_defines else []
        return "CPU only: " + ("; ".join(hidden) if hidden else "no nvcc on PATH and no CUDA variable to hide")


def cpu_view(env: Mapping[str, str], cmake: bool, nvcc_dirs: tuple[str, ...] | list[str]) -> CpuView:
    """The CpuView of an environment: the PATH entries holding an nvcc (wheelci.engine.nvcc_dirs), the CUDA
    variables set; `cmake`: the project is built by CMake."""
    return CpuView(list(nvcc_dirs), [v for v in CUDA_VARIABLES if env.get(v)], list(CMAKE_NO_CUDA) if cmake else [])


@dataclass(frozen=True)
class RunSettings:
    """What a build does with its wheels, as the settings ([tool.wheelci], variables and options, resolved) say: the
    Plan carries it whole, and the dry run shows it."""

    build_env: dict[str, str] = field(default_factory=dict)  # --env and [tool.wheelci] env, set for the compile
    public_env: list[str] = field(default_factory=list)  # build_env names whose values may be shown
    excludes: list[str] = field(default_factory=list)  # library patterns repair leaves out (beyond the built-in)
    nvcc_source: str = "auto"  # host CUDA builds: "auto" | "host" | "wheel"
    allow_no_device_code: bool = False
    local_version: str = "auto"  # "auto" | "none" | a label
    variants: bool = False  # PEP 825 variant wheels (CUDA), the release's plain wheel (CPU)
    limit: str | None = None  # the size limit each wheel is checked (and split) against
    test_command: str | None = None
    test_requires: list[str] = field(default_factory=list)
    upload: str | None = None  # the repository the verified wheels go to
    source_date_epoch: int | None = None  # every timestamp written (SOURCE_DATE_EPOCH, else the commit's time)
    compile_cache: str | None = None  # a remote compile cache's URL, as given (shown only by its storage's name)
    warm_for: str | None = None  # compile-only, filling the store for a build of this arch list (--warm-for)
    build_requires: list[str] = field(default_factory=list)  # --build-requires: beside the project's own


@dataclass(frozen=True)
class Request:
    """The target as the user named it (options, variables and [tool.wheelci]); make_plan resolves it against the matrix.
    `image` replaces the matrix's image, `find_links` is a wheel directory the container's pip uses (torch
    then comes from pip's sources, unless `torch_index_url` names an index). `stable_abi` (a torch minor,
    e.g. "2.10") builds one wheel for every torch from it on: `cuda` may then name a major ("13"), built
    with its lowest CUDA against its newest torch."""

    cuda: str | None = None  # None: a CPU build
    torch: str | None = None
    python: list[str] | None = None
    arch_list: str | None = None
    engine: str = "auto"
    image: str | None = None
    find_links: Path | None = None
    torch_index_url: str | None = None
    stable_abi: str | None = None
    archs: tuple[str, ...] = ("x86_64",)  # the machine architectures (wheelci.archs), cibuildwheel's --archs
    keep_project_archs: bool = False  # the project's own device targets stand, whatever arch_list says

    @classmethod
    def from_options(cls, o: Options) -> Request:
        """The target as the resolved options name it (wheelci.config.options)."""
        return cls(cuda=o.cuda, torch=o.torch, python=split_csv(o.python), arch_list=o.arch_list, engine=o.engine,
                   image=o.image, find_links=o.find_links, torch_index_url=o.torch_index_url,
                   stable_abi=o.stable_abi, archs=tuple(arch.parse(o.archs)), keep_project_archs=o.keep_project_archs)


def run_settings(o: Options, source_date_epoch: int | None = None) -> RunSettings:
    """What the run does with its wheels, as the resolved options say."""
    return RunSettings(build_env=dict(o.env), public_env=sorted(o.public_env), excludes=list(o.exclude),
                       nvcc_source=o.nvcc, allow_no_device_code=o.allow_no_device_code,
                       local_version=o.local_version, variants=o.variant, limit=o.limit,
                       test_command=o.test_command, test_requires=list(o.test_requires), upload=o.upload,
                       source_date_epoch=source_date_epoch, compile_cache=(o.compile_cache or "").strip() or None,
                       warm_for=warm_for(o), build_requires=checked_requirements(o.build_requires))


def checked_requirements(given: tuple[str, ...]) -> list[str]:
    """--build-requires, each a PEP 508 requirement (a typo is bad input now, not pip's error minutes in)."""
    for text in given:
        req = read_requirement(text)
        if req is None or req.url or text.strip().endswith((".whl", ".tar.gz", ".zip")):
            raise CiError(f"--build-requires {cut(one_line(text), 80)!r}: not a requirement (e.g. psutil, pybind11>=2.6)")
        if normalize(req.name) == "torch":
            raise CiError(f"--build-requires {cut(one_line(text), 80)!r}: the build's torch is the plan's (--torch)")
    return [t.strip() for t in given]


def warm_for(o: Options) -> str | None:
    """--warm-for, which only a compile-only build that fills a store takes (its objects are never shipped)."""
    if o.warm_for is None:
        return None
    if not o.compile_only or not (o.compile_cache or "").strip():
        raise CiError("--warm-for: only with --compile-only and --compile-cache (it fills the store for another "
                      "build; its own objects are not that build's)")
    return o.warm_for


def plan_for(o: Options, project: Project, environ: Mapping[str, str]) -> Plan:
    """The edge that `build`, its dry run and `plan` share: this process's environment and the machine's
    facts, probed once, into make_plan, with the resolved options."""
    parse_limit(o.limit)  # a bad limit is bad input now, not after the compile
    request = Request.from_options(o)
    facts = detect_facts(environ, engine=o.engine, cuda=o.cuda, archs=request.archs)
    return make_plan(request, project_dir=project.root, run=run_settings(o, epoch.for_build(environ, project.root)),
                     env=environ, facts=facts, project=project)


@dataclass(frozen=True)
class Plan:
    cuda: str | None  # None for a CPU build
    torch: str
    torch_index_url: str | None
    torch_on_pypi: bool  # PyPI's default Linux torch of this version is this very CUDA build
    cudnn_requirement: str | None
    image: str | None  # None: cibuildwheel's pinned image for `manylinux`
    manylinux: str
    arch_list: str
    python: list[str]
    identifiers: list[str]
    environment: dict[str, str]
    engine: Engine  # what `engine_requested` resolved to
    nvcc_flags: list[str] = field(default_factory=list)
    gcc_max: int | None = None
    notes: list[str] = field(default_factory=list)
    image_origin: str | None = None  # "ameli" | "quay" | "ours" | "given" (--image)
    engine_requested: str = "auto"  # what the user asked for; `engine` is what it resolved to
    find_links: str | None = None  # a wheel directory mounted into the container for pip (torch, its deps)
    project: str = ""  # the project's name, its directory and its build system
    project_dir: str = ""
    backend: str = ""
    stable: StablePlan | None = None  # a stable-ABI build: one wheel per variant for every later torch
    stable_from_project: bool = False  # stable because the project's scripts define TORCH_TARGET_VERSION
    tool_constraints: list[str] = field(default_factory=list)  # pip -c for build environments (ours, less the project's)
    build_requires: list[str] = field(default_factory=list)  # the project's [build-system] requires, as written
    cpu_view: CpuView | None = None  # a CPU host build: what its compile does not see of a CUDA toolkit
    ccache_dir: str = ""  # the compiler cache, shared by every build on this machine (mounted into containers)
    stable_flags: dict[str, str] = field(default_factory=dict)  # a stable-ABI build's compiler flags, by variable
    run: RunSettings = field(default_factory=lambda: RunSettings())  # what the run does with the wheels
    label: str | None = None  # the local version label of the wheels (None: no label), run.local_version resolved
    inherited: dict[str, str] = field(default_factory=dict)  # host builds: INHERITED variables the shell sets
    archs: list[str] = field(default_factory=lambda: ["x86_64"])  # the machine architectures built
    reach: dict[str, str] = field(default_factory=dict)  # arch -> "native" | "emulated" | "unavailable" here
    script: ScriptReading | None = None  # what the project's build scripts read (wheelci.config.switches)
    switches: dict[str, str] = field(default_factory=dict)  # the build switches the plan sets (in run.build_env)
    images: dict[str, str] = field(default_factory=dict)  # arch -> the container's build image (or manylinux policy)
    container_index: str | None = None  # where the container's pip gets torch; None: its own sources, find-links
    narrowed: bool = False  # every nvcc call's device targets are the arch list's (--arch-list given: the law)
    fetched: dict[str, str] | None = None  # a project named by its requirement: the sdist fetched (wheelci.config.fetch)

    @property
    def torch_requirement(self) -> str:
        return f"torch>={self.stable.target}" if self.stable else f"torch=={self.torch}"

    def flat(self) -> dict[str, Any]:
        """Every field as data, the run's settings beside the rest (local_version as its resolved label):
        what the dry run shows and what the build's records key on."""
        doc: dict[str, Any] = asdict(self)
        run: dict[str, Any] = doc.pop("run")
        run.pop("local_version")
        return doc | run

    def to_json(self) -> dict[str, Any]:
        """The plan as it may be shown (--dry-run --json, report.json): build variables masked by name
        unless public, every registered secret and URL userinfo redacted, and a host build without the
        container's image and CIBW_* variables, which it does not use."""
        doc = self.flat()
        hidden = {k: v for k, v in self.run.build_env.items() if k not in secret.shown_names(self.run.public_env)}
        doc["build_env"] = secret.masked(self.run.build_env, self.run.public_env)
        doc["environment"] = {k: _mask_assignments(v, hidden) for k, v in self.environment.items()}
        doc["compile_cache"] = self.compile_cache.name if self.compile_cache else None
        if not self.engine.container:  # what the host build uses: no container image, no CIBW_* variable
            doc.update(environment={}, image=None, image_origin=None)
        shown: dict[str, Any] = secret.redact_data(doc)
        return shown

    @property
    def compile_cache(self) -> "CompileCache | None":
        """The remote compile cache the run names, read (its URL was checked when the plan was made)."""

        return parse(self.run.compile_cache, for_the_store(os.environ)) if self.run.compile_cache else None


def _mask_assignments(text: str, hidden: Mapping[str, str]) -> str:
    """cibuildwheel's NAME=value pairs with the hidden variables' values masked, however short."""
    for name, value in hidden.items():
        text = text.replace(f"{name}={cibw_quote(value)}", f"{name}={secret.MASK}")
    return text


def python_notes(project: Project, pythons: list[str]) -> list[str]:
    if project.py_api.startswith("py3") and len(pythons) > 1:
        return [f"the wheel is {project.py_api} (pyproject wheel.py-api): cibuildwheel builds it once, for "
                f"Python {pythons[0]}, and reuses it for {', '.join(pythons[1:])}"]
    return []


def identifier(python: str, machine: str = "x86_64") -> str:
    return f"cp{python.replace('.', '')}-manylinux_{machine}"


def _parse_python(python: list[str] | None, project: Project, line: mx.TorchLine, torch: str,
                  foreign: bool = False) -> list[str]:
    wanted = python or project.default_python()
    bad = [p for p in wanted if not _PY.fullmatch(p)]
    if bad:
        raise CiError(f"bad --python {', '.join(map(repr, bad))} (want versions like 3.10,3.11)")
    if project.requires_python:
        from packaging.specifiers import SpecifierSet

        spec = SpecifierSet(project.requires_python)
        excluded = [p for p in wanted if f"{p}.0" not in spec]
        if excluded:
            raise CiError(f"{project.name} requires Python {project.requires_python}: not {', '.join(excluded)}")
    missing = [p for p in wanted if p not in line.python]
    if missing:
        raise CiError(f"torch {torch} has no wheels for Python {', '.join(missing)} "
                      f"(it has {', '.join(line.python)})")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    others = [p for p in wanted if p != here]
    if foreign:  # verified by the image's own interpreter of that Python, over that Python's torch
        if len(set(wanted)) > 1:
            raise CiError(f"--python {', '.join(wanted)}: a build of another architecture makes one Python's "
                          "wheel (its torch is installed for that Python); run one build per Python")
    elif others and project.py_api != "py3":  # a py3 wheel installs anywhere; a cp3X wheel only there
        raise CiError(f"--python {', '.join(others)}: verify installs each wheel with this pipeline's Python "
                      f"{here}, so a {project.name} wheel for Python {others[0]} could only fail after its "
                      f"build; build --python {here}, or run {command('build')} with Python {others[0]}")
    return sorted(dict.fromkeys(wanted), key=lambda p: int(p.split(".")[1]))


def _image_ref(matrix: mx.Matrix, image: mx.Image, env: Mapping[str, str]) -> str:
    """Our images carry the local repo prefix, and a registry when WHEELCI_IMAGE_REGISTRY names one."""
    if image.origin != "ours":
        return image.name
    registry = variables.read(env, variables.IMAGE_REGISTRY).rstrip("/")
    ref = f"{matrix.our_image_repo}/{image.name}"
    return f"{registry}/{ref}" if registry else ref


def pick_image(matrix: mx.Matrix, row: mx.CudaRow, line: mx.TorchLine, torch: str) -> tuple[mx.Image, list[str]]:
    """The oldest-policy image that can build for this torch: its ABI, no older policy, GCC nvcc accepts.

    The oldest policy wins because it gives the most widely installable wheel; among equals a public image
    wins over ours (nothing to build). Returns the image and a note per image passed over, with why.
    """
    floor = mx.POLICIES.index(line.manylinux)
    notes, fits = [], []
    for img in row.images:
        if line.cxx11_abi and not img.cxx11_abi:
            notes.append(f"{img.name} passed over: its {img.manylinux} devtoolset cannot emit the cxx11 ABI that "
                         f"torch {torch} uses (torch >= 2.7 is cxx11-ABI {line.manylinux})")
        elif mx.POLICIES.index(img.manylinux) < floor:
            notes.append(f"{img.name} passed over: {img.manylinux} is older than torch {torch}'s {line.manylinux}")
        elif img.gcc > row.gcc_max:
            notes.append(f"{img.name} passed over: its GCC {img.gcc} is above what nvcc {row.version} accepts "
                         f"({row.gcc_max})")
        else:
            fits.append(img)
    if not fits:
        raise CiError(f"no build image for CUDA {row.version} + torch {torch}: it needs a {line.manylinux} image "
                      f"with GCC <= {row.gcc_max}" + (" that emits the cxx11 ABI" if line.cxx11_abi else "")
                      + f"; {'; '.join(notes) or 'the matrix lists none'}")
    best = min(fits, key=lambda i: (mx.POLICIES.index(i.manylinux), i.origin == "ours"))
    return best, notes


def ccache_dir(env: Mapping[str, str]) -> Path:
    """The compiler cache: CCACHE_DIR, else the tool's cache."""
    return Path(env.get("CCACHE_DIR") or cache_dir("ccache", env=env))


def resolve_engine(engine: str, cuda: str | None, row: mx.CudaRow | None, facts: Facts,
                   archs: tuple[str, ...] = ("x86_64",)) -> tuple[Engine, list[str]]:
    """auto -> the running container engine, else the host when it can build this, else a clear error.
    The host builds for its own architecture only: another one takes a container engine."""
    if engine not in ENGINES:
        raise CiError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
    foreign = [a for a in archs if a != facts.machine]
    if engine == "host" and foreign:
        raise CiError(f"--archs {','.join(foreign)} with --engine host: the host builds for this {facts.machine} "
                      f"machine only; use --engine docker or podman (cibuildwheel runs the {foreign[0]} image, "
                      f"under QEMU here), or build on an {foreign[0]} machine")
    if engine != "auto":
        return Engine(engine), []
    if foreign:
        if facts.engine:
            return Engine(facts.engine), [f"engine auto: {facts.engine} responds ({', '.join(foreign)} "
                                          "builds in a container)"]
        return Engine.DOCKER, [f"engine auto: no container engine responds, and {', '.join(foreign)} on this "
                               f"{facts.machine} machine needs docker or podman"]
    if cuda is None:
        return Engine.HOST, ["engine auto: CPU builds run on the host"]
    if facts.engine:
        return Engine(facts.engine), [f"engine auto: {facts.engine} responds"]
    why_not = eng.cannot_build(row, facts)
    if why_not:
        # Still a plan (a dry run must show it); running it fails with this reason in ci.compile.container.
        return Engine.DOCKER, [f"engine auto: {AUTO_NEEDS_CONTAINER.format(cuda=cuda, why=why_not)}"]
    return Engine.HOST, [f"engine auto: no container engine responds; building CUDA {cuda} on the host"]


def make_plan(request: Request, *, project_dir: Path = Path("."), run: RunSettings | None = None,
              env: Mapping[str, str] | None = None, facts: Facts | None = None,
              project: Project | None = None, index: TorchIndex | None = None) -> Plan:
    """The plan for `request`. `run` is what the run does with its wheels; `env` is the environment the
    run sees and `facts` what the edge probed of the machine (wheelci.engine.detect_facts); left out, they
    are the defaults, an empty environment and a machine with nothing detected. `project`: the
    pyproject.toml as the build read it (ci.config.project.read_project); left out, read from project_dir.
    `index`: where a torch release the matrix does not list is read (its metadata, cached); left out, the
    request's --torch-index-url, else the index `env` names (WHEELCI_TORCH_INDEX), else PyPI. `--torch
    latest` is that index's newest release."""
    env, facts = ({} if env is None else env), (Facts() if facts is None else facts)
    if index is None:
        index = (TorchIndex(request.torch_index_url, cache_dir("torch-releases", env=env)) if request.torch_index_url
                 else TorchIndex.from_env(env))
    project = Project.read(project_dir) if project is None else project
    if request.torch is not None and request.torch.strip().lower() == "latest":  # the newest it can build
        request = replace(request, torch=index.latest(project.torch_bound))
    elif request.torch is not None and not torchaxis.RELEASE.fullmatch(request.torch):
        axis = torchaxis.parse(request.torch)  # one bad-input line for what names no release at all
        if not axis.single:
            raise CiError(f"--torch {axis.text}: a build is against one torch release; `{command('plan')} --torch "
                          f"'{axis.text}'` lists the jobs of every release it names")
    run = RunSettings() if run is None else run
    matrix = mx.load()
    if request.engine not in ENGINES:
        raise CiError(f"unknown engine {request.engine!r} (choose from {', '.join(ENGINES)})")
    reading = read_scripts(Path(project_dir))  # the project's own build scripts, as text: nothing of it runs
    asked_stable = request.stable_abi is not None
    request, stable_notes = _projects_stable_abi(request, reading, matrix, project.torch_bound)
    if request.stable_abi is not None and request.cuda is not None:
        row = pick_row(matrix, request.cuda, parse_target(request.stable_abi))
        request = replace(request, cuda=row.version,
                          torch=request.torch or newest_torch(row, parse_target(request.stable_abi)))
    if request.find_links is not None:
        find_links = Path(request.find_links).resolve()
        if not find_links.is_dir():
            raise CiError(f"--find-links {find_links}: not a directory")
        request = replace(request, find_links=find_links)

    requires = [*project.build_requires, *run.build_requires]
    request, bound_notes = _within_bound(matrix, request, project.torch_bound)
    tools = constraints.for_project(requires)
    machine = Machine(env, facts, ccache_dir(env), constraints.file_for(tools.pins), index)
    plan = (_cpu_plan(matrix, project, request, machine) if request.cuda is None
            else _cuda_plan(matrix, project, request, request.cuda, machine))
    plan = replace(plan, project=project.name, project_dir=str(Path(project_dir).resolve()),
                   backend=project.backend, tool_constraints=list(tools.pins),
                   build_requires=requires,
                   notes=[*fetched_notes(project), *bound_notes, *stable_notes, *plan.notes, *tools.set_aside], ccache_dir=str(machine.ccache),
                   fetched=fetched_record(project))
    if plan.engine.container and not project.pyproject:  # before any image or environment work, not minutes in
        raise CiError(f"{plan.project_dir}: setup.py without a pyproject.toml: the {plan.engine} build (cibuildwheel) "
                      "takes a project with one; add a pyproject.toml whose [build-system] requires lists "
                      "setuptools and torch, or build on this machine with --engine host")
    if request.stable_abi is not None:
        plan = _with_stable(plan, plan_stable(matrix, request.stable_abi, plan.cuda, plan.torch))
        plan = replace(plan, stable_from_project=not asked_stable)
    # the project's own build switches, read before any compile: set where the build needs them, the user's win
    found = plan_switches(reading, run.build_env, cuda=plan.cuda is not None,
                          arch_list=plan.arch_list if request.arch_list is not None else None)
    run = replace(run, build_env={**found.sets, **run.build_env}, public_env=sorted({*run.public_env, *found.public}))
    # every nvcc call goes through resources/nvcc_targets.py: the host's (wheelci.compile.launch.narrowing), a
    # container's (cibw.environment: CMake's CUDA launcher, cpp_extension's PYTORCH_NVCC)
    narrowed = bool(plan.cuda) and request.arch_list is not None and not request.keep_project_archs
    hardcoded = gencode_note(reading, plan.arch_list, narrowed) if plan.cuda else None
    if project.backend is Backend.SETUPTOOLS and (Path(project_dir) / "setup.py").is_file():
        found = replace(found, notes=[*found.notes, "read from the project's text (the dry run runs none of its "
                                      "code); the build first asks its setup.py, run with setup() answering, and "
                                      "judges from what it says"])
    plan = replace(plan, script=reading, switches=dict(found.sets), narrowed=narrowed,
                   notes=[*plan.notes, *found.notes, *([hardcoded] if hardcoded else [])])
    plan = _with_run(plan, run)
    if run.compile_cache:  # a bad URL is bad input now, before the dry run shows anything

        parse(run.compile_cache, env)
    if run.warm_for is not None:
        plan = _with_run(plan, replace(run, warm_for=warm_list(plan, run.warm_for)))
    if not plan.engine.container:
        plan = replace(plan, inherited={k: env[k] for k in INHERITED if env.get(k)})
    if request.image is not None:
        plan = _with_image(plan, request.image)
    return replace(plan, environment=container_environment(container_inputs(plan, machine)))


def _projects_stable_abi(request: Request, reading: ScriptReading, matrix: mx.Matrix,
                         bound: str | None) -> tuple[Request, list[str]]:
    """A project whose scripts define TORCH_TARGET_VERSION compiles against torch's stable ABI on its own
    (xformers' CUDA build): its CUDA build is planned as --stable-abi of that target, against the newest
    torch of its row from the target on and within the project's own torch bound, since pinning one torch
    release would shut out every other the wheel loads on. The user's --stable-abi, or a --torch naming
    the release to pin (each job of a workflow matrix), wins; a CPU build, which such a project may compile
    classically (xformers does), and a row with no torch for it are only told. The build's probe checks
    that the extensions compile so (wheelci.compile.probe.judge)."""
    target = reading.stable_target
    if target is None or request.stable_abi is not None or minor_of(target) < FLOOR:
        return request, []
    said = f"{', '.join(reading.stable_scripts)} defines TORCH_TARGET_VERSION {target} (torch's stable ABI)"
    classic = f"--stable-abi {target} builds one wheel for every torch from {target}"
    if request.cuda is None:
        return request, [f"{said}: this CPU build pins one torch release; {classic} where its CPU build compiles "
                         "so too"]
    if request.torch is not None:  # --torch names the one release to pin: as asked
        return request, [f"{said}: --torch {request.torch} asks for a wheel pinned to it; {classic}"]
    try:
        row = pick_row(matrix, request.cuda, parse_target(target))
    except CiError:
        row = None
    found = [t.version for t in (row.torch if row else ()) if minor_of(t.version) >= minor_of(target)
             and (bound is None or torchaxis.within(t.version, bound))]
    if not found:
        within = f" within the project's own torch{bound}" if bound else ""
        return request, [f"{said}, but CUDA {request.cuda} has no torch from {target}{within} in the matrix: "
                         "planned classic, pinned to one torch release"]
    torch = max(found, key=torchaxis.key)
    return replace(request, stable_abi=target, torch=torch), [
        f"{said}: planned as a --stable-abi {target} build, one wheel per CUDA major for every torch from {target} "
        f"(--torch X builds a classic wheel pinned to X instead)"]


def warm_list(plan: Plan, whole: str) -> str:
    """--warm-for's arch list, checked: a CUDA build's, holding every architecture of the build's own part."""
    if plan.cuda is None:
        raise CiError("--warm-for: a CUDA build's option (a CPU build compiles no device code)")
    if plan.engine.container:
        raise CiError(f"--warm-for: a host build's option (the container's compilers take no added nvcc "
                      f"arguments); build on the host (--engine host), not {plan.engine.value}")
    full = mx.check_arch_list(plan.cuda, whole)
    missing = [a for a in mx.split_arch_list(plan.arch_list) if a not in mx.split_arch_list(full)]
    if missing:
        raise CiError(f"--warm-for {full}: lacks {', '.join(missing)} of --arch-list {plan.arch_list} (a part of it)")
    return full


def _with_image(plan: Plan, image: str) -> Plan:
    """The plan building in the image given (--image) instead of the matrix's."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9._/:@-]*", image):
        raise CiError(f"--image {image!r}: not an image reference (e.g. localhost/my-cuda-image:1)")
    if len(plan.archs) > 1:
        raise CiError(f"--image names one image, and --archs {','.join(plan.archs)} builds on several: "
                      "build one architecture per run (--archs) to give its image")
    return replace(plan, image=image, image_origin="given", images={**plan.images, plan.archs[0]: image},
                   notes=[n for n in plan.notes if "built from docker/" not in n])


def container_inputs(plan: Plan, machine: Machine) -> ContainerInputs:
    """What the container build reads of a finished plan: cibuildwheel's variables are made from these
    once (wheelci.cibw.container_environment), never patched after. A host build's plan shows them too."""
    return ContainerInputs(
        engine=plan.engine, images=dict(plan.images), identifiers=list(plan.identifiers),
        torch_requirement=f"torch=={plan.torch}", torch_index=plan.container_index, cudnn=plan.cudnn_requirement,
        build_requires=list(plan.build_requires), cuda=plan.cuda, arch_list=plan.arch_list,
        nvcc_flags=list(plan.nvcc_flags), tools=machine.tools, ccache=machine.ccache, ca=machine.facts.ca_bundle,
        gcc_max=plan.gcc_max, find_links=Path(plan.find_links) if plan.find_links else None,
        excludes=list(plan.run.excludes), stable_abi=plan.stable.target if plan.stable else None,
        stable_flags=dict(plan.stable_flags), build_env=dict(plan.run.build_env),
        backend=plan.backend, torch_finds_ccache=torch_finds_ccache(plan.torch),
        compile_cache=bool(plan.run.compile_cache), narrow=plan.narrowed)


@dataclass(frozen=True)
class Machine:
    """The environment and the probed facts a plan is made for, with what make_plan derives from them."""

    env: Mapping[str, str]
    facts: Facts
    ccache: Path
    tools: Path  # the pip constraints file of our build tools
    index: TorchIndex  # where a torch release the matrix does not list is read from


def variant_label(plan: Plan) -> str:
    """The local version label naming what a wheel was built against: `pt2.13.0.cu130`, `pt2.13.0.cpu`.

    Every CUDA variant of the example has the same file name otherwise, so the matrix's wheels would
    overwrite each other in one artifact, index or upload; torch's exact version is in it because the
    wheel pins it (libtorch's C++ ABI is not stable across releases). A stable-ABI wheel serves every
    later torch: the variant alone (`cpu`, `cu13`) names it."""
    if plan.stable:
        return plan.stable.variant
    return f"pt{plan.torch}.{cuda_tag(plan.cuda)}"


PYPI_UPLOAD_HOSTS = ("upload.pypi.org", "test.pypi.org")  # PyPI's and TestPyPI's upload endpoints


def pypi_destination(run: RunSettings) -> str | None:
    """Why the run's wheels are bound for PyPI, which refuses local version labels: an upload to PyPI or
    TestPyPI, or the pypi limit profile; None when they are not."""
    try:
        host = urlsplit(run.upload).hostname if run.upload else None
    except ValueError:
        host = None
    host = host.rstrip(".") if host else None  # upload.pypi.org. is the same host
    if host in PYPI_UPLOAD_HOSTS:
        return f"--upload to {host}"
    if run.limit and run.limit.strip().lower() == "pypi":
        return "the pypi limit"
    return None


def _with_run(plan: Plan, run: RunSettings) -> Plan:
    """The plan with what the run does with its wheels; `auto` resolved to the label (a release with
    variants: its CPU build is the plain wheel, with none)."""
    if run.nvcc_source not in ("auto", "host", "wheel"):
        raise CiError(f"--nvcc {run.nvcc_source!r}: choose from auto, host, wheel")
    pypi, notes = pypi_destination(run), list(plan.notes)
    upload = pypi is not None and pypi.startswith("--upload")  # the pypi limit alone is a size: labels stay
    if run.local_version == "auto":
        label = None if (run.variants and plan.cuda is None) or upload else variant_label(plan)
        if upload:
            notes.append(f"no local version label ({pypi}): PyPI refuses local versions, so the wheel is "
                         f"{plan.project or 'the project'}'s plain version; every variant of a release then has the same "
                         "file name, and PyPI takes one of them (publish the others, labelled, to an index of your own)")
    elif run.local_version == "none":
        label = None
    else:
        local_version("0", run.local_version)  # a bad label is refused here, before the dry run shows it
        label = run.local_version
        if upload:
            raise CiError(f"--local-version {label} with {pypi}: PyPI refuses local version labels (+{label}); use "
                          "--local-version none (or auto), or upload to an index of your own")
    if pypi and not upload and label and run.local_version != "auto":  # one the user chose (auto's: check says)
        notes.append(f"warning: the local version label +{label} cannot go to PyPI ({pypi}): PyPI refuses local "
                     "versions; --local-version none makes a wheel it takes (`wheelci check --limit pypi` refuses it)")
    if refused := sorted(set(run.public_env) - secret.shown_names(run.public_env)):
        notes.append(f"public-env names {', '.join(refused)}: a secret by its name, never shown (masked as {secret.MASK})")
        run = replace(run, public_env=sorted(secret.shown_names(run.public_env)))
    secret.add_variables(run.build_env, run.public_env)
    return replace(plan, label=label, notes=notes, run=replace(run, build_env=dict(run.build_env), public_env=sorted(run.public_env),
                                                  excludes=list(run.excludes), test_requires=list(run.test_requires)))


def stable_flags(stable: StablePlan, cuda: bool) -> dict[str, str]:
    """What a stable-ABI build adds to the compilers' flags, by variable: C and C++ (setuptools and CMake
    read CFLAGS/CXXFLAGS), nvcc (CMake reads CUDAFLAGS, nvcc itself NVCC_APPEND_FLAGS); CI_STABLE_ABI
    tells the project's build which mode it is in."""
    cxx = " ".join(stable.cuda_defines if cuda else stable.defines)
    flags = {"CI_STABLE_ABI": stable.target, "CFLAGS": cxx, "CXXFLAGS": cxx}
    if cuda:
        flags.update(CUDAFLAGS=" ".join(stable.cuda_defines), NVCC_APPEND_FLAGS=" ".join(stable.cuda_defines))
    return flags


def _with_stable(plan: Plan, stable: StablePlan) -> Plan:
    """The plan building a stable-ABI wheel: the container's compilers get the flags (after what the
    image sets: the values extend theirs), and the notes say what the wheel serves."""
    flags = stable_flags(stable, bool(plan.cuda))
    note = (f"stable ABI {stable.target}: one {stable.variant} wheel for {stable.serves}; verified under torch "
            + ", ".join(v for v, _ in stable.verify))
    # compiled against the oldest cuDNN of the range, which every later one runs (cuDNN 9.y runs 9.z code, z <= y)
    cudnn = plan.cudnn_requirement
    if plan.cudnn_requirement and stable.cudnn_floor:
        cudnn = f"{plan.cudnn_requirement.split('==')[0]}=={stable.cudnn_floor}"
    return replace(plan, stable=stable, stable_flags=flags, notes=[*plan.notes, note],
                   cudnn_requirement=cudnn)


def _within_bound(matrix: mx.Matrix, request: Request, bound: str | None) -> tuple[Request, list[str]]:
    """The torch a build takes within the project's own bound on it (its requirements: `torch<2.8`):
    a release asked outside it is refused; without one asked, the newest release of the build's row (the
    matrix's, for CPU) within it, where the default is not."""
    if bound is None:
        return request, []
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(bound)
    if request.torch is not None:
        if not spec.contains(request.torch):
            raise CiError(f"--torch {request.torch}: outside the project's own torch{bound} (its pyproject.toml's "
                          "requirements): name a release within it")
        return request, []
    row = matrix.row(request.cuda) if request.cuda is not None else None
    default = (row.default_torch if row else matrix.default_torch) or None
    if default is not None and spec.contains(default):
        return request, []
    offered = sorted({t.version for r in ([row] if row else matrix.rows) for t in r.torch}, key=torchaxis.key)
    within = [v for v in offered if spec.contains(v)]
    if not within:
        what = f"CUDA {request.cuda}" if request.cuda else "the matrix"
        raise CiError(f"the project wants torch{bound} (its pyproject.toml's requirements), and {what} has no release of it "
                      f"(it has {', '.join(offered[-4:]) or 'none'}): name one with --torch, or another --cuda")
    return replace(request, torch=within[-1]), [f"torch {within[-1]}: the newest release within the project's own "
                                                f"torch{bound} (its pyproject.toml's requirements), not the default {default}"]


def _torch_source(find_links: Path | None, torch_index_url: str | None, default: str | None) -> str | None:
    """The index the container's pip installs torch from: the one given; none (pip's own sources, the
    find-links directory first) when a find-links directory is; else the matrix's."""
    return torch_index_url or (None if find_links is not None else default)


def _cuda_plan(matrix: mx.Matrix, project: Project, request: Request, cuda: str, machine: Machine) -> Plan:
    row = matrix.row(cuda)
    engine, find_links, torch_index_url = request.engine, request.find_links, request.torch_index_url
    build, line, read = choose_torch(matrix, row, request.torch, machine.index)
    if read and not machine.index.is_pypi and torch_index_url is None:  # installed from where it was read
        torch_index_url = machine.index.url
    pythons = _parse_python(request.python, project, line, build.version, _foreign(request, machine.facts))
    archs = mx.check_arch_list(cuda, request.arch_list if request.arch_list is not None else row.arch_list)
    image, notes = pick_image(matrix, row, line, build.version)
    ref = _image_ref(matrix, image, machine.env)
    if image.origin == "ours" and "x86_64" in request.archs:
        notes.append(f"{ref} is built from docker/ (`{command('image')} build --cuda {cuda}`): "
                     f"no public {image.manylinux} image has CUDA {cuda}")
    if line.cxx11_abi and any(not i.cxx11_abi for i in row.images):
        notes.append(f"{cuda_tag(cuda)} ABI trap: torch {build.version} is cxx11-ABI {line.manylinux}, "
                     f"so the manylinux2014 image cannot build it")
    resolved, engine_notes = resolve_engine(engine, cuda, row, machine.facts, request.archs)
    identifiers = [identifier(p, a) for a in request.archs for p in pythons]
    index = _torch_source(find_links, torch_index_url, row.torch_index_url)
    images = {a: ref if a == "x86_64" else arm_image(matrix, row, machine.env, request.image) for a in request.archs}
    notes += arch_notes(matrix, request.archs, resolved, machine.facts, archs, images, cuda)
    # the host's environments (the build's, verify's) install this torch from its index even where the
    # container's pip takes it from find-links: the plan names where the release lives
    return Plan(cuda=cuda, torch=build.version, torch_index_url=torch_index_url or row.torch_index_url,
                torch_on_pypi=build.on_pypi,
                cudnn_requirement=build.cudnn, image=images[request.archs[0]], manylinux=image.manylinux, arch_list=archs,
                python=pythons, identifiers=identifiers, environment={}, engine=resolved,
                nvcc_flags=list(row.nvcc_flags), gcc_max=row.gcc_max, images=images, container_index=index,
                notes=read + notes + python_notes(project, pythons) + engine_notes,
                image_origin=image.origin, engine_requested=engine,
                find_links=str(find_links) if find_links else None, **_arch_fields(request.archs, machine.facts))


def _cpu_plan(matrix: mx.Matrix, project: Project, request: Request, machine: Machine) -> Plan:
    torch, engine, find_links, torch_index_url = request.torch, request.engine, request.find_links, request.torch_index_url
    if request.arch_list:
        raise CiError("--arch-list needs --cuda (a CPU build has no device code)")
    version = torch or matrix.default_torch
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise CiError(f"bad torch version {version!r} (want e.g. {matrix.default_torch})")
    releases = {t.version for r in matrix.rows for t in r.torch} | {matrix.default_torch}
    read = []
    if version in releases:
        line = matrix.torch_line(version)
    else:  # not a release the matrix lists: the index says whether it exists, and what it needs
        release = machine.index.release(version)
        if release.cuda is not None and request.torch_index_url:  # the index named for this CPU build's torch
            raise CiError(f"torch {version} on {request.torch_index_url.split('@')[-1]} is built on CUDA "
                          f"{release.cuda}, not a CPU build (--cuda {release.cuda}, or the CPU build's index)")
        line, read = release.line, [release_note(release)]
    pythons = _parse_python(request.python, project, line, version, _foreign(request, machine.facts))
    resolved, notes = resolve_engine(engine, None, None, machine.facts, request.archs)
    identifiers = [identifier(p, a) for a in request.archs for p in pythons]
    index = _torch_source(find_links, torch_index_url, matrix.cpu_index_url)
    images = {a: line.manylinux for a in request.archs}  # cibuildwheel's pinned image of that policy and arch
    notes += arch_notes(matrix, request.archs, resolved, machine.facts, "", images)
    return Plan(cuda=None, torch=version, torch_index_url=torch_index_url or matrix.cpu_index_url, torch_on_pypi=False,
                cudnn_requirement=None, image=None, manylinux=line.manylinux, arch_list="", python=pythons,
                identifiers=identifiers, environment={}, engine=resolved, images=images, container_index=index,
                notes=read + python_notes(project, pythons) + notes, engine_requested=engine,
                find_links=str(find_links) if find_links else None,
                cpu_view=cpu_view(machine.env, project.backend == "scikit-build-core", machine.facts.nvcc_dirs)
                if not resolved.container else None,  # an image has no toolkit to hide
                **_arch_fields(request.archs, machine.facts))


def _arch_fields(archs: tuple[str, ...], facts: Facts) -> dict[str, Any]:
    return {"archs": list(archs),
            "reach": {a: arch.reach(a, facts.machine, facts.emulates) or "unavailable" for a in archs}}


def _foreign(request: Request, facts: Facts) -> bool:
    return any(a != facts.machine for a in request.archs)


def arm_image(matrix: mx.Matrix, row: mx.CudaRow, env: Mapping[str, str], given: str | None) -> str:
    """The aarch64 (sbsa) build image of a CUDA row: the recipe of our image of that row, on the aarch64
    manylinux base with NVIDIA's sbsa repository (the public CUDA images this matrix lists are x86_64
    only); wheelci.image builds it under the same name. A row with no recipe of ours needs --image."""
    ours = [i for i in row.images if i.origin == "ours"]
    if not ours:
        if given:
            return given
        raise CiError(f"CUDA {row.version} on aarch64: the matrix has no image recipe of ours for it (its images "
                      f"are public x86_64 ones: {', '.join(i.name for i in row.images)}); give --image with an "
                      "aarch64 manylinux image that has this CUDA, or choose a CUDA version whose image we build "
                      f"({', '.join(r.version for r in matrix.rows if any(i.origin == 'ours' for i in r.images))})")
    img = ours[0]
    name = f"{img.manylinux}_aarch64_cuda_{row.version}"
    return _image_ref(matrix, mx.Image(img.manylinux, name, "ours", img.gcc, img.cxx11_abi, img.source), env)


def arch_notes(matrix: mx.Matrix, archs: tuple[str, ...], engine: Engine, facts: Facts, arch_list: str,
               images: dict[str, str], cuda: str | None = None) -> list[str]:
    """What the plan does for each architecture that is not this machine's own, and for aarch64 CUDA
    builds, how the arch list serves the Arm-hosted GPUs."""
    notes = []
    for a in archs:
        how = arch.reach(a, facts.machine, facts.emulates)
        if how == "native" or not engine.container:
            continue
        if how == "emulated":
            notes.append(f"{a}: built by cibuildwheel in {images[a]} under QEMU emulation (this machine is "
                         f"{facts.machine}), and verified in it the same way")
        else:
            notes.append(f"{a}: this {facts.machine} machine does not run {a} code; {arch.emulation_hint(a)}")
    if "aarch64" in archs and arch_list:
        served = "; ".join(f"{names} {cap}: {how}" for cap, names, how in arch.gpu_coverage(arch_list, matrix.arm_gpus))
        notes.append(f"aarch64 (sbsa) GPUs: {served}")
        if engine.container and "aarch64" in images:
            notes.append(f"{images['aarch64']} is built from docker/ on the aarch64 manylinux base "
                         f"(`{command('image')} build --cuda {cuda} --archs aarch64`)")
        elif facts.machine == "aarch64":
            notes.append("host build on aarch64: nvcc from NVIDIA's aarch64 (sbsa) wheels, else the host's")
    return notes


def fetched_record(project: Project) -> dict[str, str] | None:
    """What a requirement resolved to, as the plan and the report name it."""
    got = project.fetched
    return None if got is None else {"requirement": got.requirement, "name": got.name, "version": got.version,
                                     "filename": got.filename, "url": got.url, "sha256": got.sha256}


def fetched_notes(project: Project) -> list[str]:
    got = project.fetched
    return [] if got is None else [f"{got.requirement} names no file here: its sdist is {got.describe()}"]


def arch_row(plan: Plan) -> str:
    """The device targets the wheel will hold: the arch list's, or the project's own where its flags name
    them and the arch list does not replace them (gencode_note says why)."""
    if not plan.cuda:
        return "-"
    own = plan.script.gencodes if plan.script else []
    if own and not plan.narrowed:
        return f"{' '.join(own)} (the project's own flags; the arch list {plan.arch_list} does not reach them)"
    return f"{plan.arch_list} (every nvcc call's targets: the project's own flags replaced)" if own else plan.arch_list


def format_plan(plan: Plan, build_env: str | None = None) -> str:
    """The human-readable --dry-run summary: everything the run uses, secrets masked. `build_env`: what the
    build does for its host environment, as the caller found it (reused or made; wheelci.compile.hostenv)."""
    shown = plan.to_json()
    rows = [
        ("project", f"{plan.project} ({plan.project_dir}), built with {plan.backend}"),
        ("cuda", plan.cuda or "none (CPU build)"),
        ("torch", f"{plan.torch} from {plan.torch_index_url or 'pip sources'}"
                  + (" (also PyPI's default build)" if plan.torch_on_pypi else "")
                  + f"; {build_env or plan.engine.torch_source}"),
        ("cudnn", plan.cudnn_requirement or "-"),
        ("engine", plan.engine),
        ("image", f"{plan.image or '(cibuildwheel default)'} [{plan.manylinux}]" if plan.engine.container
                  else f"none (host build: this machine's compilers; repaired to {plan.manylinux})"),
        ("arch list", arch_row(plan)),
        ("nvcc flags", " ".join(plan.nvcc_flags) or "-"),
        ("gcc max", str(plan.gcc_max) if plan.gcc_max else "-"),
        ("python", ", ".join(plan.python)),
        ("stable abi", f"{plan.stable.target}: {plan.stable.variant} wheel, {plan.stable.serves}; defines "
                       f"{' '.join(plan.stable.cuda_defines or plan.stable.defines)}" if plan.stable else "no: "
                       f"the wheel pins {plan.torch_requirement}"),
        ("archs", ", ".join(f"{a} ({plan.reach.get(a, '?')})" for a in plan.archs)),
        ("identifiers", " ".join(plan.identifiers)),
        ("tool pins", " ".join(plan.tool_constraints) or "-"),
        ("build requires", " ".join(plan.build_requires) or "-"),
    ]
    if plan.cpu_view is not None:
        rows.insert(2, ("toolchain", plan.cpu_view.describe()))
    rows += _run_rows(plan)
    width = max(len(k) for k, _ in rows)
    # every value on its own line's end: a project's name, path, test command or a note cannot start a
    # line of its own (a forged row, a `::error::` workflow command) nor send a terminal escape
    lines = [f"{k:<{width}}  {one_line(v)}" for k, v in rows]
    if shown["environment"]:  # cibuildwheel's variables, for a container build only
        lines += ["environment:"] + [f"  {one_line(k)}={one_line(v)}" for k, v in shown["environment"].items()]
    lines += [f"note: {one_line(n)}" for n in plan.notes]
    return secret.redact("\n".join(lines))


def for_the_log(text: str) -> str:
    """The plan as printed: on GitHub Actions between `::stop-commands::` markers of a fresh token, so no
    line of it runs as a workflow command whatever a value holds (each is one line already)."""
    return "\n".join(workflow_commands_off(text.splitlines())) if on_github_actions() else text


def _run_rows(plan: Plan) -> list[tuple[str, str]]:
    """What the run does with its wheels, as the dry run shows it (build variables masked unless public)."""
    env = secret.masked(plan.run.build_env, plan.run.public_env)
    return [
        ("build env", " ".join(f"{k}={v}" for k, v in env.items()) or "-"),
        ("switches", " ".join(f"{k}={v}" for k, v in plan.switches.items()) + " (set by the plan: the project's "
                     "build script reads them; notes say why)" if plan.switches else "-"),
        ("ccache", plan.ccache_dir or "-"),
        ("compile cache", _cache_row(plan)),
        ("nvcc", f"{plan.run.nvcc_source} (host builds: the host nvcc if its version matches, else NVIDIA's wheels)"
                 if plan.cuda and not plan.engine.container else "-"),
        ("excludes", " ".join(plan.run.excludes) or "-"),
        ("device code", "not required (--allow-no-device-code)" if plan.run.allow_no_device_code
                        else "required" if plan.cuda else "-"),
        ("label", (f"+{plan.label}" if plan.label else "none") + (" (PEP 825 variants)" if plan.run.variants else "")),
        ("limit", plan.run.limit or "none"),
        ("test command", plan.run.test_command or "(import check only)"),
        ("test requires", " ".join(plan.run.test_requires) or "-"),
        ("upload", plan.run.upload or "-"),
        ("from shell", " ".join(f"{k}={v}" for k, v in plan.inherited.items()) or "-"),
        ("timestamps", f"{plan.run.source_date_epoch} (SOURCE_DATE_EPOCH)" if plan.run.source_date_epoch is not None
                       else "now (no SOURCE_DATE_EPOCH, no git commit, not an sdist)"),
    ]


def _cache_row(plan: Plan) -> str:
    cache = plan.compile_cache
    if cache is None:
        return "- (no remote store: ccache on this machine)"
    where = " in the container (its variables through the engine's --env-file)" if plan.engine.container else ""
    return f"{cache.name} through sccache{where}" + (f"; unusable here: {cache.unusable}" if cache.unusable else "")


def split_csv(text: str | None) -> list[str] | None:
    return [p.strip() for p in text.split(",") if p.strip()] if text else None


if __name__ == "__main__":  # `python -m wheelci.plan` (`python -m ci.plan` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.plan", run_name="__main__")
