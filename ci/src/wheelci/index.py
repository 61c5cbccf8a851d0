"""Static simple repository for a directory of wheels and sdists: `python -m ci.index DIR`.

What pip, uv and Bazel's rules_python read from a static index, all of it, written without a server:
PEP 503 HTML (double-quoted attributes: rules_python's parser needs them), `#sha256=` fragments,
`data-requires-python`, PEP 658 core metadata (`FILE.metadata` beside each wheel, announced as PEP 714
says: `data-core-metadata` / `core-metadata` only) and PEP 691/700 JSON pages (`index.json`).

The legacy keys (`data-dist-info-metadata`, JSON `dist-info-metadata`) are off by default: pip 22.3 to
23.1 (the pip rules_python 0.16-0.25 bundles, Debian bookworm's pip) read them, then reject any
dependency whose requirement spells its name in another case ("has inconsistent Name: expected
'jinja2', but metadata has 'Jinja2'"). `--legacy-metadata-keys` adds them for a client that needs them.

Layout: distributions stay where they are (DIR, searched recursively); pages go to OUT (default
DIR/simple), one `OUT/<project>/index.html` + `index.json` each, linking to the files by relative path
or under --base-url. The `.metadata` files go beside the wheels, because PEP 658 puts them at the file's
URL + ".metadata".

Wheel variants (PEP 825, ci.wheel.variant): for each release with variant wheels, the project page
links `{name}-{version}-variants.json`: the one in DIR when there is one (it must agree with the
wheels), else one written to `OUT/<project>/`. A release whose variant wheels disagree (versions, a
label with two property sets, providers) is refused. Local-labelled builds (`0.1.0+pt2.13.0.cu130`)
are also served PyTorch style from one root per label, `OUT/cu130/<project>/`, for installers without
variant support (`pip install --index-url .../cu130 NAME`). A release with variants leaves its
local-labelled builds to those roots: on the project page `0.1.0+...` would outrank every variant
and the plain `0.1.0` for pip and uv alike.

Incremental: a file's sha256 and metadata are cached in OUT/.ci-index-cache.json, keyed by size,
mtime, inode, device and ctime, so re-running on an unchanged directory stats the files and rewrites
nothing. Size and mtime alone are not enough: `cp -p`, `rsync -a` and archives unpacked with a fixed
SOURCE_DATE_EPOCH replace a file keeping both, and a stale `#sha256` makes pip fail. ctime moves on
any write, and a file whose ctime is too close to the moment it was hashed (it may have changed within
one timestamp tick) is hashed again.

Ownership: OUT may be shared with other content (a docs site beside the pages). The cache file lists
every page and `.metadata` file this command wrote; only those are ever replaced or removed. It is
written first, listing what the run is about to write, so a run cut short (Ctrl-C, SIGTERM, a crash)
leaves only files the next run knows as its own, and an --out that cannot be written fails before
anything lands in DIR. A path it must write that holds anything else (with other bytes) is refused,
naming it, before any write.
The cache is input too (it travels with a copied dist/): only a page inside OUT or a `.metadata` file
inside DIR that it lists is ever removed, and nothing is written through a symlinked directory
leading out of OUT or DIR.
Everything is computed before anything is written, so bad input leaves the output as it was; each
write is atomic. Runs sharing DIR or OUT take turns (ci.util.lock, a flock on both directories, held
from the scan to the last write): interleaved, each would write the root page and the ownership list
from what it read, and the later one would drop the other's projects.
Wheels are read with ci.wheel.zipread, the zip reader every stage shares, and core metadata is capped
at its METADATA_CAP (a compression bomb is refused, not inflated). Otherwise stdlib only; the
zip/tar/email/thread modules load only when a file must be read, which keeps the unchanged re-run
near interpreter start-up time.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import html
import json
import os
import posixpath
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Iterable, TypeGuard
from urllib.parse import quote

from wheelci.util import log
from wheelci.util.digest import sha256_file
from wheelci.errors import CiError
from wheelci.wheel.names import SDIST_SUFFIXES, canonical_version, classify, normalize, same_version
from wheelci.wheel.variant import FILE_SUFFIX, parse_variants_filename

CACHE_NAME = ".ci-index-cache.json"
CACHE_VERSION = 2  # 2: ownership of written files, and the stronger cache key
API_VERSION = "1.1"  # PEP 700: versions + size
# Sidecar files beside distributions that are ours or expected there: skipped without a warning.
QUIET_SUFFIXES = (".metadata", ".asc", ".sig", ".publish.attestation")
PAGE_NAMES = ("index.html", "index.json")  # index pages (ours when --out is DIR): never distributions
# A file changed within this long of being hashed may have changed again in the same timestamp tick.
RACY_NS = 100_000_000


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Dist:
    """One distribution file as the pages show it."""

    filename: str
    path: str  # relative to DIR, posix separators
    project: str  # PEP 503 normalized
    version: str
    size: int
    sha256: str
    requires_python: str | None
    metadata_sha256: str | None  # wheels only: hash of the .metadata file's bytes
    variant: str | None = None  # a variant wheel's label (PEP 825)
    variant_json: str | None = None  # its variant.json; for a variants file, the file


@dataclass
class IndexResult:
    out: str
    projects: int
    files: int
    hashed: int  # files read this run (new or changed)
    cached: int  # files whose hash and metadata came from the cache
    written: list[str] = field(default_factory=list)  # pages/metadata files (re)written
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # not distributions


# ---------------------------------------------------------------- reading files


def wheel_metadata(path: Path) -> bytes:
    """The bytes of a wheel's .dist-info/METADATA (the PEP 658 file is exactly these bytes).

    Read through ci.wheel.zipread, the reader every stage uses: zipfile reads another set of members from
    a crafted zip, so ci.index would publish metadata of a wheel ci.check refuses. Capped by the size
    the zip directory gives (and checked while inflating): a deflate bomb is refused, never inflated.
    """
    from wheelci.wheel.metadata import METADATA_CAP
    from wheelci.wheel.zipread import WheelArchive
    try:
        with WheelArchive.open(path) as wa:
            name = f"{wa.dist_info}/METADATA"
            if name not in wa:
                raise CiError(f"{path.name}: no {name} in the wheel")
            return wa.read(name, METADATA_CAP)
    except OSError as e:
        raise CiError(f"{path.name}: not a readable wheel ({e.strerror})") from None


def _capped(f: IO[bytes], size: int, cap: int, what: str) -> bytes:
    """A member's bytes, refused over cap: by the size its archive gives, before inflating anything,
    and by reading at most one byte more than cap, for an archive whose size lies."""
    data = f.read(cap + 1) if size <= cap else b""
    if size > cap or len(data) > cap:
        raise CiError(f"{what} is over the {cap >> 20} MiB this tool reads for it ({max(size, len(data))}"
                      f"{'' if size > cap else '+'} bytes uncompressed)")
    return data


def sdist_metadata(path: Path) -> bytes | None:
    """PKG-INFO of an sdist (top-level directory only), or None when it has none. Read with the
    METADATA cap: a gzip or deflate bomb never gets more memory than that."""
    import tarfile
    import zipfile
    from wheelci.config.sdist import open_tar
    from wheelci.wheel.metadata import METADATA_CAP
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                for i in zf.infolist():
                    if i.filename.count("/") == 1 and i.filename.endswith("/PKG-INFO"):
                        with zf.open(i) as f:
                            return _capped(f, i.file_size, METADATA_CAP, f"{path.name}: {i.filename}")
            return None
        with open_tar(path) as tf:  # headers read bounded: a 90-byte sdist can declare a 1 TB name
            for m in tf:
                if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"):
                    member = tf.extractfile(m)
                    return _capped(member, m.size, METADATA_CAP, f"{path.name}: {m.name}") if member else None
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise CiError(f"{path.name}: not a readable sdist ({e})") from None
    return None


def parse_metadata(raw: bytes) -> dict[str, str]:
    """Name, Version and Requires-Python from core metadata (ci.wheel.metadata, the one reader)."""
    from wheelci.wheel.metadata import parse_metadata as read
    meta = read(raw.decode("utf-8", "replace"))
    return {k: found[0] for k in ("Name", "Version", "Requires-Python") if (found := meta.get_all(k)) and found[0]}


def read_dist(root: Path, rel: str, kind: str, project: str, version: str,
              st: os.stat_result) -> tuple[Dist, bytes | None]:
    """Hash a file and read its metadata; checks the metadata agrees with the file name."""
    path = root / rel
    if kind == "variants":
        return read_variants_file(path, rel, project, version, st), None
    raw = wheel_metadata(path) if kind == "wheel" else sdist_metadata(path)
    meta = parse_metadata(raw) if raw else {}
    if kind == "wheel" and not {"Name", "Version"} <= meta.keys():
        raise CiError(f"{path.name}: METADATA lacks Name or Version")
    if "Name" in meta and normalize(meta["Name"]) != project:
        raise CiError(f"{path.name}: metadata names project {meta['Name']!r}, the file name {project!r}")
    if "Version" in meta and not same_version(meta["Version"], version):  # an sdist's PKG-INFO too:
        # pip and uv build the sdist and install what its metadata says, not what the page listed
        raise CiError(f"{path.name}: metadata version {meta['Version']} != file name version {version}")
    label = path.name.endswith(".whl") and _wheel_label(path.name)
    dist = Dist(
        filename=path.name, path=rel, project=project, version=version, size=st.st_size,
        sha256=sha256_file(path), requires_python=meta.get("Requires-Python"),
        metadata_sha256=hashlib.sha256(raw).hexdigest() if kind == "wheel" and raw else None,
        variant=label or None, variant_json=wheel_variant(path) if label else None)
    return dist, (raw if kind == "wheel" else None)


def _wheel_label(filename: str) -> str | None:
    from wheelci.wheel.names import WheelName
    return WheelName.parse(filename).variant


def wheel_variant(path: Path) -> str:
    """A variant wheel's .dist-info/variant.json, checked against its label (ci.wheel.variant)."""
    from wheelci.wheel.zipread import WheelArchive
    from wheelci.wheel.variant import dumps, read_wheel
    with WheelArchive.open(path) as wa:
        return dumps(read_wheel(wa)).decode()  # normalized: the same properties compare equal


