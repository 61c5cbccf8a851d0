"""A CMake project asked, by its own configure, what it builds before anything compiles.

Why: a CMakeLists.txt decides at configure time what it builds (bitsandbytes builds its CUDA library
only when its COMPUTE_BACKEND option says cuda), and a reading of its text guesses. The build's own
configure is asked instead (resources/cmake_probe/probe.cmake, included after project() through
CMAKE_PROJECT_INCLUDE): at its end it writes every target with its CUDA sources and CUDA_ARCHITECTURES,
and in a --cuda build with no target of CUDA sources it stops there. The configure is the build's, so this
costs no second configure and adds no trust. What a stopped configure left in its CMakeCache.txt names the
project's options; one whose meaning --cuda makes certain (a backend choice listing cuda, a USE_CUDA-style
switch) is set and the build run again; the user's own definitions never change.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from wheelci.compile.workdir import stage_files
from wheelci.config.switches import CUDA_WORD
from wheelci.util import secret

if TYPE_CHECKING:
    from wheelci.plan import Plan

STAGED = "cmake-probe"  # util.layout's work-directory entry
ANSWERS = "answers.txt"
ANSWERS_MAX = 1 << 20  # a project's target list is a few kB
CACHE_MAX = 1 << 20  # a CMakeCache.txt is read this far (a project's is tens of kB)
STOPPED = "wheelci: this --cuda build's configure defines no target with CUDA sources"  # probe.cmake's line
# the variables through which a user hands CMake definitions to the build (scikit-build-core reads them all)
_USER_DEFINES = ("CMAKE_ARGS", "SKBUILD_CMAKE_ARGS", "SKBUILD_CMAKE_DEFINE")


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # CMake's TYPE: SHARED_LIBRARY, MODULE_LIBRARY, EXECUTABLE
    cuda_sources: int
    cuda_architectures: tuple[str, ...]  # its CUDA_ARCHITECTURES ("80", "90-real"); () where CMake adds none


@dataclass(frozen=True)
class Configured:
    """What the configure defined, as probe.cmake wrote it."""

    languages: tuple[str, ...]
    targets: tuple[Target, ...]

    @property
    def cuda_targets(self) -> list[Target]:
        return [t for t in self.targets if t.cuda_sources]

    @property
    def compiles_cuda(self) -> bool:
        """Whether anything may compile CUDA: a target of CUDA sources, or the CUDA language enabled (what
        probe.cmake stops a --cuda build's configure without)."""
        return bool(self.cuda_targets) or "CUDA" in self.languages

    def to_json(self) -> dict[str, object]:
        return {"languages": list(self.languages),
                "targets": [{"name": t.name, "type": t.kind, "cuda_sources": t.cuda_sources,
                             "cuda_architectures": list(t.cuda_architectures)} for t in self.targets]}


def parse(text: str) -> Configured | None:
    """probe.cmake's answers (tab-separated lines); None for a file not of that shape (pure)."""
    languages: tuple[str, ...] | None = None
    targets: list[Target] = []
    for line in text[:ANSWERS_MAX].splitlines():
        fields = line.split("\t")
        if fields[0] == "languages" and len(fields) == 2:
            languages = tuple(w for w in fields[1].split(",") if w)
        elif fields[0] == "target" and len(fields) == 5 and fields[3].isdigit():
            targets.append(Target(fields[1], fields[2], int(fields[3]), tuple(a for a in fields[4].split(",") if a)))
        elif line:
            return None
    return Configured(languages, tuple(targets)) if languages is not None else None


@dataclass(frozen=True)
class Asking:
    """The config settings that put the question to the build's configure, and where its answers land."""

    config: list[str]
    answers: Path

    def read(self) -> Configured | None:
        """The configure's answers, once; None where it did not get to its end (an error of its own, a CMake older
        than 3.19) or wrote something else."""
        try:
            with open(self.answers, "rb") as f:
                text = f.read(ANSWERS_MAX).decode("utf-8", "replace")
            self.answers.unlink()  # read once: a run that does not answer again is not read as if it had
        except OSError:
            return None
        return parse(text)


def asking(plan: Plan, work_dir: Path, environ: dict[str, str]) -> Asking | None:
    """The question staged into the work directory (its path is the same every build, so a kept tree's
    configure sees no change), its answers file removed; None where the user gives CMAKE_PROJECT_INCLUDE."""
    if "CMAKE_PROJECT_INCLUDE" in user_defines(environ):
        return None
    staged = stage_files(Path(str(files("wheelci.resources") / "cmake_probe")), work_dir, STAGED)
    answers = staged / ANSWERS
    answers.unlink(missing_ok=True)
    needs = "ON" if plan.cuda and not plan.run.allow_no_device_code else "OFF"
    defines = {"CMAKE_PROJECT_INCLUDE": staged / "probe.cmake", "wheelci_probe_answers": answers,
               "wheelci_probe_needs_cuda": needs}
    return Asking([w for k, v in defines.items() for w in ("-C", f"cmake.define.{k}={v}")], answers)


def user_defines(environ: dict[str, str]) -> set[str]:
    """The names the user's CMAKE_ARGS, SKBUILD_CMAKE_ARGS and SKBUILD_CMAKE_DEFINE define (pure)."""
    names: set[str] = set()
    for var in _USER_DEFINES:
        value = environ.get(var, "")
        if var == "SKBUILD_CMAKE_DEFINE":
            names |= {d.split("=", 1)[0].split(":", 1)[0].strip() for d in value.split(";") if "=" in d}
            continue
        try:  # scikit-build-core splits SKBUILD_CMAKE_ARGS at `;`, CMAKE_ARGS as a shell would
            words = [w for w in value.split(";") if w] if var == "SKBUILD_CMAKE_ARGS" else shlex.split(value)
        except ValueError:
            words = value.split()
        given = [w[2:] or (words[i + 1] if i + 1 < len(words) else "") for i, w in enumerate(words) if w.startswith("-D")]
        names |= {g.split("=", 1)[0].split(":", 1)[0] for g in given if g}
    return names


@dataclass(frozen=True)
class CacheEntry:
    name: str
    kind: str  # BOOL, STRING
    value: str
    help: str
    choices: tuple[str, ...]  # its STRINGS property (set_property(CACHE NAME PROPERTY STRINGS ...))


# a CMakeCache.txt entry: NAME:TYPE=VALUE, after its `//help` lines (none where the help is empty)
_CACHE_ENTRY = re.compile(r"([A-Za-z_][A-Za-z0-9_.+-]*):(BOOL|STRING|INTERNAL)=(.*)")
# what CMake, its modules and the packages it found put in the cache: not the project's own options
_NOT_THE_PROJECTS = re.compile(r"(?:CMAKE|CUDAToolkit|Python3?|Torch|Caffe2|pybind11|SKBUILD|FETCHCONTENT|wheelci)_"
                               r"[A-Za-z0-9_]*|CUDA_(?:TOOLKIT|NVCC|HOST|SDK|PROPAGATE|SEPARABLE|VERBOSE|64_BIT|"
                               r"BUILD_CUBIN|BUILD_EMULATION|GENERATED|ATTACH|USE_STATIC|VERSION)[A-Za-z0-9_]*|SKBUILD|BUILD_TESTING|.*_DIR")


def project_options(cache: str) -> list[CacheEntry]:
    """The project's own options (its option() and set(... CACHE)) in a CMakeCache.txt, in its order (pure;
    one pass over the lines)."""
    entries: list[CacheEntry] = []
    choices: dict[str, tuple[str, ...]] = {}
    help_lines: list[str] = []
    for line in cache[:CACHE_MAX].splitlines():
        if line.startswith("//"):
            help_lines.append(line[2:].strip())
            continue
        m = _CACHE_ENTRY.fullmatch(line)
        text, help_lines = " ".join(help_lines)[:120], []
        if m is None:
            continue
        if m[2] == "INTERNAL":
            if m[1].endswith("-STRINGS"):
                choices[m[1].removesuffix("-STRINGS")] = tuple(c for c in m[3].split(";") if c)
        elif not _NOT_THE_PROJECTS.fullmatch(m[1]):
            entries.append(CacheEntry(m[1], m[2], m[3], text, ()))
    return [CacheEntry(e.name, e.kind, e.value, e.help, choices.get(e.name, ())) for e in entries]


def cache_text(build_dir: Path | None) -> str | None:
    """The CMakeCache.txt a configure left in the build tree, its first CACHE_MAX bytes; None without one (or
    a link there)."""
    cache = build_dir / "CMakeCache.txt" if build_dir else None
    if cache is None or not cache.is_file() or cache.is_symlink():
        return None
    with open(cache, "rb") as f:
        return f.read(CACHE_MAX).decode("utf-8", "replace")


def shown(entry: CacheEntry) -> str:
    """`NAME=VALUE ("help")` as a plan may show it: a value whose name says it is a secret masked."""
    value = secret.MASK if secret.is_secret_name(entry.name) else secret.redact(entry.value[:64])
    return f'{entry.name}={value} ("{entry.help}")' if entry.help else f"{entry.name}={value}"


def cmake_cuda_options(cache: str, limit: int = 6) -> list[str]:
    """The project's options that may turn its CUDA code on, shown, those naming CUDA first (pure)."""
    found = [e for e in project_options(cache) if CUDA_WORD.search(f"{e.name} {e.value} {e.help}")]
    found.sort(key=lambda e: not re.search("cuda", f"{e.name} {e.help}", re.IGNORECASE))
    return [shown(e) for e in found[:limit]]


# a switch whose name says it turns CUDA on: USE_CUDA, WITH_CUDA, BUILD_CUDA, ENABLE_CUDA, MYLIB_USE_CUDA
_CUDA_SWITCH = re.compile(r"(?:[A-Z0-9]+_)?(?:USE|WITH|BUILD|ENABLE)_CUDA", re.IGNORECASE)
# a backend choice whose help lists its values: "The compute backend to use (cpu, cuda, hip, mps, xpu)"
_LISTED = re.compile(r"\(([^()]*)\)")
_OFF = ("OFF", "FALSE", "NO", "N", "0", "")


def cuda_setting(cache: str, given: set[str]) -> tuple[CacheEntry, str] | None:
    """The one option of the project whose meaning --cuda makes certain, and the value that turns CUDA on: a
    choice among values that include `cuda` (its STRINGS property, or a list in its help), or a USE_CUDA-style
    switch that is off. None where there is no such option, more than one (not certain), or the user defined
    it (pure)."""
    found: list[tuple[CacheEntry, str]] = []
    for e in project_options(cache):
        if e.name in given:
            continue
        listed = e.choices or tuple(w.strip().lower() for m in _LISTED.finditer(e.help) for w in m[1].split(","))
        if e.kind == "STRING" and "cuda" in listed and e.value.lower() != "cuda" and e.value.lower() in (*listed, ""):
            found.append((e, "cuda"))
        elif e.kind == "BOOL" and _CUDA_SWITCH.fullmatch(e.name) and e.value.upper() in _OFF:
            found.append((e, "ON"))
    return found[0] if len(found) == 1 else None


def refusal(plan: Plan, cache: str | None) -> str:
    """Why a --cuda build of a configure that defines no CUDA target stops before its compile."""
    options = cmake_cuda_options(cache) if cache else []
    said = (f"its options that may turn CUDA on: {'; '.join(options)}; set one with --env CMAKE_ARGS=-DNAME=VALUE"
            if options else "give the option of its own that turns CUDA on with --env CMAKE_ARGS=-DNAME=VALUE "
                            "(its CMakeLists.txt names it)")
    return (f"a CUDA {plan.cuda} build of this CMake project compiles no CUDA as configured: its configure defines "
            f"no target with CUDA sources (stopped before compiling); {said}; pass --allow-no-device-code if its "
            "kernels are compiled at run time")


def notes(configured: Configured, plan: Plan) -> list[str]:
    """What the plan says of a configure that answered: its CUDA targets and the device code they get."""
    cuda = configured.cuda_targets
    if not plan.cuda or not cuda:
        return []
    own = sorted({a for t in cuda for a in t.cuda_architectures})
    names = ", ".join(t.name for t in cuda[:4]) + (f" and {len(cuda) - 4} more" if len(cuda) > 4 else "")
    if plan.narrowed:
        was = f" (the configure's {';'.join(own)} replaced)" if own else ""
        return [f"CUDA targets {names}; device targets: {plan.arch_list}{was}"]
    if own:
        return [f"CUDA targets {names}; device targets: {';'.join(own)} (their CUDA_ARCHITECTURES)"]
    return [f"CUDA targets {names}; device targets: what their nvcc flags name (CUDA_ARCHITECTURES off; torch's CMake "
            f"puts TORCH_CUDA_ARCH_LIST={plan.arch_list} there)"]
