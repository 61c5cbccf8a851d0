"""The build switches a project's build script reads, found before anything compiles.

Real CUDA extensions decide in their setup.py whether to compile their kernels, and most decide by
asking `torch.cuda.is_available()`, which is False on every builder without a GPU (a container's, a CI
runner's, a laptop's). Each family of projects then reads a variable of its own to force the build, or
downloads a prebuilt wheel unless told otherwise. CONVENTIONS holds those variables as data, each with
the project that showed it; `read_script` finds them (and the guard, a wheel download and hard-coded
`-gencode` flags) in the script's text, and `plan_switches` says what a build sets, what it leaves to the
user, and why. The values are build switches, not credentials: the plan shows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from wheelci.util import secret

# the build scripts read, and how much of each (a setup.py of megabytes is no setup.py worth reading whole)
SCRIPTS = ("setup.py", "CMakeLists.txt")  # pyproject.toml is read once, by config.project
MAX_SCRIPT = 1 << 20


@dataclass(frozen=True)
class Convention:
    """A variable some projects read to decide their build: `pattern` matches its name (fullmatch),
    `role` what setting it does: "builds" (the plan sets `value` so the kernels are compiled here),
    "skips" (set truthy, the build leaves the CUDA code out: the plan never sets it and warns when given),
    "named" (shown, left to the user). Every convention's variable is public: its value is shown. `cuda_only`: a "builds" switch a CPU build leaves unset."""

    pattern: str
    role: str
    value: str
    does: str
    shown_by: str
    cuda_only: bool = True


CONVENTIONS: tuple[Convention, ...] = (
    Convention("FORCE_CUDA", "builds", "1", "builds the CUDA extension even where torch.cuda.is_available() is False",
               "torch-scatter, torch-sparse, torch-cluster (PyG), detectron2, torchvision"),
    Convention("FORCE_ONLY_CUDA", "named", "1", "builds the CUDA library alone, without its CPU twin",
               "torch-scatter, torch-sparse (PyG)"),
    Convention("FORCE_ONLY_CPU", "skips", "1", "builds the CPU library alone", "torch-scatter, torch-sparse (PyG)"),
    Convention(r"[A-Z][A-Z0-9_]*_FORCE_BUILD", "builds", "TRUE",
               "compiles the extension instead of downloading a prebuilt wheel",
               "flash-attn (FLASH_ATTENTION_FORCE_BUILD), mamba-ssm, causal-conv1d", cuda_only=False),
    Convention(r"[A-Z][A-Z0-9_]*_SKIP_CUDA_BUILD", "skips", "TRUE", "builds without the CUDA kernels",
               "flash-attn (FLASH_ATTENTION_SKIP_CUDA_BUILD), mamba-ssm, causal-conv1d"),
    # the project's own arch list: set from --arch-list where one is given (`value`: how it writes it)
    Convention("NATTEN_CUDA_ARCH", "arch", "dotted", "builds libnatten for these targets; unset, with no GPU "
               "visible, it compiles nothing", "natten"),
    Convention("FLASH_ATTN_CUDA_ARCHS", "arch", "digits", "the device targets it compiles (its default 80;90;100;120; "
               "TORCH_CUDA_ARCH_LIST is not read)", "flash-attn"),
    Convention("DS_BUILD_OPS", "builds", "1", "precompiles the ops (by default none: they compile just in time at "
               "run time, and the wheel holds no device code)", "deepspeed"),
    Convention("DS_ACCELERATOR", "builds", "cuda", "the accelerator the ops are built for (a builder without a GPU "
               "detects cpu)", "deepspeed"),
)


def arch_value(convention: Convention, arch_list: str) -> str:
    """An arch list (`8.0;9.0+PTX`) as a project's own variable writes it: `8.0;9.0` or `80;90`."""
    entries = [e.removesuffix("+PTX") for e in re.split(r"[;,\s]+", arch_list.strip()) if e]
    return ";".join(e.replace(".", "") if convention.value == "digits" else e for e in entries)