def read_variants_file(path: Path, rel: str, project: str, version: str, st: os.stat_result) -> Dist:
    """A `{name}-{version}-variants.json` found in DIR: checked, hashed and kept whole (a few hundred bytes)."""
    from wheelci.wheel.variant import DOC_CAP, parse
    with open(path, "rb") as f:
        data = f.read(DOC_CAP + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CiError(f"{rel}: not UTF-8 JSON") from None
    parse(text, rel)
    return Dist(filename=path.name, path=rel, project=project, version=version, size=st.st_size,
                sha256=hashlib.sha256(data).hexdigest(), requires_python=None, metadata_sha256=None,
                variant_json=text)


# ---------------------------------------------------------------- scanning


def scan(root: Path, out: Path) -> tuple[dict[str, tuple[str, str, str, os.stat_result]], list[str]]:
    """Distributions under root (not under out or hidden dirs): rel path -> (kind, project, version, stat)."""
    found: dict[str, tuple[str, str, str, os.stat_result]] = {}
    skipped: list[str] = []
    out_resolved = out.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = sorted(n for n in dirnames
                             if not n.startswith(".") and (d / n).resolve() != out_resolved)
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            rel = (d / name).relative_to(root).as_posix()
            c = classify(name)
            if c is None and (v := parse_variants_filename(name)):
                c = ("variants", *v)
            if c is None:
                if not name.endswith(QUIET_SUFFIXES) and name not in PAGE_NAMES:
                    skipped.append(rel)
                continue
            found[rel] = (*c, (d / name).stat())
    return found, skipped


@dataclass
class Cache:
    """What the last run knew: per distribution its key and record; the files it wrote."""

    files: dict[str, dict] = field(default_factory=dict)
    pages: set[str] = field(default_factory=set)  # relative to OUT
    metadata: set[str] = field(default_factory=set)  # .metadata sidecars, relative to DIR


def load_cache(path: Path) -> Cache:
    """The cache, or an empty one. A file there that is not our cache is foreign content: refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Cache()
    except OSError as e:
        raise CiError(f"cannot read {path}: {e.strerror}") from None
    try:
        data = json.loads(raw)
        assert isinstance(data, dict) and isinstance(data.get("version"), int)
    except (ValueError, AssertionError):
        raise CiError(f"{path} is not a ci.index cache file; refusing to overwrite it") from None
    if data["version"] != CACHE_VERSION:
        return Cache()  # an older format: hash again, and own only what is byte-identical
    files, pages, meta = data.get("files"), data.get("pages"), data.get("metadata")
    if not (isinstance(files, dict) and isinstance(pages, list) and isinstance(meta, list)):
        return Cache()
    return Cache(files, set(map(str, pages)), set(map(str, meta)))


def _cached_dist(hit: dict, rel: str) -> Dist | None:
    """The cached record, only when it describes the file at rel (its path decides where the
    .metadata file goes: the cache travels with a copied dist/, so it is input like any other)."""
    try:
        d = Dist(**hit["dist"])
    except (TypeError, KeyError):
        return None
    return d if d.path == rel else None


def inside(base: Path, rel: object) -> bool:
    """rel names a file in base: relative, no `..`, and its directory, symlinks followed, is base or
    below it. What ci.index writes or removes must pass this, whatever its cache file says."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return False
    top = base.resolve()
    parent = (base / rel).parent.resolve()
    return parent == top or top in parent.parents


def cache_key(st: os.stat_result) -> list[int]:
    """Any write changes ctime, and a replaced file has another inode, even when size and mtime match."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns]


def trusted(hit: dict | None, st: os.stat_result) -> TypeGuard[dict]:
    """Reuse a cached hash only for the same key, and only when the file was not changed so close to
    the moment it was hashed that a second change could share its timestamp."""
    return (isinstance(hit, dict) and hit.get("key") == cache_key(st)
            and isinstance(hit.get("seen"), int) and st.st_ctime_ns < hit["seen"] - RACY_NS)


# ---------------------------------------------------------------- rendering (pure)


def file_url(d: Dist, to_root: str | None, base_url: str | None) -> str:
    """Link to a file from its project page: under base_url, or relative (works over file:// and http).

    to_root: the relative path from a project page's directory to DIR (e.g. "../.." for DIR/simple/p/).
    """
    quoted = "/".join(quote(p) for p in d.path.split("/"))
    if base_url:
        return f"{base_url.rstrip('/')}/{quoted}"
    return posixpath.normpath(posixpath.join(to_root or ".", quoted))


@dataclass(frozen=True)
class Link:
    """A file a project page links besides its distributions: a release's variants file."""

    filename: str
    url: str  # relative to the project page, or absolute
    sha256: str
    size: int


def project_html(project: str, dists: list[Dist], to_root: str | None, base_url: str | None,
                 legacy_keys: bool = False, links: Iterable[Link] = ()) -> str:
    lines = ["<!DOCTYPE html>", "<html>", "<head>",
             '<meta name="pypi:repository-version" content="1.1">',
             f"<title>Links for {html.escape(project)}</title>", "</head>", "<body>",
             f"<h1>Links for {html.escape(project)}</h1>"]
    for d in dists:
        attrs = [f'href="{html.escape(file_url(d, to_root, base_url))}#sha256={d.sha256}"']
        if d.requires_python:
            attrs.append(f'data-requires-python="{html.escape(d.requires_python)}"')
        if d.metadata_sha256:
            attrs.append(f'data-core-metadata="sha256={d.metadata_sha256}"')
            if legacy_keys:
                attrs.append(f'data-dist-info-metadata="sha256={d.metadata_sha256}"')
        lines.append(f"<a {' '.join(attrs)}>{html.escape(d.filename)}</a><br>")
    for link in links:
        lines.append(f'<a href="{html.escape(link.url)}#sha256={link.sha256}">{html.escape(link.filename)}</a><br>')
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines)


def project_json(project: str, dists: list[Dist], to_root: str | None, base_url: str | None,
                 legacy_keys: bool = False, links: Iterable[Link] = ()) -> str:
    files = []
    for d in dists:
        f: dict = {"filename": d.filename, "url": file_url(d, to_root, base_url),
                   "hashes": {"sha256": d.sha256}, "size": d.size}
        if d.requires_python:
            f["requires-python"] = d.requires_python
        if d.metadata_sha256:
            f["core-metadata"] = {"sha256": d.metadata_sha256}
            if legacy_keys:
                f["dist-info-metadata"] = f["core-metadata"]
        files.append(f)
    files += [{"filename": link.filename, "url": link.url, "hashes": {"sha256": link.sha256}, "size": link.size}
              for link in links]
    versions = sorted({canonical_version(d.version) for d in dists})
    return json.dumps({"meta": {"api-version": API_VERSION}, "name": project,
                       "versions": versions, "files": files}, indent=1) + "\n"


def root_html(projects: list[str]) -> str:
    links = [f'<a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in projects]
    return "\n".join(["<!DOCTYPE html>", "<html>", "<head>",
                      '<meta name="pypi:repository-version" content="1.1">',
                      "<title>Simple index</title>", "</head>", "<body>", *links,
                      "</body>", "</html>", ""])


def root_json(projects: list[str]) -> str:
    return json.dumps({"meta": {"api-version": API_VERSION},
                       "projects": [{"name": p} for p in projects]}, indent=1) + "\n"


def render(dists: list[Dist], to_root: str | None, base_url: str | None,
           legacy_keys: bool = False, links: dict[str, list[Link]] | None = None, prefix: str = "") -> dict[str, str]:
    """All pages, as {path relative to OUT: text}. to_root: from a project page's directory to DIR.
    `links`: per project, further files to link; `prefix`: a root below OUT (`cu130/`)."""
    links = links or {}
    by_project: dict[str, list[Dist]] = {p: [] for p in links}
    for d in sorted(dists, key=lambda d: (d.project, d.filename)):
        by_project.setdefault(d.project, []).append(d)
    names = sorted(by_project)
    pages = {f"{prefix}index.html": root_html(names), f"{prefix}index.json": root_json(names)}
    for project in names:
        ds, extra = by_project[project], links.get(project, [])
        pages[f"{prefix}{project}/index.html"] = project_html(project, ds, to_root, base_url, legacy_keys, extra)
        pages[f"{prefix}{project}/index.json"] = project_json(project, ds, to_root, base_url, legacy_keys, extra)
    return pages


# ---------------------------------------------------------------- wheel variants (pure)


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
    from wheelci.wheel import variant as v

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
    for d in wheels:
        label = None if d.variant else v.root_label(d.version)
        if label:
            plan.roots.setdefault(label, []).append(d)
    return plan


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


# ---------------------------------------------------------------- the stage


def warn(msg: str) -> None:
    from wheelci.cli import shown
    log.warning(shown(msg))


def _differs(path: Path, data: bytes) -> bool:
    try:
        return not (path.stat().st_size == len(data) and path.read_bytes() == data)
    except OSError:
        return True


def _write_if_changed(path: Path, data: bytes) -> bool:
    if not _differs(path, data):
        return False
    from wheelci.util.atomic import atomic_path  # tempfile & co. load only when something is written
    with atomic_path(path) as tmp:  # gives the pages open()'s mode: a web server must read them
        tmp.write_bytes(data)
    return True


def foreign(path: Path, data: bytes, owned: bool) -> bool:
    """Something we did not write, with other bytes, sits where we must write: not ours to replace."""
    return not owned and (path.exists() or path.is_symlink()) and (not path.is_file() or _differs(path, data))


def build_index(root: Path | str, out: Path | str | None = None, base_url: str | None = None,
                jobs: int | None = None, legacy_keys: bool = False) -> IndexResult:
    """Index root's distributions into out (default root/simple). Raises CiError on bad input.

    In phases, so that bad input leaves the output as it was: read (the cache, then hashing what it
    cannot vouch for), plan (the pages and .metadata files), refuse (paths that lead out, files that are
    not ours), and only then write, ownership first."""
    root = Path(root)
    if not root.is_dir():
        raise CiError(f"not a directory: {root}")
    out = Path(out) if out is not None else root / "simple"
    if out.exists() and not out.is_dir():
        raise CiError(f"--out is not a directory: {out}")
    if base_url is not None and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", base_url):
        raise CiError(f"--base-url must be an absolute URL (https://..., file://...): {base_url}")
    from wheelci.util.atomic import make_dirs, remove_empty
    from wheelci.util.lock import locked_dirs

    try:
        made = make_dirs(out)  # to lock it; removed again (when empty) if the run fails
    except OSError as e:
        raise CiError(f"cannot create --out {out}: {e.strerror}") from None
    try:
        # One run at a time on DIR (its .metadata files) and OUT (the pages, the ownership list): two
        # interleaved runs each write the root page and the cache from what they read, losing projects.
        with locked_dirs([root, out], "the index"):
            return _index_locked(root, out, base_url, jobs, legacy_keys)
    except BaseException:
        remove_empty(made)
        raise


def _index_locked(root: Path, out: Path, base_url: str | None, jobs: int | None,
                  legacy_keys: bool) -> IndexResult:
    """build_index's read-modify-write, done while it holds the lock."""
    # From OUT/<project>/ back to DIR, for relative links.
    to_root = None if base_url else Path(os.path.relpath(root.resolve(), (out / "p").resolve())).as_posix()

    found, skipped = scan(root, out)
    for rel in skipped:
        warn(f"skipping {rel}: not a wheel or sdist")

    cache_path = out / CACHE_NAME
    cache = load_cache(cache_path)
    if root.resolve() == out.resolve():  # --out DIR: the variants files this command wrote are not input
        found = {rel: f for rel, f in found.items() if rel not in cache.pages}
    read = _read_dists(root, found, cache, jobs)
    chosen = _unique(read.dists)
    pages, projects = _plan_pages(chosen, root, out, to_root, base_url, legacy_keys)

    # Everything to write, known before anything is written; refuse to replace what is not ours.
    sidecars = _sidecars(root, chosen, read)
    _refuse_unsafe(root, out, cache, pages, sidecars)

    result = IndexResult(out=str(out), projects=len(projects),
                         files=len(chosen), hashed=read.hashed, cached=len(found) - read.hashed,
                         skipped=skipped)
    records = {d.path: {"key": cache_key(found[d.path][3]), "seen": read.seen[d.path], "dist": asdict(d)}
               for d in read.dists.values()}
    result.written, result.removed = _write_owned(root, out, cache, pages, sidecars, records)
    return result


@dataclass
class _Read:
    """What build_index knows of each distribution found: its record, when it was hashed (for the
    cache's racy-timestamp check), and the METADATA of the wheels read this run (to write beside them)."""

    dists: dict[str, Dist] = field(default_factory=dict)  # rel path -> record
    seen: dict[str, int] = field(default_factory=dict)  # rel path -> time_ns before it was hashed
    metadata: dict[str, bytes] = field(default_factory=dict)
    hashed: int = 0  # files read this run


def _read_dists(root: Path, found: dict[str, tuple[str, str, str, os.stat_result]], cache: Cache,
                jobs: int | None) -> _Read:
    """Records from the cache where it can vouch for the file; the rest hashed and read in threads."""
    import time

    read = _Read()
    todo: list[str] = []
    for rel, (kind, project, version, st) in found.items():
        hit = cache.files.get(rel)
        if trusted(hit, st) and (cached := _cached_dist(hit, rel)) is not None:
            read.dists[rel] = cached
            read.seen[rel] = hit["seen"]
        else:
            todo.append(rel)
    read.hashed = len(todo)
    if todo:
        from concurrent.futures import ThreadPoolExecutor
        workers = jobs or min(8, os.cpu_count() or 1)
        # Biggest first, so one huge wheel does not start last and run alone.
        todo.sort(key=lambda r: -found[r][3].st_size)
        started = time.time_ns()  # before any read: a change after this is never trusted
        with ThreadPoolExecutor(max_workers=workers) as pool:  # hashlib releases the GIL
            for rel, (d, raw) in zip(todo, pool.map(lambda r: read_dist(root, r, *found[r]), todo)):
                read.dists[rel] = d
                read.seen[rel] = started
                if raw is not None:
                    read.metadata[rel] = raw
    return read


def _unique(dists: dict[str, Dist]) -> list[Dist]:
    """One record per file name (e.g. the same wheel under two subdirectories): fine if identical,
    the first path kept; two different files under one name are refused, as no index can serve both."""
    by_name: dict[str, Dist] = {}
    for rel in sorted(dists):
        d = dists[rel]
        prev = by_name.get(d.filename)
        if prev is None:
            by_name[d.filename] = d
        elif prev.sha256 != d.sha256:
            raise CiError(f"two different files named {d.filename}: {prev.path} and {d.path}")
        else:
            warn(f"{d.path} duplicates {prev.path}; indexing {prev.path}")
    return list(by_name.values())


def _plan_pages(chosen: list[Dist], root: Path, out: Path, to_root: str | None, base_url: str | None,
                legacy_keys: bool) -> tuple[dict[str, str], set[str]]:
    """Every page and variants file to write ({path relative to OUT: text}) and the projects on the
    main pages: the project pages, then what the variant wheels add (see plan_variants)."""
    given = [d for d in chosen if d.filename.endswith(FILE_SUFFIX)]
    dists_only = [d for d in chosen if not d.filename.endswith(FILE_SUFFIX)]
    variants = plan_variants(dists_only, given, to_root, base_url)
    for note in variants.notes:
        warn(note)
    main_dists = [d for d in dists_only if d.filename not in variants.hidden]
    projects = {d.project for d in main_dists} | set(variants.links)
    pages = render(main_dists, to_root, base_url, legacy_keys, variants.links)
    pages.update(variants.files)
    pages.update(render_roots(variants.roots, root, out, base_url, legacy_keys, projects))
    return pages, projects


def _sidecars(root: Path, chosen: list[Dist], read: _Read) -> dict[str, bytes | None]:
    """The PEP 658 files beside the wheels: {path relative to DIR: bytes to write, or b"" when the one
    there is right}. A cached wheel's METADATA is read again only when its file is missing or stale."""
    from wheelci.wheel.metadata import METADATA_CAP
    from wheelci.wheel.ondisk import read_regular

    sidecars: dict[str, bytes | None] = {}  # rel to DIR -> bytes (None: cached, read only if needed)
    for d in chosen:
        if d.metadata_sha256 is not None:
            sidecars[f"{d.path}.metadata"] = read.metadata.get(d.path)
    for rel, raw in list(sidecars.items()):
        path = root / rel
        if raw is None:
            try:
                # a regular file, size-bounded (ci.wheel.ondisk): a FIFO or a link to /dev/zero is refused
                ok = (hashlib.sha256(read_regular(path, METADATA_CAP)).hexdigest()
                      == read.dists[rel[: -len(".metadata")]].metadata_sha256)
            except OSError:
                ok = False
            if ok:
                sidecars[rel] = b""  # present and right: nothing to write
                continue
            sidecars[rel] = wheel_metadata(root / rel[: -len(".metadata")])
    return sidecars


def _refuse_unsafe(root: Path, out: Path, cache: Cache, pages: dict[str, str],
                   sidecars: dict[str, bytes | None]) -> None:
    """CiError, before any write, for a path a symlinked directory leads out of OUT or DIR, and for a
    file there that this command did not write and would replace with other bytes."""
    escapes = [(root / rel, root) for rel, raw in sidecars.items() if raw and not inside(root, rel)]
    escapes += [(out / rel, out) for rel in pages if not inside(out, rel)]
    if escapes:
        path, base = escapes[0]
        more = f" and {len(escapes) - 1} more" if len(escapes) > 1 else ""
        raise CiError(f"refusing to write {path.as_posix()!r}{more}: a symlinked directory leads it out of {base}")
    blocked = sorted({parent.as_posix() for base, rels in ((out, pages), (root, [r for r, raw in sidecars.items() if raw]))
                      for rel in rels for parent in (base / rel).parents
                      if parent != base and base in parent.parents and parent.exists() and not parent.is_dir()})
    if blocked:  # found now, not after half the pages are written
        raise CiError(f"refusing to write the index: {blocked[0]} is a file where a directory is needed "
                      "(move it away, or choose another --out)")
    clashes = [(root / rel).as_posix() for rel, raw in sidecars.items()
               if raw and foreign(root / rel, raw, rel in cache.metadata)]
    clashes += [(out / rel).as_posix() for rel, text in pages.items()
                if foreign(out / rel, text.encode(), rel in cache.pages)]
    if clashes:
        more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
        raise CiError(f"refusing to overwrite files ci.index did not write: {', '.join(clashes[:5])}{more} "
                      "(choose another --out, or move them away)")


def _write_owned(root: Path, out: Path, cache: Cache, pages: dict[str, str], sidecars: dict[str, bytes | None],
                 records: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Write what changed and remove what this command wrote before and no longer needs:
    (written, removed).

    Ownership first: what this run may write is listed (with what earlier runs own) before the first
    write, so a run cut short leaves nothing the next one refuses as foreign; and an --out that
    cannot be written fails here, before any .metadata file lands in DIR."""
    cache_path = out / CACHE_NAME
    written: list[str] = []
    owned_pages, owned_metadata = cache.pages | pages.keys(), cache.metadata | sidecars.keys()
    _write_cache(cache_path, owned_pages, owned_metadata, records)
    for rel, raw in sidecars.items():
        if raw and _write_if_changed(root / rel, raw):
            written.append(rel)
    for rel, text in pages.items():
        if _write_if_changed(out / rel, text.encode()):
            written.append((out / rel).as_posix())
    removed = _remove_stale(root, out, cache, pages, sidecars)
    if owned_pages != pages.keys() or owned_metadata != sidecars.keys():  # stale files were removed
        _write_cache(cache_path, pages.keys(), sidecars.keys(), records)
    return written, removed


def _write_cache(path: Path, pages: Iterable[str], metadata: Iterable[str], files: dict[str, dict]) -> None:
    """The cache, written atomically: the files this command owns and its per-file records."""
    _write_if_changed(path, json.dumps({"version": CACHE_VERSION, "pages": sorted(pages),
                                        "metadata": sorted(metadata), "files": files}, sort_keys=True).encode())


def _remove_stale(root: Path, out: Path, cache: Cache, pages: dict[str, str],
                  sidecars: dict[str, bytes | None]) -> list[str]:
    """Remove what an earlier run wrote and this one did not: pages of projects that are gone and
    .metadata files whose wheel is gone. Nothing else is touched; a directory goes only when empty."""
    removed = []
    for rel in sorted(cache.pages - pages.keys()):
        if not (_page_name(rel) and inside(out, rel)):
            warn(f"not removing {rel!r}, listed in the cache: not a page inside {out}")
            continue
        if _unlink(out / rel):
            removed.append((out / rel).as_posix())
        parent = (out / rel).parent
        if parent != out:
            with contextlib.suppress(OSError):
                parent.rmdir()  # only succeeds when empty
    for rel in sorted(cache.metadata - sidecars.keys()):
        if not (rel.endswith(".metadata") and inside(root, rel)):
            warn(f"not removing {rel!r}, listed in the cache: not a .metadata file inside {root}")
            continue
        if _unlink(root / rel):
            removed.append(rel)
    return removed


def _page_name(rel: str) -> bool:
    """The shape of what build_index writes: index.html|json at the top, one project directory down or
    in a root's project directory (`cu130/<project>/`), and variants files in a project directory."""
    parts = rel.split("/")
    return (len(parts) <= 3 and parts[-1] in PAGE_NAMES) or (len(parts) == 2 and parts[1].endswith(FILE_SUFFIX))


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def main(args: argparse.Namespace) -> int:
    result = build_index(args.dir, args.out, args.base_url, args.jobs, args.legacy_metadata_keys)
    if args.json:
        from wheelci.cli import emit_json
        emit_json(asdict(result))
    else:
        print(f"indexed {result.files} files in {result.projects} projects into {result.out} "
              f"({result.hashed} read, {result.cached} cached, {len(result.written)} written, "
              f"{len(result.removed)} removed, {len(result.skipped)} skipped)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from wheelci.cli import parser
    p = parser("ci.index", "Write a static PEP 503/658/691 simple index for the wheels and sdists "
                           "in DIR (incremental; pip, uv and rules_python read it).")
    p.add_argument("dir", metavar="DIR", type=Path, help="directory holding the distributions (searched recursively)")
    p.add_argument("--out", metavar="DIR", type=Path, help="where the pages go (default: DIR/simple)")
    p.add_argument("--base-url", metavar="URL",
                   help="absolute URL where DIR is served; default: links relative to the pages")
    p.add_argument("-j", "--jobs", type=int, default=None, help="hashing threads (default: cores, max 8)")
    p.add_argument("--legacy-metadata-keys", action="store_true",
                   help="also announce metadata with the pre-PEP 714 keys (data-dist-info-metadata); "
                        "pip 22.3-23.1 mishandle them, so only for a client that needs them")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


if __name__ == "__main__":
    from wheelci.cli import run
    run(build_parser(), main)
