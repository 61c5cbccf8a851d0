"""LibTorch's stable C ABI: when each shim function arrived, and what a library imports from torch.

From torch 2.10 on, an extension written against `torch/csrc/stable` calls into torch only through C
shim functions (`aoti_torch_*`, `torch_*`). Each is declared in a shim header, inside
`#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_N_0` when it arrived after 2.10; compiling with
`-DTORCH_TARGET_VERSION` hides the newer ones. So the newest function a library imports is the oldest
torch it loads on, and a library that imports any C++ symbol of c10/at/torch is classic: bound to the
one torch release it was built against. Pure functions over header text and symbol names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from wheelci.wheel.requirements import read_requirement

FLOOR = (2, 10)  # the first torch with the stable ABI: functions declared without a guard are there
# Headers declaring the shim functions, under torch's include directory.
SHIM_HEADERS = ("torch/csrc/stable/c/shim.h", "torch/csrc/inductor/aoti_torch/c/shim*.h",
                "torch/csrc/inductor/aoti_torch/generated/c_shim_*.h")
SHIM_PREFIXES = ("aoti_", "torch_")  # C names torch's shims use (nothing else of torch is C)
PYTHON_BINDING = "libtorch_python.so"  # binds a library to one torch and one Python

_IF = re.compile(r"#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)")
_GUARD = re.compile(r"TORCH_FEATURE_VERSION\s*>=\s*TORCH_VERSION_(\d+)_(\d+)_\d+")
_DECLARED = re.compile(r"\bAOTI_TORCH_EXPORT\b[^;{]*?\b([A-Za-z_]\w*)\s*\(", re.S)
# A C++ name in torch's namespaces, as the Itanium ABI mangles it: a nested name (N, then
# cv/ref qualifiers) starting with the length-prefixed namespace, followed by the next name's length.
_TORCH_CXX = re.compile(r"N[rVKRO]*(?:3c10|2at|5torch|6caffe2)\d")

Version = tuple[int, int]


def version_text(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


def parse_version(text: str) -> Version:
    """`2.10` or `2.10.0` -> (2, 10)."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text.strip())
    if m is None:
        raise ValueError(f"not a torch version: {text!r}")
    return int(m[1]), int(m[2])


def target_define(v: Version) -> str:
    """The -D flag that makes torch's headers declare only what torch v has (TORCH_ABI_VERSION's
    layout: one byte each for major, minor and patch, from the top)."""
    return f"-DTORCH_TARGET_VERSION=0x{v[0]:02x}{v[1]:02x}000000000000"


def declared_versions(header: str) -> dict[str, Version]:
    """Shim function -> the torch version its declaration needs, from one header's text.

    The preprocessor's nesting is followed: a declaration's version is the highest
    TORCH_FEATURE_VERSION guard around it; an #else branch of such a guard is the older targets'
    side and adds no bound."""
    stack: list[Version | None] = []  # per open #if: the version it requires, None for other conditions
    versions: dict[str, Version] = {}
    pending = ""
    for line in header.splitlines():
        m = _IF.match(line.strip())
        if m:
            kind, cond = m.groups()
            if kind in ("if", "ifdef", "ifndef"):
                g = _GUARD.search(cond) if kind == "if" else None
                stack.append((int(g[1]), int(g[2])) if g else None)
            elif kind in ("elif", "else") and stack:
                stack[-1] = None
            elif kind == "endif" and stack:
                stack.pop()
            continue
        if pending or "AOTI_TORCH_EXPORT" in line:
            pending += line + "\n"
            found = _DECLARED.search(pending)
            if found or ";" in line or "{" in line:
                if found:
                    need = max([v for v in stack if v] + [FLOOR])
                    name = found[1]
                    versions[name] = min(versions.get(name, need), need)
                pending = ""
    return versions


def shim_versions(include: Path) -> dict[str, Version]:
    """Every shim function declared under a torch include directory, with its first version."""
    table: dict[str, Version] = {}
    for pattern in SHIM_HEADERS:
        for header in sorted(include.glob(pattern)):
            for name, v in declared_versions(header.read_text(errors="replace")).items():
                table[name] = min(table.get(name, v), v)
    return table


