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

import hashlib
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wheelci.errors import CiError
from wheelci.publish.distread import Dist, read_dist, scan, wheel_metadata
from wheelci.publish.indexcache import Cache, CACHE_NAME, cache_key, cached_dist, load_cache, trusted
from wheelci.publish.ownedfiles import refuse_unsafe, warn, write_owned
from wheelci.publish.pages import render
from wheelci.publish.variantplan import plan_variants, render_roots
from wheelci.util.owned import output_dir
from wheelci.wheel.metadata import METADATA_CAP
from wheelci.wheel.ondisk import read_regular
from wheelci.wheel.variant import FILE_SUFFIX


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


# ---------------------------------------------------------------- the stage


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

    # One run at a time on DIR (its .metadata files) and OUT (the pages, the ownership list): two
    # interleaved runs each write the root page and the cache from what they read, losing projects. An
    # --out this run made goes again (when empty) if the run fails.
    with output_dir(out, "--out", also_lock=[root], using="the index"):
        return _index_locked(root, out, base_url, jobs, legacy_keys)


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
    refuse_unsafe(root, out, cache, pages, sidecars)

    result = IndexResult(out=str(out), projects=len(projects),
                         files=len(chosen), hashed=read.hashed, cached=len(found) - read.hashed,
                         skipped=skipped)
    records = {d.path: {"key": cache_key(found[d.path][3]), "seen": read.seen[d.path], "dist": asdict(d)}
               for d in read.dists.values()}
    result.written, result.removed = write_owned(root, out, cache, pages, sidecars, records)
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
    read = _Read()
    todo: list[str] = []
    for rel, (kind, project, version, st) in found.items():
        hit = cache.files.get(rel)
        if trusted(hit, st) and (cached := cached_dist(hit, rel)) is not None:
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


if __name__ == "__main__":  # `python -m wheelci.index` (`python -m ci.index` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.index", run_name="__main__")
