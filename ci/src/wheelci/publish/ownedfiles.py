"""What ci.index writes and removes, and only that. OUT may be shared with other content (a docs site
beside the pages): the cache lists every page and `.metadata` file this command wrote, and only those
are ever replaced or removed.

Its own module because every write goes through these checks: all paths are checked before the first
write (`refuse_unsafe`: nothing written through a symlinked directory leading out of OUT or DIR, no
file there that is not ours replaced); ownership is written first (`write_owned`), so a run cut short
leaves only files the next run knows as its own; each write is atomic; a page or `.metadata` file the
cache lists is removed only when it has the shape of one and lies inside OUT or DIR.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterable

from wheelci.errors import CiError
from wheelci.publish.distread import PAGE_NAMES
from wheelci.publish.indexcache import Cache, CACHE_NAME, CACHE_VERSION
from wheelci.util import log
from wheelci.util.atomic import atomic_path
from wheelci.util.invocation import command
from wheelci.util.output import shown
from wheelci.wheel.variant import FILE_SUFFIX


def warn(msg: str) -> None:
    log.warning(shown(msg))


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


def _differs(path: Path, data: bytes) -> bool:
    try:
        return not (path.stat().st_size == len(data) and path.read_bytes() == data)
    except OSError:
        return True


def _write_if_changed(path: Path, data: bytes) -> bool:
    if not _differs(path, data):
        return False
    with atomic_path(path) as tmp:  # gives the pages open()'s mode: a web server must read them
        tmp.write_bytes(data)
    return True


def foreign(path: Path, data: bytes, owned: bool) -> bool:
    """Something we did not write, with other bytes, sits where we must write: not ours to replace."""
    return not owned and (path.exists() or path.is_symlink()) and (not path.is_file() or _differs(path, data))


def refuse_unsafe(root: Path, out: Path, cache: Cache, pages: dict[str, str],
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
        raise CiError(f"refusing to overwrite files {command('index')} did not write: {', '.join(clashes[:5])}{more} "
                      "(choose another --out, or move them away)")


def write_owned(root: Path, out: Path, cache: Cache, pages: dict[str, str], sidecars: dict[str, bytes | None],
                records: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
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


def _write_cache(path: Path, pages: Iterable[str], metadata: Iterable[str], files: dict[str, dict[str, Any]]) -> None:
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
