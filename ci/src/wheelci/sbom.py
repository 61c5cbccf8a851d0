"""Provenance: a CycloneDX 1.6 SBOM in each wheel's `.dist-info/sboms/` (PEP 770), listed in RECORD.

It says what the wheel was built from and against: the project and its git revision; torch at the
version built against; the CUDA and cuDNN versions and the image or wheels the toolkit came from; the
compiler, as the extension's own binaries record it (their ELF `.comment`); the libraries repair grafted
and those it left to torch and NVIDIA's wheels. An SBOM auditwheel wrote into the wheel stays beside ours.
When the size check splits a wheel, `add_split_sboms` (the split's hook) makes the main wheel's again and
gives each companion its own: the files it holds and the wheel, and SBOM, it was split off.

`sbom_document` is pure and deterministic, so that two builds of one commit give the same bytes: the
serial number is a UUID5 of the wheel's content digest, the timestamp SOURCE_DATE_EPOCH or the commit's
time (none otherwise), never the clock. `add_sbom` gathers its inputs from the build and the wheel.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Collection

from wheelci import __version__
from wheelci.engine import host_nvcc, nvcc_version
from wheelci.errors import CiError
from wheelci.native import elfread
from wheelci.native.elf import looks_like_shared_lib
from wheelci.native.libs import TORCH_LIBRARIES
from wheelci.util import proc
from wheelci.util.secret import redact
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.requirements import read_requirement, requirement_name
from wheelci.wheel.rewrite import rewrite
from wheelci.wheel.zipread import WheelArchive

if TYPE_CHECKING:
    import subprocess

    from cyclonedx.model import ExternalReference, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component
    from packageurl import PackageURL

    from wheelci.compile.hostenv import BuildEnv
    from wheelci.plan import Plan
    from wheelci.wheel.zipformat import Member

SBOM_NAME = "wheelci.cdx.json"  # ours, in .dist-info/sboms/ (auditwheel's is auditwheel.cdx.json)
SERIAL_NAMESPACE = uuid.UUID("6f1b7c1e-4b1a-5d0e-9a57-7768656c6369")  # UUID5 namespace of our serial numbers
COMMENT_CAP = 64 << 10  # a .comment section read no further than this
SBOM_CAP = 16 << 20  # our own SBOM, read back for its serial number
PROP = "wheelci:"  # our property names' namespace


@dataclass(frozen=True)
class Grafted:
    """A library auditwheel copied into the wheel (`<dist>.libs/libfoo-1a2b3c4d.so.1`)."""

    member: str
    soname: str  # the name it had before auditwheel hashed it (libfoo.so.1)
    sha256: str | None  # hex, from RECORD


@dataclass(frozen=True)
class Provenance:
    """Everything the SBOM says, gathered by add_sbom (or written by hand in a test)."""

    project: str
    version: str
    wheel: str  # the file name the SBOM is written for (before it is added)
    content_digest: str  # sha256 hex over the wheel's RECORD entries: every member's hash
    revision: str | None  # the git commit; None with revision_note saying why
    revision_note: str | None = None
    dirty: bool = False  # what the build read differs from the commit (a tracked file changed, an untracked one added)
    epoch: int | None = None  # SOURCE_DATE_EPOCH, else the commit's time
    torch: str = ""  # the torch the wheel was built against, as installed (2.13.0+cpu)
    torch_requirement: str | None = None  # what the wheel's METADATA requires of torch
    torch_source: str | None = None  # where that torch came from: a wheel's URL or local file, an index, or a sentence
    cuda: str | None = None
    arch_list: str | None = None
    cudnn_requirement: str | None = None  # the cuDNN wheel torch pins (nvidia-cudnn-cu13==9.13.0.50)
    image: str | None = None  # a container build's image
    nvcc: str | None = None  # a host CUDA build's nvcc: "host nvcc 13.0" or NVIDIA's wheel
    cuda_wheels: tuple[tuple[str, str], ...] = ()  # (name, version) of the nvidia-* wheels compiled against
    compilers: tuple[str, ...] = ()  # version strings from the binaries' .comment
    grafted: tuple[Grafted, ...] = ()
    excluded: tuple[str, ...] = ()  # sonames left to torch and NVIDIA's wheels
    other_sboms: tuple[str, ...] = ()  # SBOMs already in .dist-info/sboms/ (auditwheel's), kept
    tool_version: str = ""
    companions: tuple[tuple[str, str], ...] = ()  # (project, version) of the wheels a split moved libraries to


@dataclass(frozen=True)
class Held:
    """A file a split companion holds."""

    member: str
    sha256: str | None  # hex, from RECORD


@dataclass(frozen=True)
class CompanionProvenance:
    """What a split companion's SBOM says: what it holds, and the wheel (and SBOM) it was split off."""

    project: str
    version: str
    wheel: str
    content_digest: str
    held: tuple[Held, ...]
    parent: str  # the main wheel's project
    parent_wheel: str  # its file name
    parent_serial: str | None  # its SBOM's serial number (urn:uuid:...), None where it has none
    epoch: int | None = None
    tool_version: str = ""


