"""What a directory's variant wheels (PEP 825, ci.wheel.variant) add to the index: per release its
variants file (the one DIR holds, checked against the wheels, or one generated), the local-labelled
builds that leave the project pages, and the PyTorch-style roots, one per label (`OUT/cu130/<project>/`),
for installers without variant support.

Its own module because it is the one policy the pages carry: which release shows what, and a release
whose variant wheels disagree is refused (CiError) before anything is written. A release without variants
that has a CPU build keeps its CUDA builds off the project page too: there `+pt2.13.0.cu130` outranks
`+pt2.13.0.cpu` (pip and uv take the higher local label), so a machine with a CPU torch would get a CUDA
build it cannot load; each CUDA build is served from its root (`OUT/cu130/`), as PyTorch serves its own. Pure, apart from
rendering the roots' pages.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable
from urllib.parse import quote

from wheelci.errors import CiError
from wheelci.publish.distread import Dist
from wheelci.publish.pages import Link, file_url, render
from wheelci.wheel.names import canonical_version
from wheelci.wheel import variant as v


@dataclass
class VariantPlan:
    """What a directory's variant wheels add to the index."""

    files: dict[str, str] = field(default_factory=dict)  # variants files to write, relative to OUT
    links: dict[str, list[Link]] = field(default_factory=dict)  # project -> its variants files
    hidden: set[str] = field(default_factory=set)  # local-labelled builds of releases with variants
    roots: dict[str, list[Dist]] = field(default_factory=dict)  # cu130 -> its local-labelled builds
    notes: list[str] = field(default_factory=list)


def _public(version: str) -> str:
    return canonical_version(version.partition("+")[0])


def plan_variants(dists: list[Dist], given: list[Dist], to_root: str | None, base_url: str | None) -> VariantPlan:
    """Variants files (generated, or the ones DIR holds, checked), what leaves the project pages and
    the per-CUDA roots. CiError for a release whose variants disagree."""
    plan = VariantPlan()
    wheels = [d for d in dists if d.filename.endswith(".whl")]
    releases: dict[tuple[str, str], list[Dist]] = {}
    for d in wheels:
        releases.setdefault((d.project, _public(d.version)), []).append(d)
    provided: dict[tuple[str, str], Dist] = {}
    for g in sorted(given, key=lambda g: g.path):
        key = (g.project, _public(g.version))
        if key in provided:
            raise CiError(f"two variants files for {key[0]} {key[1]}: {provided[key].path} and {g.path}")
        provided[key] = g
        plan.links.setdefault(g.project, []).append(Link(g.filename, file_url(g, to_root, base_url), g.sha256, g.size))
    for (project, public), ds in sorted(releases.items()):
        labelled = sorted((d for d in ds if d.variant), key=lambda d: d.filename)
        if not labelled:
            continue
        versions = sorted({d.version for d in labelled})
        if len(versions) > 1:
            raise CiError(f"the variant wheels of {project} {public} disagree on the version ({', '.join(versions)}): "
                          "every variant of a release has the same version, with no local label")
        release = f"{project} {versions[0]}"
        docs = [(d.filename, v.parse_wheel_doc(d.variant_json or "", d.variant or "", d.filename)) for d in labelled]
        merged = v.merge(release, docs)
        if (project, public) in provided:
            g = provided[(project, public)]
            why = v.contradiction(v.parse(g.variant_json or "", g.path), docs)
            if why:
                raise CiError(f"{g.path} contradicts the variant wheels of {release}: {why}")
        else:
            name = v.variants_filename(labelled[0].filename.split("-", 1)[0], versions[0])
            data = v.dumps(merged)
            plan.files[f"{project}/{name}"] = data.decode()
            plan.links.setdefault(project, []).append(Link(name, quote(name), hashlib.sha256(data).hexdigest(), len(data)))
        if not any(not d.variant and "+" not in d.version for d in ds):
            plan.notes.append(f"{release} has variant wheels but no plain wheel: an installer that finds no "
                              "matching variant (no GPU, an old driver, no variant support) has nothing to install; "
                              "add the CPU build made with --local-version none")
        for d in ds:
            if not d.variant and "+" in d.version:
                plan.hidden.add(d.filename)
                if v.root_label(d.version) is None:
                    plan.notes.append(f"{d.path} is served from no page: {release} has variants and its local "
                                      "label names no CUDA or CPU build for a root")
    for ds in releases.values():  # no variants: a CPU build on the page, its CUDA builds from their roots alone
        if not any(d.variant for d in ds) and any(_is_cpu(d) for d in ds):
            plan.hidden.update(d.filename for d in ds if v.root_label(d.version) not in (None, "cpu"))
    for d in wheels:
        label = None if d.variant else v.root_label(d.version)
        if label:
            plan.roots.setdefault(label, []).append(d)
    return plan


def _is_cpu(d: Dist) -> bool:
    """A build any torch of its release takes: labelled cpu, or no label at all."""
    return "+" not in d.version or v.root_label(d.version) == "cpu"


def render_roots(roots: dict[str, list[Dist]], root: Path, out: Path, base_url: str | None,
                 legacy_keys: bool, projects: Iterable[str]) -> dict[str, str]:
    """PyTorch-style roots, `OUT/<label>/<project>/`: what `pip install --index-url .../cu130` reads."""
    clash = sorted(set(roots) & set(projects))
    if clash:
        raise CiError(f"project {clash[0]} and the index root for {clash[0]} builds would share {out / clash[0]}")
    pages: dict[str, str] = {}
    for label, ds in sorted(roots.items()):
        to_root = None if base_url else Path(os.path.relpath(root.resolve(), (out / label / "p").resolve())).as_posix()
        pages.update(render(ds, to_root, base_url, legacy_keys, prefix=f"{label}/"))
    return pages
