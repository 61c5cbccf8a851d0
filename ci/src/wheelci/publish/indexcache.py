"""ci.index's cache file, OUT/.ci-index-cache.json: per distribution its stat key and record, so a
re-run on an unchanged directory stats the files and reads none of them; and the list of every page
and `.metadata` file the command wrote, the only files it ever replaces or removes (see ownedfiles).

Apart from the reading it saves because it decides what may be believed: a record is reused only for
the same size, mtime, inode, device and ctime, and only when the file was not changed within one
timestamp tick of being hashed (`trusted`); a cache file found on disk travels with a copied dist/, so
it is input like any other (`load_cache`, `cached_dist`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from wheelci.errors import CiError
from wheelci.publish.distread import Dist
from wheelci.util.invocation import command

CACHE_NAME = ".ci-index-cache.json"
CACHE_VERSION = 2  # 2: ownership of written files, and the stronger cache key
# A file changed within this long of being hashed may have changed again in the same timestamp tick.
RACY_NS = 100_000_000


@dataclass
class Cache:
    """What the last run knew: per distribution its key and record; the files it wrote."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)
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
        raise CiError(f"{path} is not a {command('index')} cache file; refusing to overwrite it") from None
    if data["version"] != CACHE_VERSION:
        return Cache()  # an older format: hash again, and own only what is byte-identical
    files, pages, meta = data.get("files"), data.get("pages"), data.get("metadata")
    if not (isinstance(files, dict) and isinstance(pages, list) and isinstance(meta, list)):
        return Cache()
    return Cache(files, set(map(str, pages)), set(map(str, meta)))


def cached_dist(hit: dict[str, Any], rel: str) -> Dist | None:
    """The cached record, only when it describes the file at rel (its path decides where the
    .metadata file goes: the cache travels with a copied dist/, so it is input like any other)."""
    try:
        d = Dist(**hit["dist"])
    except (TypeError, KeyError):
        return None
    return d if d.path == rel else None


def cache_key(st: os.stat_result) -> list[int]:
    """Any write changes ctime, and a replaced file has another inode, even when size and mtime match."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns]


def trusted(hit: dict[str, Any] | None, st: os.stat_result) -> TypeGuard[dict[str, Any]]:
    """Reuse a cached hash only for the same key, and only when the file was not changed so close to
    the moment it was hashed that a second change could share its timestamp."""
    return (isinstance(hit, dict) and hit.get("key") == cache_key(st)
            and isinstance(hit.get("seen"), int) and st.st_ctime_ns < hit["seen"] - RACY_NS)
