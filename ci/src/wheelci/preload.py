"""Preload in dependency order: make CUDA libraries from wheels load in any install layout.

    python -m ci.preload WHEEL_OR_DIR... [--needed SONAME...] [--print-order] [--emit FILE]
    python -m ci.preload DEPS... --inject WHEEL -w DIR [--package NAME]

Bazel's rules_python, PEX and `pip install --target` per package put every wheel in its own
directory on sys.path, so `$ORIGIN/../../nvidia/...` RPATHs point nowhere. What works: load the
dependencies first; the dynamic linker then satisfies DT_NEEDED by SONAME. torch keeps that order
by hand and NVIDIA's cuda-pathfinder in a hand-written catalog; here it is derived from the ELF
files themselves (ci.native.elf) and baked into a stdlib-only module (wheelci/resources/preload_runtime.py) whose
`preload()` loads each library with RTLD_GLOBAL in that order.

API (for the example package's build and ci.split):
    preload_order(needed_sonames, wheels_or_dirs) -> [Preload]   # e.g. an op library's DT_NEEDED
    order_for_wheel(wheel, wheels_or_dirs) -> [Preload]          # what a wheel needs from others
    runtime_source(order, header="") -> str                      # the module to ship
    inject_preload(wheel, order_or_source, out_dir, package=None) -> Path

Decisions:
- The graph covers only what the roots need: by default every library in the inputs; with
  `--needed`, those SONAMEs; with `--inject`, whatever the target wheel's libraries need that the
  target does not ship itself. Libraries the system provides (ci.native.elf.SYSTEM_LIBS, `--system`) are
  neither ordered nor required.
- When two inputs ship the same SONAME, the first input wins (like sys.path order).
- Ties in the topological order are broken by SONAME, so the same inputs give the same module.
- Libraries that need each other (a DT_NEEDED cycle: pillow's libfreetype and libharfbuzz) are one
  group, loaded from the one whose own `$ORIGIN` RPATH finds the others (the dynamic linker then
  loads them with it). A cycle no library resolves that way, and a missing provider, are bad input
  (exit 2), naming the libraries involved.
- `--inject` writes the module as `<package>/_preload.py` (the name ci.build uses) and calls it from the
  package's `__init__.py` after the docstring and `from __future__` imports, before anything else,
  so it runs before the package's own native imports. The wheel keeps its file name; its other
  members are copied as compressed bytes (ci.wheel.zipwrite).
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

from wheelci.errors import CiError
from wheelci.native.elf import SYSTEM_LIBS, scan
from wheelci.native.loadorder import as_preload, dependency_order, inject_preload, order_for_wheel, runtime_source

_RUNTIME_HEAD = runtime_source([]).encode()[:40]  # how every module ci.preload writes begins


def own_emit(emit: Path, inputs: list[Path]) -> None:
    """--emit replaces only a preload module an earlier run wrote: never an input, a directory, or a
    file of the user's (one that does not begin as the runtime module does)."""
    if emit.is_dir():
        raise CiError(f"--emit: is a directory: {emit}")
    if not emit.exists() and not emit.is_symlink():
        return
    if any(emit.resolve() == i.resolve() or (i.is_dir() and emit.resolve().is_relative_to(i.resolve()))
           for i in inputs if i.exists()):
        raise CiError(f"--emit {emit}: is one of the inputs (or inside one); write the module elsewhere")
    head = _RUNTIME_HEAD
    try:
        ours = emit.is_file() and not emit.is_symlink() and emit.open("rb").read(len(head)) == head
    except OSError:
        ours = False
    if not ours:
        from wheelci.cli import command

        raise CiError(f"--emit {emit}: exists and is not a preload module {command('preload')} wrote; refusing "
                      "to replace it (remove it, or pick another path)")