# an environment read: os.getenv("X"...), os.environ.get("X"...), os.environ["X"], "X" in os.environ,
# and CMake's $ENV{X}; with the literal it is compared to, where the script writes one
_READ = re.compile(r"""(?:getenv|environ\.get)\(\s*(?P<q>["'])(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P=q)"""
                   r"""(?P<rest>[^)\n]{0,80}\)(?:\s*\.\s*\w+\(\s*\))*\s*==\s*(?P<q2>["'])(?P<value>[^"'\n]{1,32})(?P=q2))?"""
                   r"""|environ\[\s*["'](?P<name2>[A-Za-z_][A-Za-z0-9_]*)["']\s*\]"""
                   r"""|["'](?P<name3>[A-Za-z_][A-Za-z0-9_]*)["']\s+in\s+os\.environ"""
                   r"""|\$ENV\{(?P<name4>[A-Za-z_][A-Za-z0-9_]*)\}""")
_GUARD = re.compile(r"torch\.cuda\.is_available\(\s*\)")
_DOWNLOAD = re.compile(r"\b(?:urlopen|urlretrieve|requests\.get|wget)\b")
_WHEEL_URL = re.compile(r"\.whl\b|wheel_url|wheel_filename")
# -gencode arch=compute_80,code=sm_80 | code=[sm_80,compute_80] | code="sm_90a"; nvcc's -arch=sm_80.
# Every pattern here reads a file of up to MAX_SCRIPT in linear time: no two adjacent parts take the same
# characters (`\s+` then a class holding `\s`), and a repetition or a run of any character is bounded.
_GENCODE = re.compile(r"arch=compute_(\d{2,3}[af]?)\s*,\s*code=\\?[\[\"']?((?:sm|compute)_\d{2,3}[af]?"
                      r"(?:\s*,\s*(?:sm|compute)_\d{2,3}[af]?){0,32})")
_ARCH_FLAG = re.compile(r"-arch[= ](sm_\d{2,3}[af]?)\b")
# set(CMAKE_CUDA_ARCHITECTURES "80;90-real"): what stands before the `)` (bounded), split into words after
_CMAKE_ARCHS = re.compile(r"set\s*\(\s*CMAKE_CUDA_ARCHITECTURES\b([^()]{0,256})\)", re.I)
_TRUE = {"1", "true", "yes", "on", "y"}
# a CMakeLists.txt's own options: option(NAME "help" OFF) and set(NAME "value" CACHE STRING|BOOL "help")
_CMAKE_OPTION = re.compile(r'option\s*\(\s*(?P<option>[A-Za-z_][A-Za-z0-9_]*)\s+"(?P<ohelp>[^"\n]{0,200})"'
                           r'(?:\s+(?P<default>\w+))?\s*\)'
                           # the value is quoted or starts with a non-space: each run of spaces is one \s+'s alone
                           r'|set\s*\(\s*(?P<cached>[A-Za-z_][A-Za-z0-9_]*)\s+(?:"(?P<quoted>[^"\n]{0,64})"|(?P<bare>[^"\s()]{1,64}))'
                           r'\s+CACHE\s+(?:STRING|BOOL)\s+"(?P<chelp>[^"\n]{0,200})"', re.IGNORECASE)
# an option that may decide whether CUDA is built: its name, value or help says so (COMPUTE_BACKEND: "cpu, cuda")
CUDA_WORD = re.compile(r"cuda|gpu|backend|nvcc", re.IGNORECASE)
# a build against torch's stable C ABI: -DTORCH_TARGET_VERSION=0x020a000000000000 (major, minor, patch: a
# byte each from the top, as torch's headers read it), as xformers' setup.py writes it
_TARGET = re.compile(r"TORCH_TARGET_VERSION=0[xX]([0-9a-fA-F]{2})([0-9a-fA-F]{2})[0-9a-fA-F]{12}(?![0-9a-fA-F])")
# a comment line of Python or CMake (`# extra = ["-D..."]`: what the script no longer does)
_COMMENT_LINE = re.compile(r"^[ \t]*#[^\n]*", re.MULTILINE)


@dataclass(frozen=True)
class Switch:
    """A convention's variable one of the scripts reads: its name, what the script compares it to (the
    value that turns it on, where written), and the convention."""

    name: str
    compared: str | None
    convention: Convention
    script: str  # the file that reads it

    @property
    def on(self) -> str:
        """The value that turns it on: the script's own comparison, else the convention's."""
        return self.compared if self.compared is not None else self.convention.value


