"""The one cache directory every stage and test shares: build envs, downloaded wheels, ccache; and its bound.

$WHEELCI_CACHE_DIR (formerly $CUDA_WHEEL_CI_CACHE), else $XDG_CACHE_HOME/cuda-wheel-ci, else ~/.cache/cuda-wheel-ci. Kept outside
the checkout so a fresh clone (and CI on the same machine) reuses the ~3 GB CUDA environment.

What a build remakes when it is missing (KINDS: kept build trees, build environments, verify's layers of
test requirements) is pruned least recently used first down to a size (`wheelci cache prune`, and every
build when the cache is over the cap). "Last used" is a stamp a build writes in the entry (USED, with the
entry's size then), not the atime, which most mounts do not keep. An entry a running build holds (its
tree exclusively, its environments and layers shared: wheelci.util.lock) is never taken: the prune locks
without waiting and skips what it cannot lock. An entry is renamed aside whole before it is removed, so
an interrupted prune leaves at its name either the entry or nothing, and its leftovers are removed by
the next prune.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from wheelci.errors import CiError
from wheelci.util import layout, variables

KINDS = layout.prunable()  # what a prune may remove: what a build remakes when missing (wheelci.util.layout)
USED = ".wheelci-used"  # in an entry: written when a build uses it (its time) with the entry's size
ASIDE_MARK = ".wheelci-pruning"  # in an entry renamed aside by remove_entry
ASIDE = ".pruning"  # in the cache: entries renamed out of their kind, being removed
MAX_SIZE_VARIABLE = variables.CACHE_MAX_SIZE
DEFAULT_MAX_SIZE = 20 * 2**30


def cache_dir(*parts: str, env: Mapping[str, str] | None = None) -> Path:
    """A path in the cache; `env` is the environment to read (default: this process's)."""
    env = os.environ if env is None else env
    base = variables.read(env, variables.CACHE_DIR)
    root = Path(base) if base else Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cuda-wheel-ci"
    return root.expanduser().joinpath(*parts)


def max_size(env: Mapping[str, str]) -> int | None:
    """The cap a build keeps the cache under: $WHEELCI_CACHE_MAX_SIZE (a size, or `none`: never pruned by a
    build), else DEFAULT_MAX_SIZE."""
    from wheelci.util.sizes import parse_size

    text = env.get(MAX_SIZE_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_SIZE
    if text.lower() == "none":
        return None
    try:
        return parse_size(text)
    except CiError as e:
        raise CiError(f"{MAX_SIZE_VARIABLE}: {e}") from None


@dataclass(frozen=True)
class Entry:
    """One removable entry of the cache, as a scan found it."""

    kind: str
    name: str
    path: Path
    size: int  # bytes on disk; a file hard-linked into other entries too is counted in each
    last_used_ns: int  # its USED stamp's time, else (made before stamps) its directory's
    in_use: bool  # a running build holds it
    blocks: Mapping[tuple[int, int], int] = field(default_factory=dict, compare=False, repr=False)  # inode -> bytes


def disk_usage(path: Path) -> dict[tuple[int, int], int]:
    """Bytes on disk of everything under path (links not followed), by inode: hard links count once."""
    found: dict[tuple[int, int], int] = {}
    pending = [str(path)]
    while pending:
        where = pending.pop()
        try:
            st = os.lstat(where)
        except OSError:
            continue  # removed while walked
        found[(st.st_dev, st.st_ino)] = st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                pending += [os.path.join(where, name) for name in os.listdir(where)]
    return found


def mark_used(entry: Path, *, measure: bool = True) -> None:
    """Stamp a cache entry a build uses now: the time, and its size (what a build's cheap check sums).
    measure=False keeps the size the stamp recorded, where it has one: for entries that do not change
    once made (an environment, a layer), so using one costs no walk of its files."""
    from wheelci.util.atomic import write_text

    if entry.is_dir() and not entry.is_symlink():
        size = None if measure else _stamped_size(entry)
        size = sum(disk_usage(entry).values()) if size is None else size
        write_text(entry / USED, json.dumps({"size": size}))


def read_stamp(path: Path, cap: int = 1 << 16) -> bytes:
    """A cache file's bytes (a stamp, a record, a cached release): a regular file, not a link, at most cap
    bytes (OSError otherwise). Every read of a cache file goes through here: a FIFO planted in its place
    never blocks a build or a plan, a link never reads another file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise OSError(f"{path}: not a stamp")
        chunks, left = [], cap
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_small_regular = read_stamp


def _stamped_size(entry: Path) -> int | None:
    try:
        size = json.loads(_small_regular(entry / USED)).get("size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and size >= 0 else None


def recorded_size(entry: Path) -> int:
    """The size the entry's stamp recorded; else (made before stamps) measured, and recorded in a stamp
    dated as the entry is, so the next build reads it instead of walking the entry again."""
    from wheelci.util.atomic import atomic_path

    size = _stamped_size(entry)
    if size is not None:
        return size
    when = _used_ns(entry)
    size = sum(disk_usage(entry).values())
    with contextlib.suppress(OSError), atomic_path(entry / USED) as tmp:
        tmp.write_text(json.dumps({"size": size}))
        os.utime(tmp, ns=(when, when))
    return size


def real_dir(path: Path) -> bool:
    """A directory itself, not a link to one."""
    return path.is_dir() and not path.is_symlink()


# What makes a directory under a kind the tool's own entry: the stamp a build writes when it uses one
# (USED), or what the tool writes in one it makes (an environment's or a layer's completion stamp, a kept
# build tree's record and mark), a regular file each. Anything else there is someone else's: never
# listed, measured, stamped or removed.
MARKERS = {"builds": (USED, ".wheelci-tree.json", ".wheelci-work"), "envs": (USED, ".complete.json"),
           "test-layers": (USED, ".complete.json")}


def ours(kind: str, path: Path) -> bool:
    for name in MARKERS.get(kind, (USED,)):
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path / name).st_mode):
                return True
    return False


def entry_dirs(root: Path) -> Iterator[tuple[str, Path]]:
    """(kind, directory) of each entry of KINDS that carries the tool's marker: their lock files, hidden
    names and directories the tool did not make are no entries."""
    for kind in KINDS:
        if not real_dir(root / kind):  # a link in place of a kind's directory: nothing behind it is ours
            continue
        with contextlib.suppress(OSError):
            for path in sorted((root / kind).iterdir()):
                if path.is_dir() and not path.is_symlink() and not path.name.startswith(".") and ours(kind, path):
                    yield kind, path


def _used_ns(path: Path) -> int:
    for where in (path / USED, path):
        with contextlib.suppress(OSError):
            return os.lstat(where).st_mtime_ns
    return 0


@contextlib.contextmanager
def _free(path: Path) -> Iterator[bool]:
    """Hold the entry and its lock file beside it (NAME.lock, where its makers and users take turns) if no
    run holds either now; False otherwise."""
    from wheelci.util.lock import unless_locked

    lock = path.with_name(path.name + ".lock")
    with contextlib.ExitStack() as stack:
        free = stack.enter_context(unless_locked(path))
        if free and lock.exists():
            free = stack.enter_context(unless_locked(lock))
        yield free


def scan(root: Path) -> list[Entry]:
    """Every entry of the cache at root, measured, with whether a running build holds it now."""
    entries = []
    for kind, path in entry_dirs(root):
        blocks = disk_usage(path)
        with _free(path) as free:
            in_use = not free
        entries.append(Entry(kind, path.name, path, sum(blocks.values()), _used_ns(path), in_use, blocks))
    return entries


def total_size(entries: list[Entry]) -> int:
    """Bytes on disk of the entries together: a file linked into several counted once."""
    unique: dict[tuple[int, int], int] = {}
    for e in entries:
        unique.update(e.blocks)
    return sum(unique.values())


def freed_by(entry: Entry, holders: Counter[tuple[int, int]]) -> int:
    """The bytes removing entry frees, given how many entries still hold each inode (updated): a file
    another entry links stays."""
    freed = 0
    for key, size in entry.blocks.items():
        holders[key] -= 1
        freed += size if holders[key] == 0 else 0
    return freed


@dataclass(frozen=True)
class Pruned:
    """What a prune did: the cache's size before and after, what it removed and what it left in use."""

    before: int
    after: int
    removed: list[Entry]
    in_use: list[Entry]


def prune(root: Path, cap: int) -> Pruned:
    """Remove entries, least recently used first, until the cache at root holds at most cap bytes; an
    entry a running build holds (or one used since the scan) is skipped, never waited for."""
    clear_aside(root)
    entries = scan(root)
    holders = Counter(key for e in entries for key in e.blocks)
    before = total = total_size(entries)
    removed, in_use = [], []
    for entry in sorted(entries, key=lambda e: (e.last_used_ns, e.kind, e.name)):
        if total <= cap:
            break
        if entry.in_use or not remove_entry(root, entry):
            in_use.append(entry)
            continue
        total -= freed_by(entry, holders)
        removed.append(entry)
    return Pruned(before, total, removed, in_use)


def remove_entry(root: Path, entry: Entry) -> bool:
    """Rename the entry aside under its lock (at its name: the whole entry, or nothing), then remove it.
    False where a build holds it, or stamped it since the scan."""
    aside = root / ASIDE / f"{entry.kind}-{entry.name}-{uuid.uuid4().hex[:8]}"
    with _free(entry.path) as free:
        if not free or _used_ns(entry.path) != entry.last_used_ns:
            return False
        aside.parent.mkdir(exist_ok=True)
        (entry.path / ASIDE_MARK).touch()  # what clear_aside may finish removing: ours, nothing else
        os.rename(entry.path, aside)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def clear_aside(root: Path) -> None:
    """What an interrupted prune renamed aside and did not finish removing: the directories that carry its
    mark (ASIDE_MARK, a regular file), nothing else put there (a link planted in ASIDE's place is removed,
    never followed)."""
    aside = root / ASIDE
    if aside.is_symlink():
        aside.unlink()
        return
    with contextlib.suppress(OSError):
        for path in aside.iterdir():
            with contextlib.suppress(OSError):
                if (path.is_dir() and not path.is_symlink()
                        and stat.S_ISREG(os.lstat(path / ASIDE_MARK).st_mode)):
                    shutil.rmtree(path, ignore_errors=True)


def keep_under(root: Path, cap: int | None) -> Pruned | None:
    """A build's end: prune to cap only when the sizes the entries' stamps recorded add up to more (cheap:
    no walk of the cache while it is under)."""
    if cap is None or sum(recorded_size(path) for _, path in entry_dirs(root)) <= cap:
        return None
    return prune(root, cap)
