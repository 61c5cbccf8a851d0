"""File digests shared by the publishing stages (ci.index hashes what it lists, ci.upload what it sends)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from wheelci.errors import CiError
from wheelci.util.sizes import format_size

_CHUNK = 1 << 20


def sha256_file(path: Path | str | int, limit: int | None = None) -> str:
    """Hex sha256 of a file (or of an open descriptor, which it closes), read in 1 MiB chunks into one buffer
    (hashlib releases the GIL). With `limit`, a file that holds more bytes than that (one growing while
    read) is refused, not read on."""
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
            if limit is not None and total > limit:
                raise CiError(f"{path} grew past {format_size(limit)} while it was read: refused")
            h.update(view[:n])
    return h.hexdigest()