@dataclass(frozen=True)
class ScriptReading:
    """What the project's build scripts say about its build, before it runs."""

    scripts: list[str] = field(default_factory=list)  # the files read
    switches: list[Switch] = field(default_factory=list)
    cuda_guard: list[str] = field(default_factory=list)  # the scripts that ask torch.cuda.is_available()
    downloads_wheel: list[str] = field(default_factory=list)  # the scripts that download a wheel
    gencodes: list[str] = field(default_factory=list)  # hard-coded device code targets: sm_80, compute_90
    gencode_scripts: list[str] = field(default_factory=list)  # the scripts that hard-code them
    stable_target: str | None = None  # the torch minor its own TORCH_TARGET_VERSION names ("2.10")
    stable_scripts: list[str] = field(default_factory=list)  # the scripts that define it
    cmake_options: list[str] = field(default_factory=list)  # its CMake options that may decide CUDA: NAME=DEFAULT


def stable_target(text: str) -> str | None:
    """The torch minor ("2.10") a TORCH_TARGET_VERSION definition in `text` names, or None."""
    m = _TARGET.search(text)
    return f"{int(m[1], 16)}.{int(m[2], 16)}" if m else None


def convention_of(name: str) -> Convention | None:
    """The convention a variable's name follows, None for any other variable."""
    return next((c for c in CONVENTIONS if re.fullmatch(c.pattern, name)), None)


def read_script(text: str, script: str = "setup.py") -> ScriptReading:
    """What one build script's text says: the conventions' variables it reads (with the value each is
    compared to), whether it asks torch for a GPU, downloads a wheel, or hard-codes device targets."""
    text = text[:MAX_SCRIPT]
    found: dict[str, Switch] = {}
    for m in _READ.finditer(text):
        name = m["name"] or m["name2"] or m["name3"] or m["name4"]
        convention = convention_of(name)
        if convention is None:
            continue
        compared = m["value"] if m["name"] else None
        if name not in found or found[name].compared is None:
            found[name] = Switch(name, compared, convention, script)
    gencodes = [code.strip() for m in _GENCODE.finditer(text) for code in m[2].split(",")]
    gencodes += [m[1] for m in _ARCH_FLAG.finditer(text)]
    gencodes += [f"sm_{a.split('-')[0]}" for m in _CMAKE_ARCHS.finditer(text) for a in re.split(r"[;\s\"]+", m[1])
                 if re.fullmatch(r"\d{2,3}[af]?(?:-real|-virtual)?", a)]
    downloads = bool(_DOWNLOAD.search(text) and _WHEEL_URL.search(text))
    code = _COMMENT_LINE.sub("", text)
    target = stable_target(code)
    options = [_shown_option(m) for m in _CMAKE_OPTION.finditer(code)
               if not (m["option"] or m["cached"]).upper().startswith("CMAKE_")
               and CUDA_WORD.search(" ".join(g or "" for g in m.groups()))] if script == "CMakeLists.txt" else []
    return ScriptReading([script], list(found.values()), [script] if _GUARD.search(text) else [],
                         [script] if downloads else [], list(dict.fromkeys(gencodes)), [script] if gencodes else [],
                         target, [script] if target else [], list(dict.fromkeys(options)))


def _shown_option(m: re.Match[str]) -> str:
    """`NAME=DEFAULT` of a CMake option as the plan shows it: a secret-named one's value masked."""
    name = m["option"] or m["cached"]
    value = (m["default"] or "OFF") if m["option"] else (m["quoted"] or m["bare"] or "")
    return f"{name}={secret.MASK if secret.is_secret_name(name) else value}"


def merge(readings: list[ScriptReading]) -> ScriptReading:
    switches: dict[str, Switch] = {}
    for r in readings:
        for s in r.switches:
            switches.setdefault(s.name, s)
    return ScriptReading([s for r in readings for s in r.scripts], list(switches.values()),
                         [s for r in readings for s in r.cuda_guard], [s for r in readings for s in r.downloads_wheel],
                         list(dict.fromkeys(g for r in readings for g in r.gencodes)),
                         [s for r in readings for s in r.gencode_scripts],
                         next((r.stable_target for r in readings if r.stable_target), None),
                         [s for r in readings for s in r.stable_scripts],
                         [o for r in readings for o in r.cmake_options])


def read_scripts(project_dir: Path) -> ScriptReading:
    """The edge: the project's build scripts (SCRIPTS, those present as regular files), read as text."""
    readings = []
    for name in SCRIPTS:
        path = Path(project_dir) / name
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                readings.append(read_script(f.read(MAX_SCRIPT).decode("utf-8", "replace"), name))
    return merge(readings)


