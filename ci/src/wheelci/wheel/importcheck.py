"""Does a set of wheels still import? Unpacked in both install layouts, imported in a fresh interpreter.

What ci.split runs before it reports success: a split that moved the wrong file (an extension module,
which Python finds by its package path) writes wheels that install and then fail at `import`. The two
layouts are the ones the split promises: one site directory (pip, uv) and one directory per wheel on
sys.path (Bazel's rules_python, `pip install --target` per wheel).

What is imported: each top-level package and module, and each extension module named for an
interpreter (`x.cpython-311-x86_64-linux-gnu.so`, `x.abi3.so`), by its dotted name. Only where this
interpreter is one the wheels are tagged for; elsewhere the check is skipped, saying so.

A module may fail for reasons of its own (a dependency that is not installed, no GPU): the caller
compares with the unsplit wheel, imported the same way, and blames only what that one imports.
Importing runs the package's code: the wheels are the ones the caller just made from its input.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from wheelci.util import proc
from wheelci.wheel.names import WheelName
from wheelci.wheel.zipread import WheelArchive

IMPORT_TIMEOUT = 600.0  # seconds for one layout's imports (torch's first import takes ~10 s)
_DATA = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")
_SCRIPT = """
import importlib, json, sys
paths, modules, report = json.loads(sys.argv[1])
sys.path[0:0] = paths
failed = {}
for name in modules:
    try:
        importlib.import_module(name)
    except BaseException as e:  # SystemExit and KeyboardInterrupt raised by a module count as failures
        failed[name] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]
with open(report, "w") as f:
    json.dump(failed, f)
"""


@dataclass(frozen=True)
class Layouts:
    """The wheels unpacked: one directory each, and one site directory holding them all."""

    per_wheel: list[Path]
    site: Path


def interpreter_matches(filenames: Sequence[str]) -> bool:
    """This interpreter is one every wheel is tagged for (pip would install them here). The names are read
    by ci.wheel.names, which knows PEP 825 variant labels (packaging reads `-cu130` as a bad build tag)."""
    from packaging.tags import parse_tag, sys_tags


    ours = set(sys_tags())
    return all(parse_tag(WheelName.parse(n).tag) & ours for n in filenames)


def _installed(name: str) -> str | None:
    """A member's path once installed, or None for what installs elsewhere (scripts, headers, data)."""
    if name.split("/", 1)[0].endswith(".data"):
        return _DATA.sub("", name) if _DATA.match(name) else None
    return name


def unpack(wheel: Path, dest: Path) -> list[str]:
    """The wheel's importable files laid out as an installer would in dest; returns their paths."""

    paths = []
    with WheelArchive.open(wheel) as wa:
        for m in wa.files:
            rel = _installed(m.name)
            if rel is not None:
                wa.extract(m, dest / rel)
                paths.append(rel)
    return paths


def modules(paths: Sequence[str]) -> list[str]:
    """What to import: top-level packages and modules, and extension modules by their dotted names."""
    suffixes = [s for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so"]  # `.so` alone: libraries too
    found: set[str] = set()
    for rel in paths:
        parts = rel.split("/")
        if ".dist-info" in parts[0]:
            continue
        if len(parts) == 2 and parts[1] == "__init__.py":
            found.add(parts[0])
        elif len(parts) == 1 and rel.endswith(".py"):
            found.add(rel[:-3])
        suffix = next((s for s in suffixes if parts[-1].endswith(s)), None)
        if suffix:
            found.add(".".join([*parts[:-1], parts[-1][: -len(suffix)]]))
    return sorted(n for n in found if all(p.isidentifier() for p in n.split(".")))


def lay_out(wheels: Sequence[Path], where: Path) -> tuple[Layouts, list[list[str]]]:
    """Unpack each wheel into its own directory, and all of them into one site directory (hard links
    to the same files); returns the layouts and, per wheel, the modules to import."""
    per_wheel, names = [], []
    site = where / "site"
    for i, wheel in enumerate(wheels):
        d = where / f"wheel{i}"
        rels = unpack(wheel, d)
        names.append(modules(rels))
        per_wheel.append(d)
        for rel in rels:
            target = site / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(d / rel, target)
            except FileExistsError:
                pass  # the same path in two wheels: the first wheel's file, as an installer would leave it
            except OSError:
                shutil.copy2(d / rel, target)
    return Layouts(per_wheel, site), names


def failures(paths: Sequence[Path], names: Sequence[str], scratch: Path) -> dict[str, str]:
    """{module: why} for each of `names` that does not import with `paths` first on sys.path, in a
    fresh interpreter (its working directory empty, so nothing else shadows them)."""
    scratch.mkdir(parents=True, exist_ok=True)
    report = scratch / "report.json"
    report.unlink(missing_ok=True)
    cwd = scratch / "cwd"
    cwd.mkdir(exist_ok=True)
    arg = json.dumps([[str(p) for p in paths], list(names), str(report)])
    try:
        done = proc.run([sys.executable, "-s", "-c", _SCRIPT, arg], what="importing the split wheels", check=False,
                        capture_output=True, text=True, cwd=cwd, timeout=IMPORT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {n: f"the imports did not finish within {IMPORT_TIMEOUT:.0f} s" for n in names}
    try:
        failed: dict[str, str] = json.loads(report.read_text())  # what _SCRIPT dumps: {module: why}
        return failed
    except (OSError, ValueError):  # the interpreter died (a crash in a native library)
        why = proc.failure(done.args, done)
        return {n: why for n in names}
