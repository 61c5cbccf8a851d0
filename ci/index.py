"""Static simple repository for a directory of wheels and sdists: `python -m ci.index DIR`.

What pip, uv and Bazel's rules_python read from a static index, all of it, written without a server:
PEP 503 HTML (double-quoted attributes: rules_python's parser needs them), `#sha256=` fragments,
`data-requires-python`, PEP 658/714 core metadata (`FILE.metadata` beside each wheel, announced by both
`data-dist-info-metadata` and `data-core-metadata`) and PEP 691/700 JSON pages (`index.json`).

Layout: distributions stay where they are (DIR, searched recursively); pages go to OUT (default
DIR/simple), one `OUT/<project>/index.html` + `index.json` each, linking to the files by relative path
or under --base-url. The `.metadata` files go beside the wheels, because PEP 658 puts them at the file's
URL + ".metadata".

Incremental: a file's sha256 and metadata are cached in OUT/.ci-index-cache.json, keyed by size and
mtime, so re-running on an unchanged directory stats the files and rewrites nothing. Everything is
computed before anything is written, so bad input leaves the output as it was; each write is atomic.
Stdlib only; the zip/tar/email/thread modules load only when a file must be read, which keeps the
unchanged re-run near interpreter start-up time.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import posixpath
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import quote

from ci.errors import CiError
from ci.wheelname import WheelName, normalize

CACHE_NAME = ".ci-index-cache.json"
CACHE_VERSION = 1
API_VERSION = "1.1"  # PEP 700: versions + size
# Sdist suffixes pip accepts; legacy ones without metadata files (pip only reads wheel metadata).
SDIST_SUFFIXES = (".tar.gz", ".zip")
# Sidecar files beside distributions that are ours or expected there: skipped without a warning.
QUIET_SUFFIXES = (".metadata", ".asc", ".sig", ".publish.attestation")
_CHUNK = 1 << 20


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


# ---------------------------------------------------------------- names


def sdist_name(filename: str) -> tuple[str, str] | None:
    """(project, version) of an sdist file name, or None. Names may hold dashes in legacy sdists."""
    for suffix in SDIST_SUFFIXES:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            name, sep, version = stem.rpartition("-")
            if sep and name and version[:1].isdigit():
                return normalize(name), version
    return None


def classify(filename: str) -> tuple[str, str, str] | None:
    """('wheel'|'sdist', project, version) or None for a file that is not a distribution."""
    if filename.endswith(".whl"):
        try:
            w = WheelName.parse(filename)
        except CiError:
            return None
        return "wheel", w.project, w.version
    parsed = sdist_name(filename)
    return ("sdist", *parsed) if parsed else None


# ---------------------------------------------------------------- reading files


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def wheel_metadata(path: Path) -> bytes:
    """The bytes of a wheel's .dist-info/METADATA (the PEP 658 file is exactly these bytes)."""
    import zipfile
    w = WheelName.parse(path.name)
    try:
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist()
                     if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if not names:
                raise CiError(f"{path.name}: no .dist-info/METADATA in the wheel")
            wanted = [n for n in names
                      if normalize(n.split("-")[0]) == w.project] or names
            if len(wanted) > 1:
                raise CiError(f"{path.name}: more than one .dist-info/METADATA: {', '.join(wanted)}")
            return zf.read(wanted[0])
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise CiError(f"{path.name}: not a readable wheel ({e})") from None


def sdist_metadata(path: Path) -> bytes | None:
    """PKG-INFO of an sdist (top-level directory only), or None when it has none."""
    import tarfile
    import zipfile
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                for n in zf.namelist():
                    if n.count("/") == 1 and n.endswith("/PKG-INFO"):
                        return zf.read(n)
            return None
        with tarfile.open(path, "r:gz") as tf:
            for m in tf:
                if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"):
                    f = tf.extractfile(m)
                    return f.read() if f else None
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise CiError(f"{path.name}: not a readable sdist ({e})") from None
    return None


def parse_metadata(raw: bytes) -> dict[str, str]:
    """Name, Version and Requires-Python from core metadata (RFC 822 headers)."""
    from email.parser import HeaderParser
    msg = HeaderParser().parsestr(raw.decode("utf-8", "surrogateescape"))
    return {k: str(msg[k]).strip() for k in ("Name", "Version", "Requires-Python") if msg[k]}


