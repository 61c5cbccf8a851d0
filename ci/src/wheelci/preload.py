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

from pathlib import Path

from wheelci.errors import CiError
from wheelci.native.loadorder import runtime_source
from wheelci.util.invocation import command

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
        raise CiError(f"--emit {emit}: exists and is not a preload module {command('preload')} wrote; refusing "
                      "to replace it (remove it, or pick another path)")


if __name__ == "__main__":  # `python -m wheelci.preload` (`python -m ci.preload` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.preload", run_name="__main__")
