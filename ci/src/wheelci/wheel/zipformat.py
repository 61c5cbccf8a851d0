"""The zip format as wheels use it: record layouts, flags, a member's directory entry, and the rules for
member names.

Shared by the reader (ci.wheel.zipread) and the writer (ci.wheel.zipwrite), so that both hold a name, a
mode and a ZIP64 field to the same rules. Only stdlib (ISA-L's inflate and CRC where it is installed).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from wheelci.errors import CiError

# What the reader and the writer import; inflate_lib, imported below (isal's or zlib), is one of them
__all__ = ["BATCH", "BLOCK", "CENTRAL", "CHUNK", "COMPRESS_LEVEL", "DEFLATED", "EOCD", "EOCD64", "FLAG_DESCRIPTOR",
           "FLAG_ENCRYPTED", "FLAG_UTF8", "INFLATE_ERRORS", "LOCAL", "LOCATOR64", "Member", "PIPELINE_MIN",
           "SIG_CENTRAL", "SIG_EOCD", "SIG_EOCD64", "SIG_LOCAL", "SIG_LOCATOR64", "SMALL", "STORED", "S_IFLNK",
           "S_IFMT", "S_IFREG", "U16", "U32", "UNIX", "canonical_name", "check_name", "crc32", "inflate_lib"]

# Zip record layouts (APPNOTE.TXT 4.3); little-endian.
LOCAL = struct.Struct("<IHHHHHIIIHH")  # sig, need, flags, method, time, date, crc, csize, usize, nlen, xlen
CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # ..., made, need, flags, method, time, date, crc, csize,
#                                                  usize, nlen, xlen, clen, disk, iattr, eattr, offset
EOCD = struct.Struct("<IHHHHIIH")
EOCD64 = struct.Struct("<IQHHIIQQQQ")
LOCATOR64 = struct.Struct("<IIQI")
SIG_LOCAL, SIG_CENTRAL = 0x04034B50, 0x02014B50
SIG_EOCD, SIG_EOCD64, SIG_LOCATOR64 = 0x06054B50, 0x06064B50, 0x07064B50
U32, U16 = 0xFFFFFFFF, 0xFFFF
STORED, DEFLATED = 0, 8
FLAG_ENCRYPTED, FLAG_DESCRIPTOR, FLAG_UTF8 = 0x1, 0x8, 0x800
S_IFMT, S_IFLNK, S_IFREG = 0o170000, 0o120000, 0o100000
UNIX = 3
COMPRESS_LEVEL = 6  # what wheel/setuptools use; new members only
CHUNK = 1 << 20
BLOCK = 8 << 20  # deflate block for parallel compression; fixed, so output is reproducible

try:  # ISA-L's inflate is about twice zlib's speed (measured on libtorch_cpu.so: 0.66 s vs 1.42 s)
    from isal import isal_zlib as inflate_lib
    # isal's stubs declare `error` an Exception instance; it is the exception class (IsalError)
    INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, inflate_lib.error)  # type: ignore[assignment]
    crc32 = inflate_lib.crc32  # same CRC-32, about six times faster than zlib's here
except ImportError:  # the stdlib is enough, only slower
    inflate_lib = zlib  # type: ignore[misc]  # isal_zlib is a drop-in for zlib: the same calls
    crc32 = zlib.crc32
    INFLATE_ERRORS = (zlib.error,)
PIPELINE_MIN = 32 << 20  # members this large are inflated and hashed by two threads
SMALL = 4 << 20  # members up to this size are read and inflated whole
BATCH = 8 << 20  # verify hands small members to its workers in batches of about this many bytes


@dataclass(frozen=True)
class Member:
    """One central-directory entry. Sizes and offset already resolved through ZIP64 extras."""

    name: str
    method: int
    flags: int
    crc: int
    csize: int
    usize: int
    dos_time: int
    dos_date: int
    external_attr: int
    made_by: int
    header_offset: int

    @property
    def mode(self) -> int:
        """Unix st_mode (0 when the archiver recorded none)."""
        return self.external_attr >> 16 if self.made_by >> 8 == UNIX else 0

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


def check_name(name: str) -> None:
    """Refuse names that would escape the install directory or that pip would mangle."""
    if (not name or name[0] == "/" or "\\" in name or "\0" in name or ".." in name.split("/")
            or (name[1:2] == ":" and name[0].isascii() and name[0].isalpha())):
        raise CiError(f"unsafe member name in wheel: {name!r}")


def canonical_name(name: str) -> str:
    """The path an installer writes for a member: `a//b`, `a/./b` and `./a/b` are all `a/b`."""
    if "//" not in name and "./" not in name and not name.endswith("/.") and name not in ("", ".") and name[0] != "/":
        return name  # nearly every name: no empty or `.` part, so it is its own canonical form
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts) + ("/" if name.endswith("/") else "")
