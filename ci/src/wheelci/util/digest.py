"""File digests shared by the publishing stages (ci.index hashes what it lists, ci.upload what it sends)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks into one buffer (hashlib releases the GIL)."""
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
