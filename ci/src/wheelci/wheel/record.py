"""RECORD, a wheel's manifest (PEP 376, PEP 427): its one reader and its writer.

Every RECORD goes through `parse_record`, whether it comes out of a wheel (ci.wheel.zipread) or from an
installed or unpacked directory (`read_record_file`): csv rows of path, hash and size; a hash is sha256
or stronger, as installers require; a size is a number or empty. Pure functions, apart from the file read.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from wheelci.errors import CiError
from wheelci.wheel.ondisk import read_regular_text

RECORD_CAP = 256 << 20  # what is read whole into memory: torch's RECORD is about 2 MB
# sha256 or stronger, as PEP 376/427 require (`wheel unpack` refuses md5 and sha1, so an output
# reusing them would be broken); the variable-length shake_* have no plain digest.
RECORD_HASHES = frozenset(hashlib.algorithms_guaranteed
                          - {"md5", "sha1", "sha224", "sha3_224", "shake_128", "shake_256"})


@dataclass(frozen=True)
class RecordEntry:
    hash: str  # "sha256=<urlsafe b64, no padding>", or "" for RECORD itself
    size: int | None


def b64(digest: bytes) -> str:
    """A digest as RECORD spells it: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def record_hash(data: bytes) -> str:
    return "sha256=" + b64(hashlib.sha256(data).digest())


def parse_record(text: str, where: str = "RECORD") -> dict[str, RecordEntry]:
    """path -> RecordEntry; CiError naming `where` for a malformed row, size or hash."""
    out: dict[str, RecordEntry] = {}
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:  # e.g. a field over csv's 128 KiB limit
        raise CiError(f"malformed RECORD in {where}: {e}") from None
    for row in rows:
        if not row:
            continue
        if len(row) != 3:
            raise CiError(f"malformed RECORD row in {where}: {','.join(row)!r}")
        path, digest, size = row
        algo = digest.partition("=")[0]
        if digest and algo not in RECORD_HASHES:
            raise CiError(f"RECORD in {where} hashes {path!r} with {algo!r}: only sha256 or stronger "
                          f"({', '.join(sorted(RECORD_HASHES))}) is accepted")
        try:
            out[path] = RecordEntry(digest, int(size) if size else None)
        except ValueError:
            raise CiError(f"malformed RECORD size in {where}: {size!r}") from None
    return out


def read_record_file(path: Path) -> dict[str, RecordEntry]:
    """The RECORD of an installed or unpacked distribution: a regular file of at most RECORD_CAP."""
    return parse_record(read_regular_text(path, RECORD_CAP), str(path))


def format_record(rows: Iterable[tuple[str, str, int | None]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for path, digest, size in rows:
        w.writerow((path, digest, "" if size is None else size))
    return buf.getvalue().encode("utf-8")
