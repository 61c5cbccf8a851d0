"""Wheel surgery without recompression: the shared core of ci.patch, ci.split and ci.preload.

`wheel unpack` + `wheel pack` of a 192 MB torch wheel spends ~30 s recompressing 700 MB that did not
change. This module reads the zip central directory itself and copies each untouched member's
compressed bytes verbatim (kernel-side with copy_file_range), so the cost of an edit is the cost of
the edited members. Only stdlib; no zipfile (it cannot copy compressed bytes).

Reading (validates on open; every problem is a one-line `CiError`, exit 2)::

    with WheelArchive.open(path) as wa:       # reads only the central directory
        wa.name                               # ci.wheel.names.WheelName from the file name
        wa.members                            # list[Member] in archive order (name, csize, usize, mode...)
        wa.get("pkg/__init__.py")             # Member or None
        wa.read("pkg/__init__.py")            # bytes, CRC-checked
        wa.dist_info                          # "pkg-1.0.dist-info"
        wa.metadata                           # METADATA text
        wa.record                             # {path: RecordEntry(hash, size)}
        wa.verify()                           # re-hash every member against RECORD (CiError on mismatch)

Writing: `rewrite` for the common case, `WheelWriter` to assemble a wheel from pieces::

    out = rewrite(src, dest_dir,
                  replace={"pkg/a.py": b"..."},    # new content, keeps the member's mode
                  add={"pkg/_preload.py": b"..."}, # new members (or (bytes|Path, mode) tuples)
                  remove=["pkg/big.so"],
                  version="1.0+local",             # renames .dist-info, METADATA Version, file name
                  distribution=None,               # same for the project name
                  metadata_edit=lambda text: text, # any further METADATA change
                  verify=False)                    # re-hash untouched members against RECORD first

    w = WheelWriter(WheelName.parse("pkg_libs-1.0-py3-none-any.whl"))
    w.copy(wa, wa.get("pkg/lib/libx.so"), name="pkg_libs/lib/libx.so")  # compressed bytes, RECORD hash reused
    w.add("pkg_libs-1.0.dist-info/METADATA", text.encode())
    path = w.write(dest_dir)                                             # atomic; returns the new wheel

Output rules (the wheel spec's and reproducibility's): .dist-info members physically last and RECORD
last; RECORD regenerated (hashes of copied members reused from the source RECORD); file modes kept;
ZIP64 records written whenever a size, offset or the entry count needs them; timestamps from
SOURCE_DATE_EPOCH when set (for every member), else copied members keep theirs and new members get the
newest timestamp of the source, so the same inputs always give the same bytes; written to a temp file
and renamed (ci.util.atomic).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import os
import re
import struct
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Union

from wheelci.util import log
from wheelci.util.atomic import atomic_path
from wheelci.errors import CiError
from wheelci.wheel.names import WheelName, escape, find_dist_info

# Zip record layouts (APPNOTE.TXT 4.3); little-endian.
_LOCAL = struct.Struct("<IHHHHHIIIHH")  # sig, need, flags, method, time, date, crc, csize, usize, nlen, xlen
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # ..., made, need, flags, method, time, date, crc, csize,
#                                                  usize, nlen, xlen, clen, disk, iattr, eattr, offset
_EOCD = struct.Struct("<IHHHHIIH")
_EOCD64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_SIG_LOCAL, _SIG_CENTRAL = 0x04034B50, 0x02014B50
_SIG_EOCD, _SIG_EOCD64, _SIG_LOCATOR64 = 0x06054B50, 0x06064B50, 0x07064B50
_U32, _U16 = 0xFFFFFFFF, 0xFFFF
_STORED, _DEFLATED = 0, 8
_FLAG_ENCRYPTED, _FLAG_DESCRIPTOR, _FLAG_UTF8 = 0x1, 0x8, 0x800
_S_IFMT, _S_IFLNK, _S_IFREG = 0o170000, 0o120000, 0o100000
_UNIX = 3
_COMPRESS_LEVEL = 6  # what wheel/setuptools use; new members only
_CHUNK = 1 << 20
_BLOCK = 8 << 20  # deflate block for parallel compression; fixed, so output is reproducible

try:  # ISA-L's inflate is about twice zlib's speed (measured on libtorch_cpu.so: 0.66 s vs 1.42 s)
    from isal import isal_zlib as _inflate_lib
    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate_lib.error)
    _crc32 = _inflate_lib.crc32  # same CRC-32, about six times faster than zlib's here
except ImportError:  # the stdlib is enough, only slower
    _inflate_lib = zlib
    _crc32 = zlib.crc32
    _INFLATE_ERRORS = (zlib.error,)
_PIPELINE_MIN = 32 << 20  # members this large are inflated and hashed by two threads
_SMALL = 4 << 20  # members up to this size are read and inflated whole
_BATCH = 8 << 20  # verify hands small members to its workers in batches of about this many bytes

Content = Union[bytes, Path]
# Caps on what is read whole into memory: torch's METADATA is ~10 KB and its RECORD ~2 MB.
METADATA_CAP = 16 << 20
RECORD_CAP = 256 << 20
SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # signatures of RECORD: void once RECORD changes


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
        return self.external_attr >> 16 if self.made_by >> 8 == _UNIX else 0

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


@dataclass(frozen=True)
class RecordEntry:
    hash: str  # "sha256=<urlsafe b64, no padding>", or "" for RECORD itself
    size: int | None


def record_hash(data: bytes) -> str:
    return "sha256=" + _b64(hashlib.sha256(data).digest())


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# ---------------------------------------------------------------------------------------------- reading


def _check_name(name: str) -> None:
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


def _zip64_extra(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Resolve 0xFFFFFFFF placeholders from the ZIP64 extended-information extra field (id 1)."""
    pos = 0
    while pos + 4 <= len(extra):
        hid, hlen = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4: pos + 4 + hlen]
        if hid == 1:
            vals, i = [], 0
            for v in (usize, csize, offset):
                if v == _U32:
                    if i + 8 > len(body):
                        raise CiError("corrupt ZIP64 extra field")
                    v = struct.unpack_from("<Q", body, i)[0]
                    i += 8
                vals.append(v)
            return vals[0], vals[1], vals[2]
        pos += 4 + hlen
    return usize, csize, offset


