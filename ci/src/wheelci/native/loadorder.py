"""Dependency order of shared libraries, and the preload module built from it.

What ci.preload, ci.patch, ci.split and the build share: the graph of DT_NEEDED edges between the
libraries of wheels (ci.native.elf), its topological order, the stdlib-only runtime module
(wheelci/resources/preload_runtime.py with its table filled in), and its injection into a package's
`__init__.py`. The decisions are listed in wheelci/preload.py, the command that exposes them.
"""

from __future__ import annotations

import ast
import heapq
import io
import posixpath
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from wheelci.errors import CiError
from wheelci.native.elf import SharedLib, SYSTEM_LIBS, is_system_lib, scan
from wheelci.wheel.rewrite import rewrite
from wheelci.wheel.zipread import WheelArchive

# The one name of the module that preloads a wheel's native dependencies, whichever stage writes it:
# ci.build (the example's __init__ imports it by this name), ci.preload --inject and ci.patch --preload-from.
MODULE_NAME = "_preload"
# ci.split's module loads the libraries it moved into companions; it sits beside the one above, in the
# same package, and runs after it (the moved libraries may need what that loads).
SPLIT_MODULE_NAME = "_split_libs_preload"
_RUNTIME = Path(__file__).resolve().parent.parent / "resources" / "preload_runtime.py"
_DATA_DIR = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")


@dataclass(frozen=True)
class Preload:
    """One library to load: its SONAME and where the runtime looks for it."""

    soname: str
    filename: str
    distribution: str | None
    path: str  # relative to an install root (site-packages or a --target dir)
    source: str  # the wheel or directory it was found in

    @property
    def search_dirs(self) -> tuple[str, ...]:
        """Directories (relative to each sys.path entry) the runtime tries, most specific first.

        Beyond the recorded location: nvidia/<pkg>/lib, nvidia/cu<major>/lib and <pkg>/lib, the
        layouts nvidia-* wheels used across CUDA majors, so a rebuilt dependency still resolves.
        """
        dirs = [self.path.rpartition("/")[0] or "."]
        dist = (self.distribution or "").lower()
        m = re.fullmatch(r"nvidia-(.+?)(?:-cu(\d+))?", dist)
        major = re.search(r"(?:^|/)nvidia/cu(\d+)/", self.path)
        if m:
            pkg = m.group(1).replace("-", "_")
            dirs.append(f"nvidia/{pkg}/lib")
            cu = m.group(2) or (major.group(1) if major else None)
            if cu:
                dirs.append(f"nvidia/cu{cu}/lib")
        elif dist:
            dirs.append(f"{dist.replace('-', '_')}/lib")
        return tuple(dict.fromkeys(dirs))


def _installed_path(path: str) -> str:
    """A wheel member's path once installed: `x-1.data/platlib/a/b.so` -> `a/b.so`."""
    return _DATA_DIR.sub("", path)


def as_preload(lib: SharedLib) -> Preload:
    """The runtime's record of a library found in a wheel or an installed directory."""
    return Preload(lib.name, lib.filename, lib.distribution, _installed_path(lib.path), lib.source)


def file_name(lib: SharedLib) -> str:
    return lib.path.rsplit("/", 1)[-1]


def providers(libs: Iterable[SharedLib]) -> dict[str, SharedLib]:
    """Name -> the library that provides it; the first input wins.

    A DT_NEEDED entry is matched against the SONAMEs of loaded libraries and against file names
    on the search path, so both count: auditwheel (before 5.0) grafted `libgomp-a34b3233.so.1`
    into torch 2.0/2.1 keeping the SONAME `libgomp.so.1`, and libtorch_cpu.so NEEDS the file name.
    """
    out: dict[str, SharedLib] = {}
    for lib in libs:
        out.setdefault(lib.name, lib)
    for lib in libs:
        out.setdefault(file_name(lib), lib)
    return out


MAX_NAMED = 10  # missing libraries an error names: a crafted library may NEED thousands