def is_torch_cxx(symbol: str) -> bool:
    """A mangled C++ symbol naming something in c10, at, torch or caffe2 (classic LibTorch)."""
    return symbol.startswith("_Z") and _TORCH_CXX.search(symbol) is not None


@dataclass(frozen=True)
class LibraryAbi:
    """What one library imports from torch, and which ABI that makes it."""

    path: str
    kind: str  # "stable" (shim functions only) | "classic" (C++ symbols) | "none" (nothing of torch)
    cxx: tuple[str, ...] = ()  # torch C++ symbols imported
    shims: dict[str, Version] = field(default_factory=dict)  # shim function -> its first torch
    unknown: tuple[str, ...] = ()  # shim-looking names no header declares
    python_binding: bool = False  # NEEDED libtorch_python.so

    @property
    def needs(self) -> Version | None:
        """The oldest torch this library's shim functions allow."""
        return max(self.shims.values()) if self.shims else None


def classify(path: str, undefined: Iterable[str], needed: Iterable[str], table: dict[str, Version]) -> LibraryAbi:
    """A library's ABI from its undefined dynamic symbols and NEEDED entries."""
    names = sorted(set(undefined))
    cxx = tuple(s for s in names if is_torch_cxx(s))
    shim_like = [s for s in names if s.startswith(SHIM_PREFIXES)]
    shims = {s: table[s] for s in shim_like if s in table}
    unknown = tuple(s for s in shim_like if s not in table)
    kind = "classic" if cxx else ("stable" if shim_like else "none")
    return LibraryAbi(path, kind, cxx, shims, unknown, PYTHON_BINDING in set(needed))


def _pin_and_floor(torch_requirement: str | None) -> tuple[bool, Version | None]:
    """(an exact pin: `==X` without a wildcard, or `===`; the lowest torch a range admits, from its
    `>=`, `>`, `~=` and `==X.*` bounds). Any spelling packaging reads: `torch<3,>=2.12`, `torch~=2.12`."""

    req = read_requirement(torch_requirement) if torch_requirement else None
    if torch_requirement and req is None:
        return False, None
    specs = list(req.specifier) if req else []
    if any(s.operator == "===" or (s.operator == "==" and not s.version.endswith(".*")) for s in specs):
        return True, None
    floors = []
    for s in specs:
        if s.operator in (">=", ">", "~=", "=="):
            m = re.match(r"(\d+)\.(\d+)", s.version)
            if m:
                floors.append((int(m[1]), int(m[2])))
    return False, max(floors, default=None)


def problems(libs: list[LibraryAbi], torch_requirement: str | None) -> list[str]:
    """What is wrong with a wheel whose libraries are `libs` and which requires torch as given.

    `torch>=X.Y` (no `==`) declares a stable wheel: every library must be stable, use no shim
    function newer than X.Y, and stay off libtorch_python. A classic library needs `torch==`."""
    out = []
    pinned, bound = _pin_and_floor(torch_requirement)
    for lib in libs:
        if lib.kind == "classic" and not pinned:
            shown = ", ".join(lib.cxx[:5]) + (f" and {len(lib.cxx) - 5} more" if len(lib.cxx) > 5 else "")
            out.append(f"{lib.path} is classic LibTorch (imports {len(lib.cxx)} C++ symbols: {shown}) but the "
                       f"wheel requires {torch_requirement or 'no torch'}: a classic library loads only on the "
                       "torch it was built against, so it must pin torch==")
        if bound is None:
            continue
        if lib.unknown:
            out.append(f"{lib.path} imports {', '.join(lib.unknown)}, which no stable shim header declares")
        newer = sorted((s for s, v in lib.shims.items() if v > bound), key=lambda s: (lib.shims[s], s))
        if newer:
            listed = ", ".join(f"{s} (torch {version_text(lib.shims[s])})" for s in newer[:8])
            out.append(f"{lib.path} imports shim functions newer than the declared torch>={version_text(bound)}: "
                       f"{listed}; build with {target_define(bound)}")
        if lib.python_binding:
            out.append(f"{lib.path} links {PYTHON_BINDING}: a stable-ABI library must not (it binds one torch)")
    return out