class WheelArchive:
    """A wheel opened for reading: the central directory parsed and validated, the file kept open."""

    def __init__(self, path: Path, name: WheelName, members: list[Member], cd_offset: int) -> None:
        self._fd = -1
        self.path = path
        self.name = name
        self.members = members
        self.cd_offset = cd_offset
        self._by_name = {m.name: m for m in members}
        # Where each member's bytes must end: the next local header or the central directory, as
        # zipfile checks it ("Overlapped entries"); overlapping members are a zip bomb's trick.
        starts = sorted({m.header_offset for m in members} | {cd_offset})
        following = {a: b for a, b in zip(starts, starts[1:])}
        self._end = {id(m): following.get(m.header_offset, cd_offset) for m in members}
        self._fd = os.open(path, os.O_RDONLY)
        self._record: dict[str, RecordEntry] | None = None
        self._headers: dict[int, tuple[int, bool]] = {}  # id(member) -> local_header(): verify and copy share it
        self.dist_info = self._find_dist_info()

    # -- opening

    @classmethod
    def open(cls, path: Path | str) -> "WheelArchive":
        path = Path(path)
        name = WheelName.parse(path.name)
        if not path.is_file():
            raise CiError(f"no such wheel: {path}")
        members, cd_offset = read_central_directory(path)
        return cls(path, name, members, cd_offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "WheelArchive":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if hasattr(self, "_fd"):  # __init__ may have failed before opening
            self.close()

    def _find_dist_info(self) -> str:
        tops = {m.name.split("/", 1)[0] for m in self.members if "/" in m.name}
        return find_dist_info(tops, self.name, self.path.name)

    # -- members

    def get(self, name: str) -> Member | None:
        return self._by_name.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    @property
    def files(self) -> list[Member]:
        return [m for m in self.members if not m.is_dir]

    @property
    def compressed_size(self) -> int:
        return sum(m.csize for m in self.members)

    @property
    def unpacked_size(self) -> int:
        return sum(m.usize for m in self.members)

    def data_offset(self, m: Member) -> int:
        """Offset of m's compressed bytes (the local header's name/extra lengths may differ from the CD's)."""
        return self.local_header(m)[0]

    def local_header(self, m: Member) -> tuple[int, bool]:
        """(data offset, whether the local header agrees with the central directory byte for byte).

        An agreeing header can be copied verbatim together with the data, so runs of untouched
        members become one kernel copy.
        """
        if (known := self._headers.get(id(m))) is not None:
            return known
        head = os.pread(self._fd, _LOCAL.size + 1024, m.header_offset)
        if len(head) < _LOCAL.size:
            raise CiError(f"truncated zip: local header of {m.name} is past the end of {self.path.name}")
        sig, _need, flags, method, t, d, crc, csize, usize, nlen, xlen = _LOCAL.unpack_from(head)
        if sig != _SIG_LOCAL:
            raise CiError(f"corrupt zip: bad local header for {m.name} in {self.path.name}")
        start = m.header_offset + _LOCAL.size + nlen + xlen
        if start + m.csize > self.cd_offset:
            raise CiError(f"truncated zip: data of {m.name} runs past the central directory")
        if start + m.csize > self._end[id(m)]:
            raise CiError(f"corrupt zip: {m.name!r} overlaps the next member in {self.path.name}")
        # zipfile (what pip installs with) refuses a local name other than the directory's, decoded
        # with the directory's flags: so do we, or the two would read different wheels.
        local_name = head[_LOCAL.size: _LOCAL.size + nlen]  # read with the header, unless over 1024 bytes
        if len(local_name) < nlen:
            local_name = os.pread(self._fd, nlen, m.header_offset + _LOCAL.size)
        if local_name.decode("utf-8" if m.flags & _FLAG_UTF8 else "cp437", "replace") != m.name:
            raise CiError(f"corrupt zip: the local header of {m.name!r} names {local_name!r} in {self.path.name}")
        sizes_ok = (csize, usize) == (m.csize, m.usize) or (csize, usize) == (_U32, _U32)
        same = (flags == m.flags and not flags & _FLAG_DESCRIPTOR and method == m.method and crc == m.crc
                and (t, d) == (m.dos_time, m.dos_date) and sizes_ok and nlen <= 1024
                and head[_LOCAL.size: _LOCAL.size + nlen] == m.name.encode("utf-8" if flags & _FLAG_UTF8 else "cp437"))
        self._headers[id(m)] = start, same
        return start, same

    def read_raw(self, m: Member) -> bytes:
        """The member's compressed bytes."""
        return os.pread(self._fd, m.csize, self.data_offset(m)) if m.csize else b""

    def _check_method(self, m: Member) -> None:
        if m.flags & _FLAG_ENCRYPTED:
            raise CiError(f"encrypted member not supported: {m.name}")
        if m.method not in (_STORED, _DEFLATED):
            raise CiError(f"unsupported compression method {m.method} for {m.name}")

    def _read_small(self, m: Member) -> bytes:
        """A member of at most _SMALL bytes in one read and one inflate: torch's 12k small files
        cost a generator and a loop each through iter_chunks, a quarter of its verify."""
        self._check_method(m)
        raw = os.pread(self._fd, m.csize, self.data_offset(m)) if m.csize else b""
        if len(raw) < m.csize:
            raise CiError(f"truncated zip: {m.name}")
        if m.method == _DEFLATED:
            d = _inflate_lib.decompressobj(-15)
            try:
                out = d.decompress(raw, m.usize + 1) + d.flush()  # +1: one byte past the size is corrupt
            except _INFLATE_ERRORS as e:
                raise CiError(f"corrupt data for {m.name}: {e}") from None
        else:
            out = raw
        if len(out) != m.usize or _crc32(out) != m.crc:
            raise CiError(f"corrupt data for {m.name}: CRC or size does not match the zip directory")
        return out

    def iter_chunks(self, m: Member, check_crc: bool = True) -> Iterable[bytes]:
        """Uncompressed content in chunks, CRC-checked at the end (memory stays flat for 1 GB libraries).
        `check_crc=False` leaves the CRC to a caller that computes it on another thread (the size is
        still checked)."""
        self._check_method(m)
        d = _inflate_lib.decompressobj(-15) if m.method == _DEFLATED else None
        pos, crc, n = self.data_offset(m), 0, 0
        end = pos + m.csize
        while pos < end:
            raw = os.pread(self._fd, min(_CHUNK * 4, end - pos), pos)
            if not raw:
                raise CiError(f"truncated zip: {m.name}")
            pos += len(raw)
            while raw:  # bounded output per step: a deflate bomb never gets more memory than a chunk
                try:
                    out = d.decompress(raw, _CHUNK * 4) if d else raw
                except _INFLATE_ERRORS as e:
                    raise CiError(f"corrupt data for {m.name}: {e}") from None
                raw = d.unconsumed_tail if d else b""
                if check_crc:
                    crc = _crc32(out, crc)
                n += len(out)
                if n > m.usize:
                    raise CiError(f"corrupt data for {m.name}: it inflates past the size the zip directory "
                                  f"gives ({m.usize} bytes)")
                yield out
        if d:
            tail = d.flush()
            if check_crc:
                crc = _crc32(tail, crc)
            n += len(tail)
            if tail:
                yield tail
        if (check_crc and crc != m.crc) or n != m.usize:
            raise CiError(f"corrupt data for {m.name}: CRC or size does not match the zip directory")

    def read(self, name: str | Member, limit: int | None = None) -> bytes:
        """The member's content; with `limit`, refused when its size is over it (a deflate bomb)."""
        m = name if isinstance(name, Member) else self._by_name.get(name)
        if m is None:
            raise CiError(f"{self.path.name} has no member {name}")
        if limit is not None and m.usize > limit:
            raise CiError(f"{self.path.name}: {m.name} is {m.usize} bytes uncompressed, over the "
                          f"{limit >> 20} MiB this tool reads for it")
        return self._read_small(m) if m.usize <= _SMALL else b"".join(self.iter_chunks(m))

    def read_text(self, name: str, limit: int) -> str:
        """A dist-info text file: UTF-8, size-capped; anything else is bad input."""
        try:
            return self.read(name, limit).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CiError(f"{self.path.name}: {name} is not valid UTF-8 (byte {e.start})") from None

    def extract(self, m: Member, dest: Path) -> Path:
        """Write one member to dest (used when a tool such as patchelf must edit it on disk)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as f:
            for chunk in self.iter_chunks(m):
                f.write(chunk)
        if m.mode:
            os.chmod(dest, m.mode & 0o7777)
        return dest

    # -- dist-info

    @property
    def metadata(self) -> str:
        return self.read_text(f"{self.dist_info}/METADATA", METADATA_CAP)

    @property
    def record_name(self) -> str:
        return f"{self.dist_info}/RECORD"

    @property
    def record(self) -> dict[str, RecordEntry]:
        if self._record is None:
            if self.record_name not in self:
                raise CiError(f"{self.path.name} has no {self.record_name}")
            self._record = parse_record(self.read_text(self.record_name, RECORD_CAP), self.path.name)
        return self._record

    def hash_member(self, m: Member, algo: str = "sha256") -> str:
        """RECORD-style digest of a member's content. A large member is inflated in this thread and
        hashed in another (both release the GIL), so its cost is the slower of the two, not the sum:
        libtorch_cpu.so is most of torch's wheel and would otherwise bound the whole verify."""
        h = hashlib.new(algo)
        if m.usize <= _SMALL:
            h.update(self._read_small(m))
            return f"{algo}={_b64(h.digest())}"
        if m.usize < _PIPELINE_MIN:
            for chunk in self.iter_chunks(m):
                h.update(chunk)
            return f"{algo}={_b64(h.digest())}"
        import queue
        import threading
        chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        crc = 0

        def consume() -> None:  # the CRC too: inflating is the slower half (0.66 s vs 0.35 s of sha256)
            nonlocal crc
            while (chunk := chunks.get()) is not None:
                h.update(chunk)
                crc = _crc32(chunk, crc)
        hasher = threading.Thread(target=consume, daemon=True)
        hasher.start()
        try:
            for chunk in self.iter_chunks(m, check_crc=False):
                chunks.put(chunk)
        finally:
            chunks.put(None)
            hasher.join()
        if crc != m.crc:
            raise CiError(f"corrupt data for {m.name}: CRC or size does not match the zip directory")
        return f"{algo}={_b64(h.digest())}"

    def verify(self, names: Iterable[str] | None = None, jobs: int | None = None) -> None:
        """Re-hash members against RECORD (all files by default); CiError naming the first mismatch.

        Decompression and hashing release the GIL, so threads use every core.
        """
        record = self.record
        files = [m for m in self.files if m.name != self.record_name]
        if names is not None:
            wanted = set(names)
            files = [m for m in files if m.name in wanted]
        else:
            listed = {m.name for m in files} | {self.record_name}
            missing = sorted(set(record) - listed)
            if missing:
                raise CiError(f"RECORD lists a file the wheel lacks: {missing[0]}")
        for m in files:
            entry = record.get(m.name)
            if entry is None or not entry.hash:
                raise CiError(f"RECORD has no hash for {m.name} (use --no-verify to rebuild it)")
            if entry.size is not None and entry.size != m.usize:
                raise CiError(f"RECORD size mismatch for {m.name}: RECORD says {entry.size}, zip has {m.usize}")

        def check(batch: list[Member]) -> str | None:
            for m in batch:
                entry = record[m.name]
                algo = entry.hash.split("=", 1)[0]  # one of RECORD_HASHES (parse_record)
                if self.hash_member(m, algo) != entry.hash:
                    return f"RECORD hash mismatch for {m.name} (use --no-verify to accept)"
            return None

        big_first = sorted(files, key=lambda m: -m.usize)
        # Big members one task each, small ones in batches of about 8 MiB: a task per member was a
        # future and a wake-up for each of torch's 12k small files.
        batches: list[list[Member]] = []
        size = _BATCH
        for m in big_first:
            if size >= _BATCH:
                batches.append([])
                size = 0
            batches[-1].append(m)
            size += m.usize + 4096
        # One worker per core: the biggest member also borrows a hashing thread, so more would only contend.
        with ThreadPoolExecutor(max_workers=jobs or min(8, len(os.sched_getaffinity(0)))) as pool:
            for problem in pool.map(check, batches):
                if problem:
                    raise CiError(problem)


def read_central_directory(path: Path) -> tuple[list[Member], int]:
    """Parse and validate the central directory; returns (members, central directory offset)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(4)
        tail_len = min(size, _EOCD.size + _U16)
        f.seek(size - tail_len)
        tail = f.read(tail_len)
        # As zipfile does: a record at the very end with no comment first, else the last signature.
        # A bare search from the end can find the signature inside the record's own fields (a central
        # directory at offset 0x06054b50) and refuse a valid zip as truncated.
        if tail[-_EOCD.size:-_EOCD.size + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
            pos = len(tail) - _EOCD.size
        else:
            pos = tail.rfind(b"PK\x05\x06")
        if pos < 0 or pos + _EOCD.size > len(tail):
            if head == b"PK\x03\x04":
                raise CiError(f"truncated zip (no end of central directory): {path.name}")
            raise CiError(f"not a zip file: {path.name}")
        eocd_at = size - tail_len + pos
        _, disk, cd_disk, _n_disk, count, cd_size, cd_offset, _clen = _EOCD.unpack_from(tail, pos)
        if disk or cd_disk:
            raise CiError(f"multi-disk zip not supported: {path.name}")
        # Where zipfile (pip) looks: a ZIP64 locator right before the end record, whatever the end
        # record says, and the ZIP64 end record right before the locator, not where the locator points.
        loc_at = eocd_at - _LOCATOR64.size
        f.seek(max(loc_at, 0))  # a crafted end record near the start: no seek before the file
        loc = f.read(_LOCATOR64.size)
        if loc_at >= 0 and len(loc) == _LOCATOR64.size and _LOCATOR64.unpack(loc)[0] == _SIG_LOCATOR64:
            eocd64_at = loc_at - _EOCD64.size
            f.seek(max(eocd64_at, 0))
            rec = f.read(_EOCD64.size)
            if eocd64_at < 0 or len(rec) < _EOCD64.size or _EOCD64.unpack(rec)[0] != _SIG_EOCD64:
                raise CiError(f"corrupt zip (ZIP64 end record missing): {path.name}")
            if _LOCATOR64.unpack(loc)[2] != eocd64_at:
                raise CiError(f"corrupt zip (the ZIP64 locator points away from the ZIP64 end record): {path.name}")
            _, _, _, _, disk, cd_disk, _, count, cd_size, cd_offset = _EOCD64.unpack(rec)
            if disk or cd_disk:
                raise CiError(f"multi-disk zip not supported: {path.name}")
            cd_end = eocd64_at
        elif cd_size == _U32 or cd_offset == _U32:
            raise CiError(f"corrupt zip (ZIP64 locator missing): {path.name}")
        else:
            if count == _U16:
                count = -1  # exactly 65535 entries without ZIP64 records (zipfile does this): read to the end
            cd_end = eocd_at
        # zipfile reads the directory that ends at the end record (taking any gap for a prepended
        # stub); we read where the offset points. Only when the two agree is it one wheel.
        if cd_offset + cd_size != cd_end:
            raise CiError(f"corrupt zip (the central directory does not end where its end record starts: "
                          f"a second directory or a prepended stub): {path.name}")
        f.seek(cd_offset)
        cd = f.read(cd_size)
    members: list[Member] = []
    seen: dict[str, str] = {}  # canonical name -> the name as written
    pos = 0
    while len(members) < count or (count < 0 and pos < len(cd)):
        if pos + _CENTRAL.size > len(cd):
            raise CiError(f"corrupt zip (central directory too short): {path.name}")
        (sig, made_by, need, flags, method, dtime, ddate, crc, csize, usize, nlen, xlen, clen, _disk,
         _iattr, eattr, offset) = _CENTRAL.unpack_from(cd, pos)
        if sig != _SIG_CENTRAL:
            raise CiError(f"corrupt zip (bad central directory entry): {path.name}")
        raw_name = cd[pos + _CENTRAL.size: pos + _CENTRAL.size + nlen]
        extra = cd[pos + _CENTRAL.size + nlen: pos + _CENTRAL.size + nlen + xlen]
        pos += _CENTRAL.size + nlen + xlen + clen
        if need & 0xFF > 63:  # zipfile refuses versions it cannot extract
            raise CiError(f"unsupported zip version {need & 0xFF} for a member of {path.name}")
        try:
            name = raw_name.decode("utf-8" if flags & _FLAG_UTF8 else "cp437")
        except UnicodeDecodeError:
            raise CiError(f"member name is not valid UTF-8 though the zip says it is: {raw_name!r} in "
                          f"{path.name}") from None
        usize, csize, offset = _zip64_extra(extra, usize, csize, offset)
        _check_name(name)
        key = canonical_name(name)
        if key in seen:
            other = seen[key]
            raise CiError(f"duplicate member in wheel: {name}" if other == name else
                          f"member {name!r} is the same file as {other!r} once installed (aliased "
                          f"through './' or '//'): {path.name}")
        seen[key] = name
        m = Member(name, method, flags, crc, csize, usize, dtime, ddate, eattr, made_by, offset)
        if m.mode & _S_IFMT == _S_IFLNK:
            raise CiError(f"symlink member in wheel (wheels cannot carry symlinks): {name}")
        if offset + _LOCAL.size > cd_offset:
            raise CiError(f"truncated or corrupt zip (member {name} outside the archive): {path.name}")
        members.append(m)
    if pos != len(cd):  # zipfile reads entries until the directory's size, ignoring the count
        raise CiError(f"corrupt zip (the central directory holds more than the {count} entries its end record "
                      f"counts): {path.name}")
    return members, cd_offset


# sha256 or stronger, as PEP 376/427 require (`wheel unpack` refuses md5 and sha1, so an output
# reusing them would be broken); the variable-length shake_* have no plain digest.
RECORD_HASHES = frozenset(hashlib.algorithms_guaranteed
                          - {"md5", "sha1", "sha224", "sha3_224", "shake_128", "shake_256"})


def parse_record(text: str, where: str = "RECORD") -> dict[str, RecordEntry]:
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


def format_record(rows: Iterable[tuple[str, str, int | None]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for path, digest, size in rows:
        w.writerow((path, digest, "" if size is None else size))
    return buf.getvalue().encode("utf-8")


# ---------------------------------------------------------------------------------------------- METADATA


def set_header(text: str, key: str, value: str) -> str:
    """Replace the first `key:` header line of an RFC 822 METADATA (body untouched)."""
    head, sep, body = _split_headers(text)
    pat = re.compile(rf"^{re.escape(key)}:.*$", re.IGNORECASE | re.MULTILINE)
    if not pat.search(head):
        raise CiError(f"METADATA has no {key} header")
    return pat.sub(lambda _m: f"{key}: {value}", head, count=1) + sep + body


def check_identity(text: str) -> None:
    """Name and Version must each be one unfolded header line. A second one, or a continuation line,
    leaves tools to disagree on which applies, and set_header would edit only the first line."""
    lines = _split_headers(text)[0].splitlines()
    for key in ("Name", "Version"):
        at = [i for i, line in enumerate(lines)
              if line[:1] not in (" ", "\t") and line.partition(":")[0].strip().lower() == key.lower()]
        if len(at) > 1:
            raise CiError(f"METADATA has {len(at)} {key} headers: which one applies is ambiguous")
        if at and at[0] + 1 < len(lines) and lines[at[0] + 1][:1] in (" ", "\t"):
            raise CiError(f"METADATA's {key} header is folded over several lines: write it on one line")


def get_headers(text: str, key: str) -> list[str]:
    head, _, _ = _split_headers(text)
    return [m.group(1).strip() for m in re.finditer(rf"^{re.escape(key)}:(.*)$", head, re.I | re.M)]


def _split_headers(text: str) -> tuple[str, str, str]:
    """(headers, separator, body): the body (long description) starts after the first blank line."""
    m = re.search(r"\r?\n\r?\n", text)
    if not m:
        return text, "", ""
    return text[: m.start()], text[m.start(): m.end()], text[m.end():]


def edit_headers(text: str, *, remove: Callable[[str, str], bool] | None = None,
                 append: Iterable[tuple[str, str]] = ()) -> str:
    """Drop header lines where remove(key, value) is true (with their continuation lines), append new ones."""
    head, sep, body = _split_headers(text)
    lines = head.splitlines()
    kept: list[str] = []
    dropping = False
    for line in lines:
        if line[:1] in (" ", "\t"):
            if not dropping:
                kept.append(line)
            continue
        key, _, value = line.partition(":")
        dropping = bool(remove and remove(key.strip(), value.strip()))
        if not dropping:
            kept.append(line)
    kept += [f"{k}: {v}" for k, v in append]
    newline = "\r\n" if "\r\n" in head else "\n"
    out = newline.join(kept)
    if not sep:
        return out + newline
    return out + sep + body


# ---------------------------------------------------------------------------------------------- writing


def _dos_time(epoch: float) -> tuple[int, int]:
    t = time.gmtime(max(epoch, 315532800))  # zip cannot express times before 1980
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday


def _source_date_epoch() -> tuple[int, int] | None:
    sde = os.environ.get("SOURCE_DATE_EPOCH")
    if not sde:
        return None
    try:
        return _dos_time(int(sde))
    except ValueError:
        raise CiError(f"SOURCE_DATE_EPOCH is not an integer: {sde!r}") from None


@dataclass
class _Planned:
    name: str
    src: WheelArchive | None = None
    member: Member | None = None  # copied compressed bytes from src
    content: Content | None = None  # or new content to compress
    mode: int = 0o644
    record_hash: str | None = None


class WheelWriter:
    """Assembles a wheel: copied members (compressed bytes) and new content, then RECORD, atomically.

    Order on disk: members in the order added, except that .dist-info members go last (in the order
    added) and RECORD, always regenerated, goes very last.
    """

    def __init__(self, name: WheelName, *, default_time: tuple[int, int] | None = None,
                 force_zip64: bool = False) -> None:
        self.name = name
        self.force_zip64 = force_zip64
        self._plan: dict[str, _Planned] = {}
        self._canonical: dict[str, str] = {}  # installed path -> member name
        self._sde = _source_date_epoch()
        self._default_time = self._sde or default_time or (0, (0 << 9) | (1 << 5) | 1)  # 1980-01-01

    @property
    def dist_info(self) -> str:
        return self.name.dist_info

    def _put(self, p: _Planned) -> None:
        """The reader's rules, for what we write: a safe name, no alias of another member once
        installed (`a/./b` is `a/b`), a regular file with permission bits only (no symlink, no
        setuid, setgid or sticky bit)."""
        _check_name(p.name)
        if p.name == f"{self.dist_info}/RECORD":
            return  # always regenerated
        key = canonical_name(p.name)
        if (other := self._canonical.get(key)) is not None:
            raise CiError(f"duplicate member in output wheel: {p.name}" if other == p.name else
                          f"member {p.name!r} would be the same file as {other!r} once installed")
        if p.content is not None and (p.mode & _S_IFMT not in (0, _S_IFREG) or p.mode & 0o7000):
            raise CiError(f"mode {p.mode:o} for {p.name!r}: a wheel member is a regular file with "
                          "permission bits only (no symlink, setuid, setgid or sticky bit)")
        self._canonical[key] = p.name
        self._plan[p.name] = p

    def copy(self, src: WheelArchive, m: Member, name: str | None = None, *,
             record_hash: str | None = None) -> None:
        """Copy m's compressed bytes from src (optionally under a new name); its RECORD hash is reused."""
        if record_hash is None and not m.is_dir:
            entry = src.record.get(m.name)
            record_hash = entry.hash if entry and entry.hash else None
        self._put(_Planned(name or m.name, src=src, member=m, record_hash=record_hash))

    def add(self, name: str, content: Content, mode: int = 0o644) -> None:
        """A new member from bytes or from a file on disk (compressed here, streaming)."""
        self._put(_Planned(name, content=content, mode=mode))

    def names(self) -> list[str]:
        return list(self._plan)

    def write(self, dest_dir: Path | str, before_commit: Callable[[], object] | None = None) -> Path:
        """Write <dest_dir>/<name.filename> atomically; returns its path. `before_commit` runs once
        the bytes are written and before the rename: if it raises, nothing reaches dest_dir."""
        dest = Path(dest_dir) / self.name.filename
        # The same file by device and inode (a symlink, a hard link or another spelling of -w), found
        # once per source archive: a per-member resolve() cost torch's 12k members most of a second.
        archives = {id(p.src): p.src for p in self._plan.values() if p.src is not None}
        sources = {(st.st_dev, st.st_ino) for st in (os.fstat(a._fd) for a in archives.values())}
        with contextlib.suppress(OSError):
            st = dest.stat()
            if (st.st_dev, st.st_ino) in sources:
                raise CiError(f"output {dest} would replace its input wheel: choose another -w directory")
        info = f"{self.dist_info}/"
        order = [p for p in self._plan.values() if not p.name.startswith(info)]
        order += [p for p in self._plan.values() if p.name.startswith(info)]
        if not any(p.name == f"{info}WHEEL" for p in order) or not any(p.name == f"{info}METADATA" for p in order):
            raise CiError(f"output wheel {dest.name} would lack {info}WHEEL or METADATA")
        with atomic_path(dest) as tmp:
            fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a wheel is an ordinary file
            try:
                _ZipOut(fd, self.force_zip64).write_all(order, f"{info}RECORD", self._sde, self._default_time)
            finally:
                os.close(fd)
            if before_commit is not None:
                before_commit()
        return dest


class _ZipOut:
    """The byte-level writer: local headers rebuilt (no data descriptors), data copied or deflated."""

    def __init__(self, fd: int, force_zip64: bool) -> None:
        self.fd = fd
        self.pos = 0
        self.force = force_zip64
        self.entries: list[Member] = []  # what the central directory will list
        self._run: list[int] | None = None  # [source fd, offset, length] not yet copied

    def _w(self, data: bytes) -> None:
        self._flush()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.pos += len(data)

    def _local(self, name: bytes, flags: int, method: int, t: int, d: int, crc: int,
               csize: int, usize: int) -> None:
        z64 = self.force or csize >= _U32 or usize >= _U32
        extra = struct.pack("<HHQQ", 1, 16, usize, csize) if z64 else b""
        self._w(_LOCAL.pack(_SIG_LOCAL, 45 if z64 else 20, flags, method, t, d, crc,
                            _U32 if z64 else csize, _U32 if z64 else usize, len(name), len(extra)) + name + extra)

    def write_all(self, order: list[_Planned], record_name: str, sde: tuple[int, int] | None,
                  default_time: tuple[int, int]) -> None:
        rows: list[tuple[str, str, int | None]] = []
        for p in order:
            if p.member is not None:
                rows.append(self._copy(p, sde))
            else:
                rows.append(self._new(p.name, p.content, p.mode, sde or default_time))
        rows = [r for r in rows if not r[0].endswith("/")]
        rows.append((record_name, "", None))
        self._new(record_name, format_record(rows), 0o644, sde or default_time)
        self._central()

    def _copy(self, p: _Planned, sde: tuple[int, int] | None) -> tuple[str, str, int | None]:
        src, m = p.src, p.member
        assert src is not None and m is not None
        data_at, same = src.local_header(m)
        offset = self.pos
        # Verbatim only where the directory will spell the name the same way: a non-ASCII name is
        # written in UTF-8 with its flag, so a cp437 header (no flag) is rebuilt, never copied.
        if (same and not sde and not self.force and p.name == m.name and m.csize < _U32 and m.usize < _U32
                and (p.name.isascii() or m.flags & _FLAG_UTF8)):
            flags, (t, d) = m.flags, (m.dos_time, m.dos_date)
            length = data_at - m.header_offset + m.csize
            self._queue(src._fd, m.header_offset, length)  # header and data verbatim
            self.pos += length
        else:
            name = p.name.encode("utf-8")
            flags = (m.flags & ~(_FLAG_DESCRIPTOR | _FLAG_UTF8)) | (_FLAG_UTF8 if not p.name.isascii() else 0)
            t, d = sde or (m.dos_time, m.dos_date)
            self._local(name, flags, m.method, t, d, m.crc, m.csize, m.usize)
            self._queue(src._fd, data_at, m.csize)
            self.pos += m.csize
        attr = m.external_attr if m.made_by >> 8 == _UNIX and m.mode else ((0o40755 if m.is_dir else 0o100644) << 16)
        self.entries.append(Member(p.name, m.method, flags, m.crc, m.csize, m.usize, t, d, attr, _UNIX << 8, offset))
        digest = p.record_hash or src.hash_member(m)  # no source RECORD entry: hash it once
        return p.name, digest, m.usize

    def _queue(self, fd: int, start: int, length: int) -> None:
        """Extend the pending source run when contiguous, else flush it: one copy per run, not per member."""
        run = self._run
        if run and run[0] == fd and run[1] + run[2] == start:
            run[2] += length
            return
        self._flush()
        self._run = [fd, start, length]

    def _flush(self) -> None:
        if self._run:
            fd, start, length = self._run
            self._run = None
            _copy_range(fd, self.fd, start, length)

    def _new(self, name_s: str, content: Content | None, mode: int,
             when: tuple[int, int]) -> tuple[str, str, int | None]:
        """Deflate new content. Sizes are unknown until compressed, so compress first, then write."""
        name = name_s.encode("utf-8")
        flags = _FLAG_UTF8 if not name_s.isascii() else 0
        if isinstance(content, Path):
            blocks: Iterable[bytes] = _file_chunks(content)
        else:
            data = memoryview(bytes(content or b""))
            blocks = (data[i: i + _BLOCK] for i in range(0, len(data), _BLOCK))
        parts, crc, usize, digest = _deflate(blocks)
        cdata = b"".join(parts)
        offset = self.pos
        t, d = when
        self._local(name, flags, _DEFLATED, t, d, crc, len(cdata), usize)
        self._w(cdata)
        if not mode & _S_IFMT:
            mode |= _S_IFREG
        self.entries.append(Member(name_s, _DEFLATED, flags, crc, len(cdata), usize, t, d, mode << 16, _UNIX << 8,
                                   offset))
        return name_s, f"sha256={_b64(digest)}", usize

    def _central(self) -> None:
        cd_start = self.pos
        buf = bytearray()
        for e in self.entries:
            name = e.name.encode("utf-8")
            fields, z = [], {}
            z["usize"] = self.force or e.usize >= _U32
            z["csize"] = self.force or e.csize >= _U32
            z["offset"] = self.force or e.header_offset >= _U32
            for key, val in (("usize", e.usize), ("csize", e.csize), ("offset", e.header_offset)):
                if z[key]:
                    fields.append(val)
            extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
            need = 45 if fields else 20
            buf += _CENTRAL.pack(_SIG_CENTRAL, (_UNIX << 8) | need, need, e.flags, e.method, e.dos_time,
                                 e.dos_date, e.crc, _U32 if z["csize"] else e.csize,
                                 _U32 if z["usize"] else e.usize, len(name), len(extra), 0, 0, 0,
                                 e.external_attr, _U32 if z["offset"] else e.header_offset)
            buf += name + extra
        self._w(bytes(buf))
        cd_size, n = len(buf), len(self.entries)
        z64 = self.force or n >= _U16 or cd_size >= _U32 or cd_start >= _U32
        if z64:
            eocd64_at = self.pos
            self._w(_EOCD64.pack(_SIG_EOCD64, _EOCD64.size - 12, (_UNIX << 8) | 45, 45, 0, 0, n, n,
                                 cd_size, cd_start))
            self._w(_LOCATOR64.pack(_SIG_LOCATOR64, 0, eocd64_at, 1))
        self._w(_EOCD.pack(_SIG_EOCD, 0, 0, min(n, _U16) if not z64 else _U16, min(n, _U16) if not z64 else _U16,
                           _U32 if z64 else cd_size, _U32 if z64 else cd_start, 0))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _file_chunks(path: Path) -> Iterable[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_BLOCK):
            yield chunk


def _deflate_block(data: bytes | memoryview, last: bool) -> bytes:
    c = zlib.compressobj(_COMPRESS_LEVEL, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _with_last(blocks: Iterable[bytes]) -> Iterable[tuple[bytes, bool]]:
    it = iter(blocks)
    prev = next(it, None)
    if prev is None:
        yield b"", True
        return
    for cur in it:
        yield prev, False
        prev = cur
    yield prev, True


def _deflate(blocks: Iterable[bytes]) -> tuple[list[bytes], int, int, bytes]:
    """Raw deflate of fixed-size blocks on every core, pigz-style: each block is compressed on its
    own and ends on a byte boundary (sync flush), so the concatenation is one valid stream. Output
    depends only on the content (fixed block size), never on the number of threads. Returns
    (compressed parts, crc32, size, sha256 digest)."""
    sha, crc, usize = hashlib.sha256(), 0, 0
    parts: list[bytes] = []
    pending: deque = deque()
    pool: ThreadPoolExecutor | None = None
    workers = len(os.sched_getaffinity(0))  # the cores this process may use (taskset, cgroups), not the machine's
    try:
        for data, last in _with_last(blocks):
            sha.update(data)
            crc = _crc32(data, crc)
            usize += len(data)
            if last and not pending:
                parts.append(_deflate_block(data, True))  # small content: no threads
                break
            pool = pool or ThreadPoolExecutor(max_workers=workers)
            pending.append(pool.submit(_deflate_block, data, last))
            while len(pending) > 2 * workers:
                parts.append(pending.popleft().result())
        while pending:
            parts.append(pending.popleft().result())
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    return parts, crc, usize, sha.digest()


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int) -> None:
    """Copy count bytes from src_fd@offset to dst_fd's current position, in the kernel when it can."""
    done = 0
    try:
        while done < count:
            n = os.copy_file_range(src_fd, dst_fd, count - done, offset + done)
            if n == 0:
                raise CiError("truncated zip: member data ends early")
            done += n
        return
    except (AttributeError, OSError):
        pass  # no copy_file_range here (old kernel, another filesystem): fall back to read/write
    while done < count:
        chunk = os.pread(src_fd, min(_CHUNK * 8, count - done), offset + done)
        if not chunk:
            raise CiError("truncated zip: member data ends early")
        view = memoryview(chunk)
        while view:
            n = os.write(dst_fd, view)
            view = view[n:]
        done += len(chunk)


# ---------------------------------------------------------------------------------------------- rewrite


def newest_time(wa: WheelArchive) -> tuple[int, int]:
    """The latest (time, date) among members: the deterministic stamp for new content."""
    m = max(wa.members, key=lambda m: (m.dos_date, m.dos_time), default=None)
    return (m.dos_time, m.dos_date) if m else (0, 33)


def rewrite(src: WheelArchive | Path | str, dest_dir: Path | str, *,
            replace: Mapping[str, Content] | None = None,
            add: Mapping[str, Content | tuple[Content, int]] | None = None,
            remove: Iterable[str] = (),
            version: str | None = None,
            distribution: str | None = None,
            metadata_edit: Callable[[str], str] | None = None,
            verify: bool = False,
            force_zip64: bool = False,
            variant: str | None = None) -> Path:
    """Write an edited copy of src into dest_dir and return its path (src is never modified).

    `replace` keeps each member's position and mode; `add` appends (content or (content, mode));
    `remove` drops members. `version`/`distribution` rename the .dist-info and .data directories,
    METADATA's Version/Name and the file name together. With `verify`, every untouched member is
    re-hashed against the source RECORD first (CiError on mismatch); without it, RECORD sizes are
    still checked against the zip directory. `variant` gives the output a PEP 825 variant label (the
    caller adds its .dist-info/variant.json); otherwise the source's label, if any, is kept.
    """
    own = not isinstance(src, WheelArchive)
    wa = WheelArchive.open(src) if own else src
    try:
        return _rewrite(wa, Path(dest_dir), dict(replace or {}), dict(add or {}), set(remove), version,
                        distribution, metadata_edit, verify, force_zip64, variant)
    finally:
        if own:
            wa.close()


def _rewrite(wa: WheelArchive, dest_dir: Path, replace: dict[str, Content],
             add: dict[str, Content | tuple[Content, int]], remove: set[str], version: str | None,
             distribution: str | None, metadata_edit: Callable[[str], str] | None, verify: bool,
             force_zip64: bool, variant: str | None = None) -> Path:
    for name in sorted(set(replace) | remove):
        if name not in wa:
            raise CiError(f"{wa.path.name} has no member {name}")
    for name in add:
        if name in wa and name not in remove:
            raise CiError(f"{wa.path.name} already has {name} (use replace)")
    check_identity(wa.metadata)  # an ambiguous name or version is never copied on
    record = wa.record
    checked = None
    if verify:  # runs while the output is written (mostly kernel copies); nothing lands before it passes
        from concurrent.futures import ThreadPoolExecutor
        checker = ThreadPoolExecutor(max_workers=1)
        checked = checker.submit(wa.verify)
        checker.shutdown(wait=False)
    else:
        for m in wa.files:
            entry = record.get(m.name)
            if entry and entry.size is not None and entry.size != m.usize and m.name not in replace \
                    and m.name not in remove:
                raise CiError(f"RECORD size mismatch for {m.name}: RECORD says {entry.size}, zip has {m.usize}")
    old = wa.name
    new = old.with_(version=version or old.version, distribution=escape(distribution) if distribution else old.distribution,
                    variant=variant or old.variant)
    # .data/ is spelled as the archive spells its .dist-info, which may differ from the file name's
    # spelling (`Demo-1.0.dist-info` in `demo-1.0-...whl`): rename whichever is there.
    as_dist_info = wa.dist_info[: -len(".dist-info")] + ".data"
    renames = {f"{wa.dist_info}/": f"{new.dist_info}/", f"{as_dist_info}/": f"{new.data_dir}/",
               f"{old.data_dir}/": f"{new.data_dir}/"}

    def renamed(name: str) -> str:
        for a, b in renames.items():
            if name.startswith(a):
                return b + name[len(a):]
        return name

    meta_name = f"{wa.dist_info}/METADATA"
    if version or distribution or metadata_edit:
        text = replace.pop(meta_name, None)
        meta = text.decode("utf-8") if isinstance(text, bytes) else (text.read_text() if text else wa.metadata)
        check_identity(meta)
        if version:
            meta = set_header(meta, "Version", version)
        if distribution:
            meta = set_header(meta, "Name", distribution)
        if metadata_edit:
            meta = metadata_edit(meta)
        replace[meta_name] = meta.encode("utf-8")
    w = WheelWriter(new, default_time=newest_time(wa), force_zip64=force_zip64)
    signatures = {f"{wa.dist_info}/{s}" for s in SIGNATURES} & {m.name for m in wa.members}
    for name in sorted(signatures - remove):
        log.info(f"note: dropped {name}: it signs the old RECORD, which this rewrite replaces")
    for m in wa.members:
        if m.name in remove or m.name == wa.record_name or m.name in signatures:
            continue
        if m.name in replace:
            w.add(renamed(m.name), replace[m.name], (m.mode or 0o100644))
        else:
            w.copy(wa, m, renamed(m.name))
    for name, content in add.items():
        data, mode = content if isinstance(content, tuple) else (content, 0o644)
        w.add(renamed(name), data, mode)
    try:
        return w.write(dest_dir, before_commit=checked.result if checked else None)
    finally:
        if checked is not None:
            checked.cancel()
            with contextlib.suppress(BaseException):
                checked.result()  # never leave the verifier running behind an error