def _props(**values: str | None) -> list[Property]:
    from cyclonedx.model import Property

    return [Property(name=PROP + k.replace("_", "-"), value=v) for k, v in values.items() if v]


def _purl(name: str, version: str | None, **qualifiers: str) -> PackageURL:
    from packageurl import PackageURL

    return PackageURL(type="pypi", name=name.lower().replace("_", "-"), version=version, qualifiers=qualifiers or None)


def _component(kind: str, ref: str, name: str, version: str | None = None, *, runtime: bool, purl: bool = False,
               sha256: str | None = None, refs: list[ExternalReference] | None = None,
               **props: str | None) -> "Component":
    """A component: `runtime` ones the installed wheel needs (scope required), the others what it was
    built with (scope excluded: not part of what runs)."""
    from cyclonedx.model import HashAlgorithm, HashType
    from cyclonedx.model.component import Component, ComponentScope, ComponentType

    return Component(type=ComponentType(kind), bom_ref=ref, name=name, version=version,
                     scope=ComponentScope.REQUIRED if runtime else ComponentScope.EXCLUDED,
                     purl=_purl(name, version) if purl else None,
                     hashes=[HashType(alg=HashAlgorithm.SHA_256, content=sha256)] if sha256 else None,
                     external_references=refs, properties=_props(**props))


def _requirement(text: str | None) -> tuple[str, str | None] | None:
    """(name, pinned version or None) of a requirement, None when there is none or it does not parse."""
    if not text:
        return None

    req = read_requirement(text)
    if req is None:
        return None
    pins = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
    return req.name, pins[0] if len(pins) == 1 else None


def _compiler(text: str) -> tuple[str, str | None]:
    """(name, version) of a .comment line: `GCC: (Debian 12.2.0-14) 12.2.0` -> (gcc, 12.2.0)."""
    if m := re.match(r"GCC:.*?(\d+(?:\.\d+)+)\s*$", text):
        return "gcc", m[1]
    if m := re.search(r"\bclang version (\d+(?:\.\d+)+)", text):
        return "clang", m[1]
    name, _, rest = text.partition(":")
    found = re.search(r"\d+(?:\.\d+)+", rest)
    return name.strip().lower() or text, found[0] if found else None


def _build_components(p: Provenance) -> list[Component]:
    """What the wheel was compiled with: the CUDA toolkit, its image or wheels, the compilers."""
    out = []
    if p.cuda:
        out.append(_component("framework", "cuda", "cuda", p.cuda, runtime=False, arch_list=p.arch_list,
                              toolkit=p.image and f"the image {redact(p.image)}" or p.nvcc))
    if p.image:
        out.append(_component("container", "image", redact(p.image), runtime=False, role="the build's image"))
    out += [_component("library", f"build:{name}", name, version, runtime=False, purl=True,
                       role="compiled against (the CUDA toolkit's headers and libraries)")
            for name, version in sorted(set(p.cuda_wheels))]
    for text in sorted(set(p.compilers)):
        name, version = _compiler(text)
        out.append(_component("application", f"compiler:{text}", name, version, runtime=False,
                              role="compiler", comment=text))
    return out


