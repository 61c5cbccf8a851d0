"""Cache: what the tool's cache holds, and pruning it to a size.

    python -m ci.cache [show] [--json]
    python -m ci.cache prune [--max-size SIZE] [--json]

`show` lists each entry a prune may remove (kept build trees, build environments, verify's layers of test
requirements) with its size, when a build last used it and whether one holds it now, and the other
directories of the cache, which have bounds of their own or are small. `prune` removes entries, least
recently used first, until the cache holds at most SIZE (default $WHEELCI_CACHE_MAX_SIZE, else 20 GiB,
the cap every build applies at its end); an entry a running build holds is skipped (wheelci.util.cache).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from wheelci.util import cache
from wheelci.util.sizes import format_size
from wheelci.util.untrusted import one_line
from wheelci.util.output import emit_json


def when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ns / 1e9)) if ns else "never"


def entry_json(e: cache.Entry) -> dict[str, Any]:
    return {"kind": e.kind, "name": e.name, "path": str(e.path), "size": e.size, "last_used": when(e.last_used_ns),
            "last_used_ns": e.last_used_ns, "in_use": e.in_use}


def others(root: Path) -> dict[str, int]:
    """The cache's other directories (ccache, downloads, metadata) and their sizes: never pruned here."""
    skip = {*cache.KINDS, cache.ASIDE}
    found = {}
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if path.name not in skip and path.is_dir() and not path.is_symlink():
            found[path.name] = sum(cache.disk_usage(path).values())
    return found


def show(root: Path, cap: int | None, as_json: bool) -> int:
    entries = cache.scan(root)
    total, rest = cache.total_size(entries), others(root)
    if as_json:
        emit_json({"root": str(root), "entries": [entry_json(e) for e in entries], "total": total,
                       "max_size": cap, "others": rest})
        return 0
    print(f"cache: {root}")
    rows = [(e.kind, one_line(e.name), format_size(e.size), when(e.last_used_ns), "in use" if e.in_use else "")
            for e in sorted(entries, key=lambda e: (e.kind, -e.last_used_ns))]
    header = ("kind", "entry", "size", "last used", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4])
    shown_cap = format_size(cap) if cap is not None else f"none (${cache.MAX_SIZE_VARIABLE})"
    print(f"total: {format_size(total)} in {len(entries)} entries (a file several share counted once); "
          f"cap {shown_cap}")
    if rest:
        print("not pruned: " + ", ".join(f"{one_line(name)} {format_size(size)}" for name, size in rest.items()))
    return 0


def prune(root: Path, cap: int, as_json: bool) -> int:
    pruned = cache.prune(root, cap)
    if as_json:
        emit_json({"root": str(root), "max_size": cap, "before": pruned.before, "after": pruned.after,
                       "removed": [entry_json(e) for e in pruned.removed],
                       "in_use": [entry_json(e) for e in pruned.in_use]})
        return 0
    for e in pruned.removed:
        print(f"removed {e.kind}/{one_line(e.name)} ({format_size(e.size)}, last used {when(e.last_used_ns)})")
    for e in pruned.in_use:
        print(f"kept {e.kind}/{one_line(e.name)} ({format_size(e.size)}): in use by a running build")
    over = " (still over: the rest is in use)" if pruned.after > cap else ""
    print(f"cache: {format_size(pruned.before)} -> {format_size(pruned.after)}, cap {format_size(cap)}{over}")
    return 0


if __name__ == "__main__":  # `python -m wheelci.cache` (`python -m ci.cache` here): the command line runs it
    import runpy

    runpy.run_module("wheelci.commands.cache", run_name="__main__")
