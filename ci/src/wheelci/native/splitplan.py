"""Which libraries of an oversized wheel move to which companion, and the RPATHs that make every
library find its needs again: pure planning over sizes and ELF facts (the split stage, wheelci.split,
reads the wheel and writes what this decides).

First-fit decreasing on compressed sizes, with room for what patchelf and recompression add; libraries
that need each other (a DT_NEEDED cycle) move or stay as one group.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Sequence

from wheelci.errors import CiError
from wheelci.native.loadorder import components
from wheelci.util.sizes import format_size

BASE_OVERHEAD = 16 * 1024  # dist-info files, the preload module, central directory slack


def patch_slack(csize: int) -> int:
    """Room for growth: patchelf may add pages to a library and recompression may differ slightly."""
    return 16 * 1024 + csize // 100


def member_overhead(name: str) -> int:
    """Local header + central directory entry (with a ZIP64 extra) for one member."""
    return 30 + 46 + 2 * len(name.encode()) + 40


@dataclass(frozen=True)
class Lib:
    """What planning needs to know about one shared library member."""

    path: str
    csize: int
    soname: str  # SONAME, else the file name (what DT_NEEDED entries match)
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


@dataclass(frozen=True)
class SplitPlan:
    companions: list[str]  # escaped distribution names, also their package directories
    moves: dict[str, tuple[int, str]]  # member -> (companion index, new path)


def plan_split(file_size: int, members: dict[str, int], libs: Sequence[Lib], limit: int,
               dist: str, stay: Sequence[Lib] = ()) -> SplitPlan:
    """Which libraries go to which companion (pure). CiError when no split can meet the limit.

    `libs` may move, `stay` may not; libraries that need each other move together (cycle_groups)."""
    refuse_oversized(members, limit)
    capacity = limit - BASE_OVERHEAD
    main_size = file_size + BASE_OVERHEAD
    chosen: list[list[Lib]] = []
    for unit in sorted(cycle_groups(libs, stay), key=lambda u: (-sum(l.csize for l in u), u[0].path)):
        if main_size <= limit:
            break
        chosen.append(unit)
        main_size -= sum(lib.csize + member_overhead(lib.path) for lib in unit)
    if main_size > limit:
        raise CiError(f"cannot split under {format_size(limit)}: after moving every shared library that may "
                      f"move the main wheel is still about {format_size(main_size)}")
    bins: list[int] = []  # bytes used per companion
    assignment: dict[str, int] = {}
    for unit in chosen:  # first-fit decreasing
        need = sum(lib.csize + member_overhead(lib.path) + patch_slack(lib.csize) for lib in unit)
        if need > capacity:
            what = unit[0].path if len(unit) == 1 else f"{', '.join(l.path for l in unit)} (they need each other)"
            raise CiError(f"{what}: {format_size(sum(l.csize for l in unit))} compressed, too close to the limit "
                          f"{format_size(limit)} to move into a companion wheel")
        i = next((i for i, used in enumerate(bins) if used + need <= capacity), len(bins))
        if i == len(bins):
            bins.append(0)
        bins[i] += need
        assignment.update((lib.path, i) for lib in unit)
    names = [f"{dist}_libs" if i == 0 else f"{dist}_libs{i + 1}" for i in range(len(bins))]
    tops = {p.split("/", 1)[0] for p in members}
    single_top = len({p.split("/", 1)[0] for p in assignment}) == 1
    moves = {}
    for path, i in assignment.items():
        rest = path.split("/", 1)[1] if single_top and "/" in path else path
        if names[i] in tops:
            raise CiError(f"the wheel already has a top-level {names[i]}/: cannot name a companion after it")
        moves[path] = (i, f"{names[i]}/{rest}")
    return SplitPlan(names, moves)


def cycle_groups(libs: Sequence[Lib], stay: Sequence[Lib] = ()) -> list[list[Lib]]:
    """The movable libraries in the units that move (pure): one each, except libraries that need each
    other (a DT_NEEDED cycle, like pillow's libfreetype and libharfbuzz), which the dynamic linker
    loads only when each finds the others: they share a companion, or stay together when one of them
    must stay (is in `stay`)."""

    every = [*libs, *stay]
    provider: dict[str, str] = {}
    for lib in every:
        provider.setdefault(lib.soname, lib.path)
    for lib in every:
        provider.setdefault(lib.path.rsplit("/", 1)[-1], lib.path)
    deps = {lib.path: [provider[n] for n in lib.needed if n in provider] for lib in every}
    by_path = {lib.path: lib for lib in every}
    movable = {lib.path for lib in libs}
    return [[by_path[p] for p in comp] for comp in components(deps) if all(p in movable for p in comp)]


def loaded_by_path(sources: dict[str, str], lib_paths: Sequence[str]) -> dict[str, str]:
    """Libraries that Python code opens by file path (`ctypes.CDLL(os.path.join(os.path.dirname(
    __file__), "lib", "libx.so"))`): library path -> the first .py file naming it in a string literal.
    Moving them would break that code in every layout, so they stay. A string search is enough: a
    false positive only keeps a library where it was."""
    found: dict[str, str] = {}
    for lib in lib_paths:
        base = lib.rsplit("/", 1)[-1]
        needles = (f'"{base}"', f"'{base}'", f"/{base}\"", f"/{base}'")
        for py, text in sources.items():
            if any(n in text for n in needles):
                found[lib] = py
                break
    return found


def refuse_oversized(members: dict[str, int], limit: int) -> None:
    """CiError naming the largest member when it alone cannot fit in any wheel under the limit."""
    if members:
        name, csize = max(members.items(), key=lambda kv: (kv[1], kv[0]))
        need = csize + member_overhead(name) + BASE_OVERHEAD
        if need > limit:
            raise CiError(f"{name} is {format_size(csize)} compressed, so a wheel holding it is at least "
                          f"{format_size(need)}: larger than the limit {format_size(limit)}; no split can bring "
                          "it under")


def new_rpaths(libs: Sequence[Lib], moves: dict[str, str],
               programs: Sequence[Lib] = ()) -> dict[str, tuple[list[str], bool]]:
    """Old member path -> (RPATH entries, use DT_RPATH) for every library or program that must change
    (pure).

    A moved library re-bases its `$ORIGIN` entries to keep their targets and gains entries for its
    dependencies that are now elsewhere; a library that stayed gains entries for moved dependencies,
    and so does a program (an executable: it needs libraries, provides none, never moves).
    """
    where = {lib.path: moves.get(lib.path, lib.path) for lib in [*libs, *programs]}
    provider: dict[str, str] = {}
    for lib in libs:
        provider.setdefault(lib.soname, lib.path)
    out = {}
    for lib in [*libs, *programs]:
        moved = lib.path in moves
        deps = [provider[n] for n in lib.needed if n in provider and provider[n] != lib.path]
        if not moved and not any(d in moves for d in deps):
            continue
        old_dir = posixpath.dirname(lib.path)
        new_dir = posixpath.dirname(where[lib.path])
        entries = []
        for e in lib.runpath or lib.rpath:
            rest = _origin_relative(e)
            if moved and rest is not None:
                target = posixpath.normpath(posixpath.join(old_dir, rest))
                e = _origin(posixpath.relpath(target, new_dir or "."))
            entries.append(e)
        for d in deps:
            if moved or d in moves:
                e = _origin(posixpath.relpath(posixpath.dirname(where[d]) or ".", new_dir or "."))
                if e not in entries:
                    entries.append(e)
        if entries != list(lib.runpath or lib.rpath):
            out[lib.path] = (entries, bool(lib.rpath and not lib.runpath))
    return out


def _origin_relative(entry: str) -> str | None:
    """The path below the library's directory for `$ORIGIN/...` or `${ORIGIN}/...` (the dynamic
    linker reads both spellings), else None."""
    for token in ("$ORIGIN", "${ORIGIN}"):
        if entry == token or entry.startswith(token + "/"):
            return entry[len(token):].lstrip("/")
    return None


def _origin(rel: str) -> str:
    return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