def _runtime_components(p: Provenance) -> list[Component]:
    """What the installed wheel needs: torch, cuDNN, the grafted libraries and those left to other wheels."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri

    source = redact(p.torch_source or "not recorded: its build environment was made before wheelci recorded it")
    url = re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+", source)
    refs = [ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(source))] if url else None
    out = [_component("library", "torch", "torch", p.torch, runtime=True, purl=True, refs=refs,
                      role="built against", requirement=p.torch_requirement, source=None if url else source)]
    if cudnn := _requirement(p.cudnn_requirement):
        out.append(_component("library", "cudnn", cudnn[0], cudnn[1], runtime=True, purl=True,
                              role="cuDNN, as the torch built against pins it", requirement=p.cudnn_requirement))
    out += [_component("library", f"grafted:{g.member}", g.soname, runtime=True, sha256=g.sha256,
                       repair="grafted into the wheel", file=g.member) for g in sorted(set(p.grafted), key=str)]
    out += [_component("library", f"excluded:{soname}", soname, runtime=True,
                       repair="excluded: a runtime dependency", provided_by=_provider(soname))
            for soname in sorted(set(p.excluded))]
    out += [_component("library", f"companion:{name}", name, version, runtime=True, purl=True,
                        role="split companion: holds libraries moved out of this wheel (required at this version)")
            for name, version in sorted(set(p.companions))]
    return out


def _provider(soname: str) -> str:
    torch_own = re.match(rf"lib({'|'.join(map(re.escape, TORCH_LIBRARIES))})[-_.]", soname)
    return "torch" if torch_own else "NVIDIA's CUDA wheels, which torch requires"


def _project(p: Provenance) -> "Component":
    from cyclonedx.model.component import Commit, Component, ComponentType, Pedigree

    if p.revision:
        git = {"git_revision": p.revision, "git_dirty": "true" if p.dirty else None}
    else:
        git = {"git_revision": f"absent: {p.revision_note or 'unknown'}"}
    return Component(type=ComponentType.LIBRARY, bom_ref="project", name=p.project, version=p.version,
                     purl=_purl(p.project, p.version, file_name=p.wheel),
                     pedigree=Pedigree(commits=[Commit(uid=p.revision)]) if p.revision else None,
                     properties=_props(**git))


def sbom_document(p: Provenance) -> str:
    """The CycloneDX 1.6 JSON text of one wheel's provenance: the same inputs, the same bytes."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
    from cyclonedx.model.bom import Bom
    from cyclonedx.output.json import JsonV1Dot6

    project = _project(p)
    runtime, build = _runtime_components(p), _build_components(p)
    bom = Bom(serial_number=uuid.uuid5(SERIAL_NAMESPACE, p.content_digest),
              components=runtime + build,
              external_references=[ExternalReference(type=ExternalReferenceType.BOM, url=XsUri(name),
                                                     comment="an SBOM of the same wheel, kept as written")
                                   for name in sorted(p.other_sboms)])
    _finish(bom, p.epoch, p.tool_version)
    bom.metadata.component = project
    bom.metadata.properties = _props(cuda=None if p.cuda else "none: a CPU build")
    bom.register_dependency(project, runtime)
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def _finish(bom: "Bom", epoch: int | None, tool_version: str) -> None:
    """What every document of ours says about itself: its time (SOURCE_DATE_EPOCH or the commit's, never
    the clock) and the tool."""
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.tool import ToolRepository

    # None leaves the timestamp out of the document; the setter's annotation says datetime only
    bom.metadata.timestamp = (datetime.fromtimestamp(epoch, tz=timezone.utc)  # type: ignore[assignment]
                              if epoch is not None else None)
    bom.metadata.tools = ToolRepository(components=[Component(type=ComponentType.APPLICATION, name="wheelci",
                                                              version=tool_version or None)])


