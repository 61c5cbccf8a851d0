"""`wheelci preload`: its options and what it prints; the work is wheelci.preload's."""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

from wheelci import cli
from wheelci.errors import CiError
from wheelci.native.elf import SYSTEM_LIBS, scan
from wheelci.native.loadorder import as_preload, dependency_order, inject_preload, order_for_wheel, runtime_source
from wheelci.preload import own_emit
from wheelci.util.atomic import write_text
from wheelci.util.owned import output_dir


def main(args: argparse.Namespace) -> int:
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
        cli.emit_json(result)
        return 0
    if args.print_order or not (args.emit or args.inject):
        for p in order:
            # SONAMEs and paths come from the wheels: escaped, so none can forge a line or a terminal code
            print("\t".join(cli.shown(x) for x in (p.soname, p.distribution or "-", p.path)))
    if "wheel" in result:
        print(result["wheel"])
    return 0


@contextlib.contextmanager
def _outputs_held(args: argparse.Namespace) -> Iterator[None]:
    """-w (with --inject) and --emit's directory held while they are written (wheelci.util.owned): one run
    at a time, and a directory this run made goes again if it fails. The wheel replaces one of its name
    (an earlier injection); --emit replaces only a module known by its header (own_emit)."""
    dirs = [(args.wheel_dir, "-w/--wheel-dir")] if args.inject else []
    if args.emit and not (dirs and Path(args.emit).parent.resolve() == args.wheel_dir.resolve()):
        dirs.append((Path(args.emit).parent, "--emit: cannot write into"))
    with contextlib.ExitStack() as stack:
        for path, what in dirs:
            stack.enter_context(output_dir(path, what))
        yield


def build_parser() -> argparse.ArgumentParser:
    p = cli.parser("preload", "Order shared libraries from wheels by their ELF dependencies "
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
    cli.run(build_parser(), main)