def read_dist(root: Path, rel: str, kind: str, project: str, version: str,
              st: os.stat_result) -> tuple[Dist, bytes | None]:
    """Hash a file and read its metadata; checks the metadata agrees with the file name."""
    path = root / rel
    raw = wheel_metadata(path) if kind == "wheel" else sdist_metadata(path)
    meta = parse_metadata(raw) if raw else {}
    if kind == "wheel" and not {"Name", "Version"} <= meta.keys():
        raise CiError(f"{path.name}: METADATA lacks Name or Version")
    if "Name" in meta and normalize(meta["Name"]) != project:
        raise CiError(f"{path.name}: metadata names project {meta['Name']!r}, the file name {project!r}")
    if kind == "wheel" and meta["Version"] != version and normalize(meta["Version"]) != normalize(version):
        raise CiError(f"{path.name}: metadata version {meta['Version']} != file name version {version}")
    dist = Dist(
        filename=path.name, path=rel, project=project, version=version, size=st.st_size,
        sha256=sha256_file(path), requires_python=meta.get("Requires-Python"),
        metadata_sha256=hashlib.sha256(raw).hexdigest() if kind == "wheel" and raw else None)
    return dist, (raw if kind == "wheel" else None)


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
            if c is None:
                if not name.endswith(QUIET_SUFFIXES):
                    skipped.append(rel)
                continue
            found[rel] = (*c, (d / name).stat())
    return found, skipped


def load_cache(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def cache_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns]


# ---------------------------------------------------------------- rendering (pure)


def file_url(d: Dist, to_root: str | None, base_url: str | None) -> str:
    """Link to a file from its project page: under base_url, or relative (works over file:// and http).

    to_root: the relative path from a project page's directory to DIR (e.g. "../.." for DIR/simple/p/).
    """
    quoted = "/".join(quote(p) for p in d.path.split("/"))
    if base_url:
        return f"{base_url.rstrip('/')}/{quoted}"
    return posixpath.normpath(posixpath.join(to_root or ".", quoted))


def project_html(project: str, dists: list[Dist], to_root: str | None, base_url: str | None) -> str:
    lines = ["<!DOCTYPE html>", "<html>", "<head>",
             '<meta name="pypi:repository-version" content="1.1">',
             f"<title>Links for {html.escape(project)}</title>", "</head>", "<body>",
             f"<h1>Links for {html.escape(project)}</h1>"]
    for d in dists:
        attrs = [f'href="{html.escape(file_url(d, to_root, base_url))}#sha256={d.sha256}"']
        if d.requires_python:
            attrs.append(f'data-requires-python="{html.escape(d.requires_python)}"')
        if d.metadata_sha256:
            attrs.append(f'data-dist-info-metadata="sha256={d.metadata_sha256}"')
            attrs.append(f'data-core-metadata="sha256={d.metadata_sha256}"')
        lines.append(f"<a {' '.join(attrs)}>{html.escape(d.filename)}</a><br>")
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines)


def project_json(project: str, dists: list[Dist], to_root: str | None, base_url: str | None) -> str:
    files = []
    for d in dists:
        f: dict = {"filename": d.filename, "url": file_url(d, to_root, base_url),
                   "hashes": {"sha256": d.sha256}, "size": d.size}
        if d.requires_python:
            f["requires-python"] = d.requires_python
        if d.metadata_sha256:
            f["core-metadata"] = f["dist-info-metadata"] = {"sha256": d.metadata_sha256}
        files.append(f)
    versions = sorted({d.version for d in dists})
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


def render(dists: list[Dist], to_root: str | None, base_url: str | None) -> dict[str, str]:
    """All pages, as {path relative to OUT: text}. to_root: from a project page's directory to DIR."""
    by_project: dict[str, list[Dist]] = {}
    for d in sorted(dists, key=lambda d: (d.project, d.filename)):
        by_project.setdefault(d.project, []).append(d)
    pages = {"index.html": root_html(sorted(by_project)), "index.json": root_json(sorted(by_project))}
    for project, ds in by_project.items():
        pages[f"{project}/index.html"] = project_html(project, ds, to_root, base_url)
        pages[f"{project}/index.json"] = project_json(project, ds, to_root, base_url)
    return pages


# ---------------------------------------------------------------- the stage


def warn(msg: str) -> None:
    print(f"ci.index: warning: {msg}", file=sys.stderr)


def _write_if_changed(path: Path, data: bytes) -> bool:
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass
    from ci.atomic import atomic_path  # tempfile & co. load only when something is written
    with atomic_path(path) as tmp:  # gives the pages open()'s mode: a web server must read them
        tmp.write_bytes(data)
    return True