def main(args: argparse.Namespace) -> int:
    from wheelci.util.atomic import write_text
    from wheelci.cli import emit_json, shown

    if args.inject and not args.wheel_dir:
        raise CiError("--inject needs -w/--wheel-dir")
    if args.wheel_dir and not args.inject:
        raise CiError("-w/--wheel-dir is only for --inject")
    if args.wheel_dir and args.wheel_dir.exists() and not args.wheel_dir.is_dir():
        raise CiError(f"-w/--wheel-dir: not a directory: {args.wheel_dir}")
    if args.emit:
        own_emit(args.emit, [Path(i) for i in [*args.inputs, *([args.inject] if args.inject else [])]])
    system = [*SYSTEM_LIBS, *args.system]
    inputs = [Path(i) for i in args.inputs]
    if args.inject:
        target = Path(args.inject)
        if not target.is_file() or target.suffix != ".whl":
            raise CiError(f"--inject: not a wheel file: {target}")
        order = order_for_wheel(target, inputs, system=system, needed=args.needed)
    else:
        libs = scan(inputs)
        # default roots: every library in the inputs (Python extension modules have no SONAME)
        roots = args.needed or [lib.name for lib in libs if lib.soname]
        order = [as_preload(lib) for lib in dependency_order(roots, libs, system=system)]
    source = runtime_source(order)
    result: dict[str, object] = {"order": [asdict(p) | {"search_dirs": p.search_dirs} for p in order]}
    with _outputs_held(args):
        if args.inject:  # first: it can still refuse its input, and writes nothing when it does
            result["wheel"] = str(inject_preload(args.inject, source, args.wheel_dir, package=args.package))
        if args.emit:
            try:
                write_text(args.emit, source)
            except OSError as e:
                raise CiError(f"--emit: cannot write {args.emit}: {e.strerror or e}") from None
            result["emitted"] = str(args.emit)
    if args.json:
        emit_json(result)
        return 0
    if args.print_order or not (args.emit or args.inject):
        for p in order:
            # SONAMEs and paths come from the wheels: escaped, so none can forge a line or a terminal code
            print("\t".join(shown(x) for x in (p.soname, p.distribution or "-", p.path)))
    if "wheel" in result:
        print(result["wheel"])
    return 0


@contextlib.contextmanager
def _outputs_held(args: argparse.Namespace) -> Iterator[None]:
    """-w (with --inject) and --emit's directory held while they are written (wheelci.util.owned): one run
    at a time, and a directory this run made goes again if it fails. The wheel replaces one of its name
    (an earlier injection); --emit replaces only a module known by its header (own_emit)."""
    from wheelci.util.owned import output_dir

    dirs = [(args.wheel_dir, "-w/--wheel-dir")] if args.inject else []
    if args.emit and not (dirs and Path(args.emit).parent.resolve() == args.wheel_dir.resolve()):
        dirs.append((Path(args.emit).parent, "--emit: cannot write into"))
    with contextlib.ExitStack() as stack:
        for path, what in dirs:
            stack.enter_context(output_dir(path, what))
        yield


def build_parser() -> argparse.ArgumentParser:
    from wheelci.cli import parser

    p = parser("preload", "Order shared libraries from wheels by their ELF dependencies "
               "and emit (or inject) a stdlib-only module that preloads them in that order.")
    p.add_argument("inputs", nargs="+", metavar="WHEEL_OR_DIR", type=Path,
                   help="wheels or installed directories that provide the libraries")
    p.add_argument("--needed", action="append", metavar="SONAME",
                   help="preload only what this SONAME needs, itself included (repeatable; default: "
                   "every library in the inputs, or with --inject what the wheel needs)")
    p.add_argument("--system", action="append", default=[], metavar="PATTERN",
                   help="also expect SONAMEs matching this fnmatch pattern from the system (repeatable)")
    p.add_argument("--print-order", action="store_true", help="print SONAME, distribution, path per line")
    p.add_argument("--emit", type=Path, metavar="FILE", help="write the runtime module to FILE")
    p.add_argument("--inject", metavar="WHEEL", type=Path,
                   help="write a copy of WHEEL (into -w DIR) whose top package preloads its deps on import")
    p.add_argument("-w", "--wheel-dir", type=Path, metavar="DIR", help="output directory for --inject")
    p.add_argument("--package", help="with --inject: the package to inject into (default: guessed)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


if __name__ == "__main__":
    from wheelci.cli import run

    run(build_parser(), main)