def companion_document(c: CompanionProvenance) -> str:
    """The CycloneDX 1.6 JSON text of a split companion's SBOM: each file it holds, by hash, and the wheel it
    was split off, with a BOM-Link to that wheel's SBOM, which says how the files were built."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    project = Component(type=ComponentType.LIBRARY, bom_ref="project", name=c.project, version=c.version,
                        purl=_purl(c.project, c.version, file_name=c.wheel))
    link = [ExternalReference(type=ExternalReferenceType.BOM, url=XsUri(f"urn:cdx:{c.parent_serial[9:]}/1"),
                              comment="the SBOM of the wheel these files were split off")] \
        if c.parent_serial and c.parent_serial.startswith("urn:uuid:") else None
    parent = Component(type=ComponentType.LIBRARY, bom_ref="parent", name=c.parent, version=c.version,
                       purl=_purl(c.parent, c.version, file_name=c.parent_wheel), external_references=link,
                       properties=_props(
                           role=f"split off this wheel, which requires {c.project}=={c.version}"))
    files = [_component("file", f"file:{h.member}", h.member, runtime=True, sha256=h.sha256)
             for h in sorted(set(c.held), key=str)]
    bom = Bom(serial_number=uuid.uuid5(SERIAL_NAMESPACE, c.content_digest), components=[parent, *files])
    _finish(bom, c.epoch, c.tool_version)
    bom.metadata.component = project
    bom.register_dependency(project, files)
    bom.register_dependency(parent, [project])
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


# --- the edge: what add_sbom reads of the project, the build env and the wheel --------------------------


def git_revision(project_dir: Path, sources: Collection[str] | None = None) -> tuple[str | None, str | None, bool]:
    """(commit, why there is none, dirty) of the project directory: a commit only where the
    directory's own files are tracked (an sdist unpacked inside someone's checkout is not that checkout).

    Dirty: a tracked file differs from the commit, or an untracked, unignored file is among what the build
    read (`sources`, paths relative to the directory: git's tracked and unignored files less -w and the work
    directory; without it, any such file), since the build takes those too."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return proc.run(["git", "-C", project_dir, *args], what="reading the project's git revision", check=False,
                        capture_output=True, text=True)

    try:
        head = git("rev-parse", "--verify", "HEAD")
    except CiError:
        return None, "git is not installed", False
    if head.returncode != 0 or not head.stdout.strip() or not git("ls-files", "--", ".").stdout.strip():
        return None, "the project directory is not a git checkout", False
    commit = head.stdout.split()[0]
    if git("status", "--porcelain", "--untracked-files=no", "--", ".").stdout.strip():
        return commit, None, True
    untracked = [f for f in git("ls-files", "-z", "--others", "--exclude-standard", "--", ".").stdout.split("\0") if f]
    shipped = set(sources) if sources is not None else None
    return commit, None, any(shipped is None or f in shipped for f in untracked)


def comment_strings(stream: BinaryIO) -> list[str]:
    """The strings of an ELF file's .comment section (compilers and linkers record themselves there)."""

    header = elfread.read_header(stream)
    if header is None:
        return []
    secs = elfread.sections(stream, header)
    index = header.shstrndx if header.shstrndx != elfread.SHN_XINDEX else (secs[0].link if secs else 0)
    if not 0 < index < len(secs):
        return []  # no section names
    names = elfread.StringTable(stream, secs[index].offset, secs[index].size, header.size, "section name table")
    found = [s for s in secs if names.is_one_of(s.name, [b".comment"])]
    out = []
    for s in found:
        data = elfread.read_at(stream, s.offset, min(s.size, COMMENT_CAP), header.size, ".comment")
        out += [t for raw in data.split(b"\0") if (t := raw.decode("utf-8", "replace").strip())]
    return out


