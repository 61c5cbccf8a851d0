"""Identical files of sibling environments stored once: hard links instead of copies.

Every CUDA build of torch installs a few GB of nvidia-* libraries, and torch releases of one CUDA line
install many of the same ones. The cached environments are never written in place after creation (pip
replaces a file by a new one, it does not rewrite it), so a file with the same path, size, mode and
bytes as a sibling's can be the sibling's inode. A file is only ever replaced by a link to one whose
bytes were just compared equal, through a temporary name renamed over it, so an interruption leaves
either the copy or the link, never a missing file.
"""

from __future__ import annotations

import filecmp
import os
import stat
import uuid
from pathlib import Path

SMALLEST = 1 << 20  # below a MiB, the links would save little and cost a compare each


def _candidates(root: Path) -> dict[str, os.stat_result]:
    """Regular files of at least SMALLEST bytes under root, by path relative to it."""
    found = {}
    for where, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(where, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size >= SMALLEST:
                found[os.path.relpath(path, root)] = st
    return found


def link_identical(root: Path, siblings: list[Path]) -> int:
    """Replace each large file under root by a hard link to the identical file at the same relative path
    in a sibling (same size, mode and bytes, same filesystem). Returns the bytes no longer stored twice."""
    mine = _candidates(root)
    saved = 0
    for sibling in siblings:
        for rel, st in _candidates(sibling).items():
            own = mine.get(rel)
            if (own is None or own.st_ino == st.st_ino or own.st_dev != st.st_dev or own.st_size != st.st_size
                    or own.st_mode != st.st_mode or (own.st_uid, own.st_gid) != (st.st_uid, st.st_gid)
                    or own.st_nlink > 1):
                continue
            if _link(root / rel, sibling / rel, st):
                mine[rel] = os.lstat(root / rel)
                saved += st.st_size
    return saved


def _link(path: Path, other: Path, expected: os.stat_result) -> bool:
    """path replaced by a hard link to other when their bytes are equal; False (nothing changed) when
    they differ, other changed meanwhile, or the system refuses the link (another owner's file under
    protected_hardlinks, a full inode table): storing a file twice is never an error."""
    tmp = path.with_name(f".{path.name}.link-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        if not filecmp.cmp(path, other, shallow=False):
            return False
        os.link(other, tmp)
        if os.lstat(tmp).st_ino != expected.st_ino:  # other was replaced after it was compared
            return False
        os.replace(tmp, path)
        return True
    except OSError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