def dependency_order(roots: Iterable[str], libs: Sequence[SharedLib], *,
                     system: Sequence[str] = SYSTEM_LIBS, skip: Iterable[str] = ()) -> list[SharedLib]:
    """The libraries `roots` need (roots included), dependencies first.

    `skip`: SONAMEs that are satisfied but not to be preloaded (the target's own libraries).
    Raises CiError naming the libraries on a missing provider or a cycle.
    """
    by_name = providers(libs)
    skipped = set(skip)
    deps: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    stack: list[tuple[str, str | None]] = [(r, None) for r in sorted(set(roots), reverse=True)]
    while stack:
        name, wanted_by = stack.pop()
        if name in deps or name in skipped or is_system_lib(name, system):
            continue
        lib = by_name.get(name)
        if lib is None:
            missing.setdefault(name, []).append(wanted_by or "the roots")
            continue
        deps[name] = [n for n in dict.fromkeys(lib.needed) if n != name and n not in skipped
                      and not is_system_lib(n, system)]
        stack.extend((n, f"{name} ({Path(lib.source).name})") for n in reversed(deps[name]))
    if missing:
        named = [f"{n} (needed by {', '.join(sorted(set(by))[:3])}{' and others' if len(set(by)) > 3 else ''})"
                 for n, by in sorted(missing.items())[:MAX_NAMED]]
        more = f"; and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED else ""
        raise CiError("no input provides " + "; ".join(named) + more)
    return [by_name[n] for n in _toposort(deps, by_name)]


def _toposort(deps: dict[str, list[str]], by_name: dict[str, SharedLib] | None = None) -> list[str]:
    """Dependencies first, ties broken by name (Kahn's algorithm over the strongly connected
    components). Libraries that need each other (a cycle: pillow's libfreetype and libharfbuzz) are
    one group, loaded in an order that works (see _group_order); a cycle no order resolves raises
    CiError naming it."""
    groups = components(deps)
    group_of = {n: i for i, g in enumerate(groups) for n in g}
    waiting = {i: len({group_of[d] for n in g for d in deps[n]} - {i}) for i, g in enumerate(groups)}
    users: dict[int, set[int]] = {i: set() for i in range(len(groups))}
    for i, g in enumerate(groups):
        for d in {group_of[d] for n in g for d in deps[n]} - {i}:
            users[d].add(i)
    ready = [(min(g), i) for i, g in enumerate(groups) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, i = heapq.heappop(ready)
        order += _group_order(groups[i], deps, by_name or {})
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (min(groups[u]), u))
    return order