def wheel_compilers(wa: WheelArchive, libs_dir: str) -> list[str]:
    """The compilers of the extension's own libraries (not the grafted ones)."""

    found: set[str] = set()
    for m in wa.files:
        if looks_like_shared_lib(m.name) and not m.name.startswith(libs_dir) and m.usize >= 64:
            with wa.seekable(m) as stream, contextlib.suppress(CiError):  # not ELF: nothing a compiler made
                found.update(comment_strings(stream))
    return sorted(found)


def _hex(record_hash: str) -> str | None:
    algo, _, value = record_hash.partition("=")
    if algo != "sha256" or not value:
        return None
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def content_digest(wa: WheelArchive, skip: str) -> str:
    """sha256 over the wheel's RECORD entries (name and hash of every member, our own SBOM aside)."""
    lines = sorted(f"{name},{e.hash}" for name, e in wa.record.items() if name not in (wa.record_name, skip))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def nvidia_wheels(site: Path) -> list[tuple[str, str]]:
    """(name, version) of the nvidia-* distributions in a build env's site-packages."""
    import importlib.metadata as md

    found = {(d.metadata["Name"], d.version) for d in md.distributions(path=[str(site)])
             if (d.metadata["Name"] or "").lower().startswith("nvidia-")}
    return sorted(found)


def host_nvcc_used(plan: "Plan") -> str | None:
    """Which nvcc a host CUDA build compiled with, by the rule compile.hostenv.find_nvcc applies: the
    host's when --nvcc allows it and its version is the plan's, else NVIDIA's wheel (listed with the
    build env's wheels)."""
    if plan.cuda is None or plan.engine.container:
        return None

    host = host_nvcc()
    if plan.run.nvcc_source in ("auto", "host") and host is not None and nvcc_version(host) == plan.cuda:
        return f"the host's nvcc {plan.cuda} (--nvcc {plan.run.nvcc_source})"
    return f"NVIDIA's nvcc {plan.cuda} wheel (--nvcc {plan.run.nvcc_source})"


def built_torch_source(plan: "Plan", env: "BuildEnv") -> str | None:
    """Where the torch the wheel was compiled against came from. A container build's: what its pip was
    told (the plan's container_index, else its own sources and the find-links directory). A host
    build's: what the build environment recorded when it installed torch, else a direct URL install's
    direct_url.json; None where neither says (an environment made before the source was recorded)."""
    if plan.engine.container:
        index = plan.container_index
        if plan.find_links:
            return f"the build container's pip: the find-links directory {plan.find_links} or " \
                   f"{index or 'its configured indexes'}"
        return index or "the build container's pip: its configured indexes"
    if env.torch_source:
        return env.torch_source
    import importlib.metadata as md

    for dist in md.distributions(path=[str(env.site)]):
        if (dist.metadata["Name"] or "").lower() == "torch":
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                url = json.loads(dist.read_text("direct_url.json") or "null")["url"]
                return url if isinstance(url, str) and url else None
    return None


def provenance(wa: WheelArchive, *, plan: "Plan", env: "BuildEnv", excluded: list[str], project_dir: Path,
               member: str, sources: Collection[str] | None = None,
               companions: tuple[tuple[str, str], ...] = ()) -> Provenance:
    """The Provenance of one wheel of a build: the plan, the build env, the project's checkout, the wheel."""

    revision, note, dirty = git_revision(project_dir, sources)
    libs_dir = f"{wa.name.distribution}.libs/"
    record = wa.record
    grafted = tuple(Grafted(m.name, re.sub(r"-[0-9a-f]{8}(?=\.so)", "", m.name.rsplit("/", 1)[-1]),
                            _hex(record[m.name].hash) if m.name in record else None)
                    for m in wa.files if m.name.startswith(libs_dir))
    torch_reqs = [r for r in get_headers(wa.metadata, "Requires-Dist") if requirement_name(r) == "torch"]
    sboms = f"{wa.dist_info}/sboms/"
    host = not plan.engine.container
    return Provenance(
        project=_name(wa), version=wa.name.version, wheel=wa.path.name,
        content_digest=content_digest(wa, member), revision=revision, revision_note=note, dirty=dirty,
        epoch=plan.run.source_date_epoch, torch=env.torch_version,
        torch_requirement=torch_reqs[0] if torch_reqs else None, torch_source=built_torch_source(plan, env),
        cuda=plan.cuda, arch_list=plan.arch_list if plan.cuda else None,
        cudnn_requirement=plan.cudnn_requirement if plan.cuda else None,
        image=None if host else (plan.image or f"cibuildwheel's pinned {plan.manylinux} image"),
        nvcc=host_nvcc_used(plan), cuda_wheels=tuple(nvidia_wheels(env.site)) if host and plan.cuda else (),
        compilers=tuple(wheel_compilers(wa, libs_dir)), grafted=grafted, excluded=tuple(excluded),
        other_sboms=tuple(m.name[len(sboms):] for m in wa.files if m.name.startswith(sboms) and m.name != member),
        tool_version=__version__, companions=companions)