def build_index(root: Path | str, out: Path | str | None = None, base_url: str | None = None,
                jobs: int | None = None) -> IndexResult:
    """Index root's distributions into out (default root/simple). Raises CiError on bad input."""
    root = Path(root)
    if not root.is_dir():
        raise CiError(f"not a directory: {root}")
    out = Path(out) if out is not None else root / "simple"
    if out.exists() and not out.is_dir():
        raise CiError(f"--out is not a directory: {out}")
    if base_url is not None and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", base_url):
        raise CiError(f"--base-url must be an absolute URL (https://..., file://...): {base_url}")
    # From OUT/<project>/ back to DIR, for relative links.
    to_root = None if base_url else Path(os.path.relpath(root.resolve(), (out / "p").resolve())).as_posix()

    found, skipped = scan(root, out)
    for rel in skipped:
        warn(f"skipping {rel}: not a wheel or sdist")

    cache_path = out / CACHE_NAME
    cache = load_cache(cache_path)
    dists: dict[str, Dist] = {}
    todo: list[str] = []
    for rel, (kind, project, version, st) in found.items():
        hit = cache.get(rel)
        if hit and hit.get("key") == cache_key(st):
            dists[rel] = Dist(**hit["dist"])
        else:
            todo.append(rel)

    metadata: dict[str, bytes] = {}
    if todo:
        from concurrent.futures import ThreadPoolExecutor
        workers = jobs or min(8, os.cpu_count() or 1)
        # Biggest first, so one huge wheel does not start last and run alone.
        todo.sort(key=lambda r: -found[r][3].st_size)
        with ThreadPoolExecutor(max_workers=workers) as pool:  # hashlib releases the GIL
            for rel, (d, raw) in zip(todo, pool.map(lambda r: read_dist(root, r, *found[r]), todo)):
                dists[rel] = d
                if raw is not None:
                    metadata[rel] = raw

    # Same file name twice (e.g. the same wheel under two subdirectories): fine if identical.
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
    chosen = list(by_name.values())

    pages = render(chosen, to_root, base_url)

    # Everything is known; now write.
    result = IndexResult(out=str(out), projects=sum(1 for p in pages if p.endswith("/index.html")),
                         files=len(chosen), hashed=len(todo), cached=len(found) - len(todo),
                         skipped=skipped)
    for d in chosen:
        meta_path = root / f"{d.path}.metadata"
        if d.metadata_sha256 is None:
            continue
        raw = metadata.get(d.path)
        if raw is None:  # cached: rewrite only if the sidecar went missing or changed
            try:
                ok = hashlib.sha256(meta_path.read_bytes()).hexdigest() == d.metadata_sha256
            except OSError:
                ok = False
            if ok:
                continue
            raw = wheel_metadata(root / d.path)
        if _write_if_changed(meta_path, raw):
            result.written.append(meta_path.relative_to(root).as_posix())
    for rel, text in pages.items():
        if _write_if_changed(out / rel, text.encode()):
            result.written.append((out / rel).as_posix())
    result.removed = _remove_stale(root, out, found, pages)
    _write_if_changed(cache_path, json.dumps({
        "version": CACHE_VERSION,
        "files": {d.path: {"key": cache_key(found[d.path][3]), "dist": asdict(d)}
                  for d in dists.values()}}, sort_keys=True).encode())
    return result


def _remove_stale(root: Path, out: Path, found: dict, pages: dict[str, str]) -> list[str]:
    """Drop pages of projects that are gone and .metadata files whose wheel is gone (ours only)."""
    removed = []
    if out.is_dir():
        for d in sorted(out.iterdir()):
            if d.is_dir() and f"{d.name}/index.html" not in pages:
                ours = {"index.html", "index.json"}
                if {p.name for p in d.iterdir()} <= ours:
                    for name in ours:
                        if (d / name).exists():
                            (d / name).unlink()
                    d.rmdir()
                    removed.append(d.as_posix())
    for dirpath, dirnames, filenames in os.walk(root):
        dp = Path(dirpath)
        dirnames[:] = [n for n in dirnames if not n.startswith(".") and (dp / n).resolve() != out.resolve()]
        for name in filenames:
            if name.endswith(".whl.metadata"):
                rel = (dp / name).relative_to(root).as_posix()
                if rel[: -len(".metadata")] not in found:
                    (dp / name).unlink()
                    removed.append(rel)
    return removed


def main(args: argparse.Namespace) -> int:
    result = build_index(args.dir, args.out, args.base_url, args.jobs)
    if args.json:
        from ci.cli import emit_json
        emit_json(asdict(result))
    else:
        print(f"indexed {result.files} files in {result.projects} projects into {result.out} "
              f"({result.hashed} read, {result.cached} cached, {len(result.written)} written, "
              f"{len(result.removed)} removed, {len(result.skipped)} skipped)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from ci.cli import parser
    p = parser("ci.index", "Write a static PEP 503/658/691 simple index for the wheels and sdists "
                           "in DIR (incremental; pip, uv and rules_python read it).")
    p.add_argument("dir", metavar="DIR", help="directory holding the distributions (searched recursively)")
    p.add_argument("--out", metavar="DIR", help="where the pages go (default: DIR/simple)")
    p.add_argument("--base-url", metavar="URL",
                   help="absolute URL where DIR is served; default: links relative to the pages")
    p.add_argument("-j", "--jobs", type=int, default=None, help="hashing threads (default: cores, max 8)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


if __name__ == "__main__":
    from ci.cli import run
    run(build_parser(), main)