def components(deps: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of the graph (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(deps):
        if start in index:
            continue
        work = [(start, iter(sorted(set(deps[start]))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((d for d in edges if d not in index or d in on_stack), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(set(deps[nxt])))))
                continue
            if nxt is not None:  # on the stack: part of the current component
                low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                out.append(sorted(comp))
    return out


def _group_order(group: list[str], deps: dict[str, list[str]], by_name: dict[str, SharedLib]) -> list[str]:
    """A load order for libraries that need each other, each loaded by path as the runtime does.

    Loading one by path makes the dynamic linker load its DT_NEEDED entries too, found by SONAME among
    what is loaded, else through that library's own RPATH/RUNPATH. So a cycle loads when its first
    library finds the others (directly or through them) by RPATH: pillow's libfreetype and libharfbuzz
    sit in one directory with RPATH $ORIGIN. Only `$ORIGIN` entries within the same wheel or directory
    count, since those hold in every install layout. The first library (by name) that works comes first."""
    if len(group) == 1 and group[0] not in deps[group[0]]:
        return group
    members = set(group)
    loaded: set[str] = set()
    order: list[str] = []
    while len(loaded) < len(members):
        for first in sorted(members - loaded):
            pulled = _loads(first, members, loaded, deps, by_name)
            if pulled is not None:
                order.append(first)
                order += sorted(pulled - {first})
                loaded |= pulled
                break
        else:
            cycle = " -> ".join(_find_cycle(deps, members - loaded))
            raise CiError(f"dependency cycle: {cycle} (no library of it finds the others through its own "
                          "RPATH, so no load order works)")
    return order


def _loads(first: str, members: set[str], loaded: set[str], deps: dict[str, list[str]],
           by_name: dict[str, SharedLib]) -> set[str] | None:
    """What loading `first` by path brings in of the group (itself included), or None when one of
    the group's libraries it needs, directly or not, is neither loaded nor on the needer's RPATH."""
    pulled = {first}
    todo = [first]
    while todo:
        name = todo.pop()
        for d in deps[name]:
            if d not in members or d in loaded or d in pulled:
                continue
            if name not in by_name or d not in by_name or not _finds(by_name[name], by_name[d]):
                return None
            pulled.add(d)
            todo.append(d)
    return pulled


def _finds(lib: SharedLib, dep: SharedLib) -> bool:
    """lib's `$ORIGIN` RPATH/RUNPATH entries lead to dep's directory, both in one wheel or directory."""
    if lib.source != dep.source:
        return False
    here = posixpath.dirname(_installed_path(lib.path))
    there = posixpath.dirname(_installed_path(dep.path))
    for entry in lib.runpath or lib.rpath:
        for token in ("$ORIGIN", "${ORIGIN}"):
            if entry == token or entry.startswith(token + "/"):
                if posixpath.normpath(posixpath.join(here, entry[len(token):].lstrip("/")) or ".") == (there or "."):
                    return True
    return False


def _find_cycle(deps: dict[str, list[str]], left: set[str]) -> list[str]:
    """Walk unresolved dependencies from any unresolved library until one repeats."""
    path: list[str] = []
    n = min(left)
    while n not in path:
        path.append(n)
        n = min(d for d in deps[n] if d in left)
    return path[path.index(n):] + [n]


def preload_order(needed: Iterable[str], inputs: Sequence[Path | str], *,
                  system: Sequence[str] = SYSTEM_LIBS, skip: Iterable[str] = ()) -> list[Preload]:
    """What to preload, in order, so that libraries NEEDing `needed` load in any layout.

    `inputs`: wheels or installed directories (site-packages, per-package --target dirs) of the
    providers, e.g. torch and its nvidia-* dependencies. The needed libraries themselves are in
    the result when an input provides them.
    """
    return [as_preload(lib) for lib in dependency_order(needed, scan(inputs), system=system, skip=skip)]


def order_for_wheel(wheel: Path | str, inputs: Sequence[Path | str], *,
                    system: Sequence[str] = SYSTEM_LIBS, needed: Iterable[str] | None = None) -> list[Preload]:
    """What a wheel's libraries need from `inputs`, in load order: the preload to inject into it.

    The wheel's own libraries resolve through its own RPATHs once its package is imported, so they
    are providers but are never preloaded. `needed` overrides the roots (default: every DT_NEEDED
    of the wheel's libraries that the wheel does not ship).
    """
    own = scan([wheel])
    shipped = {lib.name for lib in own} | {file_name(lib) for lib in own}
    roots = sorted({n for lib in own for n in lib.needed} - shipped) if needed is None else list(needed)
    libs = [*scan(inputs), *own]
    return [as_preload(lib) for lib in dependency_order(roots, libs, system=system, skip=shipped)]


def runtime_source(order: Sequence[Preload], *, header: str = "", strict: bool = True,
                   variant: tuple[str, str, str, int] | None = None) -> str:
    """The stdlib-only preload module for `order`: wheelci/resources/preload_runtime.py with its table filled in.
    `strict=False`: a library that cannot be loaded is left to the package's own loading. `variant`
    (distribution, version, variant, CUDA major): refuse at import a torch of another CUDA major."""
    rows = "".join(
        f"    ({p.soname!r}, {p.filename!r}, {p.distribution!r}, {p.search_dirs!r}),\n" for p in order)
    template = _RUNTIME.read_text()
    src = template.replace("LIBRARIES = ()\n", f"LIBRARIES = (\n{rows})\n" if rows else "LIBRARIES = ()\n", 1)
    if not strict:
        src = src.replace("\nSTRICT = True\n", "\nSTRICT = False\n", 1)
    if variant is not None:
        src = src.replace("\nVARIANT = None\n", f"\nVARIANT = {tuple(variant)!r}\n", 1)
    if header:
        src = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines()) + src
    return src


def insert_call(init_source: str, module: str = MODULE_NAME) -> str:
    """`__init__.py` with the preload call after its docstring and `from __future__` imports
    (which must stay first) and after leading comments (an encoding line must stay on top)."""
    try:
        tree = ast.parse(init_source)
    except SyntaxError as e:
        raise CiError(f"cannot parse __init__.py: {e.msg} (line {e.lineno})") from None
    after = 0
    for i, node in enumerate(tree.body):
        docstring = (i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                     and isinstance(node.value.value, str))
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            break
        after = node.end_lineno or node.lineno
    # Lines as Python counts them (\n, \r\n, \r): str.splitlines also breaks at a form feed or U+2028,
    # which would put the call inside a docstring that holds one.
    lines = io.StringIO(init_source, newline="").readlines()
    if after == 0:
        while after < len(lines) and lines[after].lstrip()[:1] in ("#", ""):
            after += 1
    if after and not lines[after - 1].endswith(("\n", "\r")):
        lines[after - 1] += "\n"
    call = f"from . import {module} as _p; _p.preload(); del _p  # load native deps first (wheelci preload)\n"
    return "".join(lines[:after]) + call + "".join(lines[after:])


def top_package(names: Iterable[str], project: str, package: str | None = None) -> str:
    """The package whose `__init__.py` gets the call: `package`, else the one named like the
    project, else the only one."""
    packages = sorted({n.split("/")[0] for n in names
                       if n.count("/") == 1 and n.endswith("/__init__.py") and ".dist-info/" not in n})
    if package is not None:
        if package not in packages:
            raise CiError(f"no package {package!r} in the wheel (packages: {', '.join(packages) or 'none'})")
        return package
    guess = project.replace("-", "_")
    if guess in packages:
        return guess
    if len(packages) == 1:
        return packages[0]
    raise CiError(f"cannot tell which package to inject into ({', '.join(packages) or 'none found'}): "
                  f"pass --package")


def preload_members(wa: WheelArchive, runtime: Sequence[Preload] | str, *, package: str | None = None,
                    init_text: str | None = None) -> dict[str, bytes]:
    """The two members that make a wheel's top package preload `runtime` on import, first the
    package's `__init__.py` with the call inserted, then the module itself. `init_text`: that
    `__init__.py` as another edit already changed it (ci.patch applies diffs first)."""
    pkg = top_package([m.name for m in wa.members], wa.name.project, package)
    init = f"{pkg}/__init__.py"
    module = f"{pkg}/{MODULE_NAME}.py"
    if wa.get(module) is not None:
        raise CiError(f"{wa.name.filename} already has {module} (preload injected twice?)")
    source = runtime if isinstance(runtime, str) else runtime_source(runtime)
    raw = wa.read(init) if init_text is None else init_text.encode("utf-8")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as e:
        raise CiError(f"{wa.name.filename}: cannot decode {init}: {e}") from None
    return {init: insert_call(text).encode(encoding), module: source.encode()}


def inject_preload(wheel: Path | str, runtime: Sequence[Preload] | str, out_dir: Path | str, *,
                   package: str | None = None) -> Path:
    """Write a copy of `wheel` into `out_dir` whose top package preloads `runtime` on import.

    `runtime`: an order (its module is generated) or a module's source. Returns the new wheel's
    path; the input is never modified, and nothing is left in out_dir on error.
    """

    wheel, out_dir = Path(wheel), Path(out_dir)
    if out_dir.resolve() == wheel.resolve().parent:
        raise CiError(f"output directory {out_dir} holds the input wheel: it would be overwritten")
    with WheelArchive.open(wheel) as wa:
        (init, init_bytes), (module, module_bytes) = preload_members(wa, runtime, package=package).items()
        return rewrite(wa, out_dir, replace={init: init_bytes}, add={module: module_bytes})