def add_sbom(wheel: Path, dest_dir: Path, *, plan: "Plan", env: "BuildEnv", excluded: list[str], project_dir: Path,
             sources: Collection[str] | None = None, companions: tuple[tuple[str, str], ...] = ()) -> Path:
    """The wheel again in dest_dir, with our SBOM in .dist-info/sboms/ and RECORD regenerated (one
    rewrite; an SBOM of ours already there is replaced, any other kept)."""
    with WheelArchive.open(wheel) as wa:
        member = f"{wa.dist_info}/sboms/{SBOM_NAME}"
        return _with_document(wa, dest_dir, member, sbom_document(provenance(
            wa, plan=plan, env=env, excluded=excluded, project_dir=project_dir, member=member, sources=sources,
            companions=companions)))


def _with_document(wa: WheelArchive, dest_dir: Path, member: str, text: str) -> Path:
    """The wheel again in dest_dir with the document as `member` (replaced if there), in one rewrite."""

    content = {member: text.encode()}
    return rewrite(wa, dest_dir, replace=content) if member in wa else rewrite(wa, dest_dir, add=content)


def _name(wa: WheelArchive) -> str:
    """The project's name as METADATA spells it (the file name's form where it has none)."""
    return (get_headers(wa.metadata, "Name") or [wa.name.distribution])[0]


def add_split_sboms(wheels: list[Path], dest_dir: Path, *, plan: "Plan", env: "BuildEnv", excluded: list[str],
                    project_dir: Path, sources: Collection[str] | None = None) -> list[Path]:
    """A split's outputs (the main wheel first, then its companions: split.SbomHook) again in dest_dir, each
    with a true SBOM: the main wheel's made again for what it holds now, naming its companions; each
    companion's listing its files and referring to the main wheel's SBOM."""
    found = []
    for wheel in wheels[1:]:
        with WheelArchive.open(wheel) as wa:
            found.append((_name(wa), wa.name.version))
    main = add_sbom(wheels[0], dest_dir, plan=plan, env=env, excluded=excluded, project_dir=project_dir,
                    sources=sources, companions=tuple(found))
    with WheelArchive.open(main) as wa:
        parent = _name(wa)
        serial = json.loads(wa.read_text(f"{wa.dist_info}/sboms/{SBOM_NAME}", SBOM_CAP))["serialNumber"]
    out = [main]
    for wheel in wheels[1:]:
        with WheelArchive.open(wheel) as wa:
            member, record = f"{wa.dist_info}/sboms/{SBOM_NAME}", wa.record
            held = tuple(Held(m.name, _hex(record[m.name].hash) if m.name in record else None)
                         for m in wa.files if not m.name.startswith(f"{wa.dist_info}/"))
            doc = companion_document(CompanionProvenance(
                project=_name(wa), version=wa.name.version, wheel=wa.path.name, content_digest=content_digest(wa, member),
                held=held, parent=parent, parent_wheel=main.name, parent_serial=serial,
                epoch=plan.run.source_date_epoch, tool_version=__version__))
            out.append(_with_document(wa, dest_dir, member, doc))
    return out
