"""The files one upload sends, known and checked before anything is sent: wheels, sdists and a
release's PEP 825 variants files (sent first, so an index that refuses the name stops the upload before
any wheel lands), each hashed once. A variants file given must agree with the variant wheels given with
it, as ci.index checks them; variant wheels given without one upload with a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from wheelci.errors import CiError
from wheelci.util.digest import sha256_file
from wheelci.util.invocation import command
from wheelci.wheel import variant as v
from wheelci.wheel.names import WheelName, canonical_version, classify
from wheelci.wheel.variant import parse_variants_filename
from wheelci.wheel.zipread import WheelArchive


@dataclass
class Target:
    path: Path
    project: str
    sha256: str
    version: str = ""
    variants_file: bool = False  # a release's PEP 825 variants file, not a distribution


def upload_targets(files: Iterable[str | os.PathLike[str]]) -> list[Target]:
    """The files to upload, a release's variants files first (see the module docstring)."""
    out: list[Target] = []
    seen: dict[str, Path] = {}
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise CiError(f"no such file: {path}")
        c = classify(path.name)
        named = (c[1], c[2]) if c else parse_variants_filename(path.name)
        if named is None:
            raise CiError(f"not a wheel, sdist or variants file: {path}")
        if path.name in seen:
            raise CiError(f"{path.name} given twice: {seen[path.name]} and {path}")
        seen[path.name] = path
        project, version = named
        out.append(Target(path, project, sha256_file(path), version, variants_file=c is None))
    if not out:
        raise CiError("no files to upload")
    return sorted(out, key=lambda t: not t.variants_file)


def check_variants(targets: list[Target], warn: Callable[[str], None]) -> None:
    """Each variants file given must agree with the variant wheels given with it (as ci.index checks
    them); a release's variant wheels given without one upload with a warning."""

    def release(t: Target) -> tuple[str, str]:
        return t.project, canonical_version(t.version.partition("+")[0])

    wheels: dict[tuple[str, str], list[tuple[str, v.VariantDoc]]] = {}
    for t in targets:
        if not t.variants_file and t.path.name.endswith(".whl") and WheelName.parse(t.path.name).variant:
            with WheelArchive.open(t.path) as wa:
                wheels.setdefault(release(t), []).append((t.path.name, v.read_wheel(wa)))
    given = {release(t): t for t in targets if t.variants_file}
    for key, t in given.items():
        if t.path.stat().st_size > v.DOC_CAP:
            raise CiError(f"{t.path}: over {v.DOC_CAP >> 10} KiB; not a variants file")
        why = v.contradiction(v.parse(t.path.read_bytes(), str(t.path)), wheels.get(key, []))
        if why:
            raise CiError(f"{t.path} contradicts the variant wheels given with it: {why}")
    for key, docs in sorted(wheels.items()):
        v.merge(f"{key[0]} {key[1]}", docs)  # the labels agree among themselves
        if key not in given:
            warn(f"warning: {key[0]} {key[1]}: variant wheels without the release's variants file: installers "
                 f"ignore them until the index serves it (give the one {command('index')} wrote once every variant is "
                 "built)")