@dataclass(frozen=True)
class SwitchPlan:
    """What a build does with the switches found: the variables it sets, and the notes saying why."""

    sets: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    public: list[str] = field(default_factory=list)  # every convention variable the build has: shown, not masked


def plan_switches(reading: ScriptReading, given: Mapping[str, str], *, cuda: bool,
                  arch_list: str | None = None) -> SwitchPlan:
    """The variables a build sets from what its scripts read (`given`: the user's --env and settings,
    which always win), and what the plan says before any compile: a builder has no GPU for the build's
    torch (a container never has one), so a CUDA build sets the project's force switch; a skip switch
    the user sets is a warning; a script that asks for a GPU and reads no switch we know is named."""
    sets: dict[str, str] = {}
    notes: list[str] = []
    for s in reading.switches:
        c = s.convention
        where = f"{s.script} reads {s.name} ({c.does}; shown by {c.shown_by})"
        if s.name in given:
            if c.role == "skips" and cuda and given[s.name].strip().lower() in (_TRUE | {s.on.lower()}):
                notes.append(f"warning: {where}: {s.name}={given[s.name]} as given leaves the CUDA kernels out "
                             "of this --cuda build")
            else:
                notes.append(f"{where}: {s.name}={given[s.name]} as given")
        elif c.role == "builds" and (cuda or not c.cuda_only):
            sets[s.name] = s.on
            why = ("this builder's torch sees no GPU" if c.cuda_only else "a download is not a build")
            notes.append(f"{where}: the build sets {s.name}={s.on} ({why}; --env {s.name}=... to choose otherwise)")
        elif c.role == "named" and cuda:
            notes.append(f"{where}: not set (--env {s.name}={s.on} to)")
        elif c.role == "arch" and cuda and arch_list:  # --arch-list given: its meaning is certain
            sets[s.name] = arch_value(c, arch_list)
            notes.append(f"{where}: the build sets {s.name}={sets[s.name]} (--arch-list {arch_list})")
        elif c.role == "arch" and cuda:
            notes.append(f"{where}: not set, the project's own default stands (--arch-list sets it)")
    forced = [s for s in reading.switches if s.convention.role in ("builds", "arch") and (s.name in sets or s.name in given)]
    if cuda and reading.cuda_guard and not forced:
        notes.append(f"warning: {', '.join(reading.cuda_guard)} asks torch.cuda.is_available(), False on a "
                     "builder without a GPU, and reads no switch we know to force the CUDA build "
                     f"({', '.join(c.pattern for c in CONVENTIONS if c.role == 'builds')}): the wheel may hold no "
                     "device code; give the project's own switch with --env NAME=VALUE")
    if cuda and reading.cmake_options:
        shown = ", ".join(reading.cmake_options[:8]) + (f" and {len(reading.cmake_options) - 8} more"
                                                        if len(reading.cmake_options) > 8 else "")
        notes.append(f"CMakeLists.txt's own options that may decide its CUDA code: {shown} "
                     "(the defaults written; --env CMAKE_ARGS=-DNAME=VALUE sets one)")
    if reading.downloads_wheel and not any(s.convention.role == "builds" and not s.convention.cuda_only
                                           for s in reading.switches):
        notes.append(f"warning: {', '.join(reading.downloads_wheel)} downloads a prebuilt wheel (urlopen/urlretrieve "
                     "of a .whl) and reads no switch we know to build instead: what it downloads is not built here")
    public = sorted({*sets, *(n for n in given if convention_of(n))})
    return SwitchPlan(sets, notes, public)


def gencode_note(reading: ScriptReading, arch_list: str, narrowed: bool) -> str | None:
    """The plan's word on device targets the scripts hard-code: torch's cpp_extension then drops
    TORCH_CUDA_ARCH_LIST, and CMake's list in a CMakeLists.txt wins over a definition. `narrowed`: the
    tool's nvcc replaces them by the arch list (resources/nvcc_targets.py)."""
    if not reading.gencodes:
        return None
    said = f"{', '.join(reading.gencode_scripts)} hard-codes device targets ({' '.join(reading.gencodes)})"
    if narrowed:
        return (f"{said}: every nvcc call gets the arch list's ({arch_list}) instead "
                "(--keep-project-archs keeps the project's)")
    return (f"{said}: the wheel holds those, not the arch list's ({arch_list or '-'}); --arch-list narrows them "
            "to what it names")
