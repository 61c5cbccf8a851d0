"""Reading wheels without zipfile: the central directory parsed and validated on open, members read
(CRC-checked, size-bounded) or hashed against RECORD.

`wheel unpack` + `wheel pack` of a 192 MB torch wheel spends ~30 s recompressing 700 MB that did not
change; ci.wheel.zipwrite copies untouched members' compressed bytes instead, which zipfile cannot
give it. The rules here are zipfile's (what pip installs with) wherever the two could read different
wheels from one file: the end record, ZIP64 records, local names, overlapping members, duplicates.
Every problem is a one-line `CiError`, exit 2::

    with WheelArchive.open(path) as wa:       # reads only the central directory
        wa.name                               # ci.wheel.names.WheelName from the file name
        wa.members                            # list[Member] in archive order (name, csize, usize, mode...)
        wa.get("pkg/__init__.py")             # Member or None
        wa.read("pkg/__init__.py")            # bytes, CRC-checked
        wa.dist_info                          # "pkg-1.0.dist-info" (the only one: a second is refused)
        wa.metadata                           # METADATA text (ci.wheel.metadata reads it)
        wa.record                             # {path: RecordEntry(hash, size)} (ci.wheel.record)
        wa.verify()                           # re-hash every member against RECORD (CiError on mismatch)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import queue
import struct
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from wheelci.errors import CiError
from wheelci.wheel.metadata import METADATA_CAP
from wheelci.wheel.names import WheelName, find_dist_info

IN_MEMORY_CAP = 64 << 20  # a larger member is read for seeking from a temporary file (WheelArchive.seekable)
from wheelci.wheel.record import RECORD_CAP, RecordEntry, b64, parse_record
from wheelci.wheel.zipformat import (BATCH, CENTRAL, CHUNK, DEFLATED, EOCD, EOCD64, FLAG_DESCRIPTOR,
                                     FLAG_ENCRYPTED, FLAG_UTF8, INFLATE_ERRORS, LOCAL, LOCATOR64, PIPELINE_MIN,
                                     SIG_CENTRAL, SIG_EOCD64, SIG_LOCAL, SIG_LOCATOR64, SMALL, STORED, S_IFLNK,
                                     S_IFMT, U16, U32, Member, canonical_name, check_name, crc32, inflate_lib)


def _zip64_extra(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Resolve 0xFFFFFFFF placeholders from the ZIP64 extended-information extra field (id 1)."""
    pos = 0
    while pos + 4 <= len(extra):
        hid, hlen = struct.unpack_from("<HH", extra, pos)
        body = extra[pos + 4: pos + 4 + hlen]
        if hid == 1:
            vals, i = [], 0
            for v in (usize, csize, offset):
                if v == U32:
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

    def fileno(self) -> int:
        """The open file: the writer copies compressed bytes straight from it."""
        return self._fd

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
        head = os.pread(self._fd, LOCAL.size + 1024, m.header_offset)
        if len(head) < LOCAL.size:
            raise CiError(f"truncated zip: local header of {m.name} is past the end of {self.path.name}")
        sig, _need, flags, method, t, d, crc, csize, usize, nlen, xlen = LOCAL.unpack_from(head)
        if sig != SIG_LOCAL:
            raise CiError(f"corrupt zip: bad local header for {m.name} in {self.path.name}")
        start = m.header_offset + LOCAL.size + nlen + xlen
        if start + m.csize > self.cd_offset:
            raise CiError(f"truncated zip: data of {m.name} runs past the central directory")
        if start + m.csize > self._end[id(m)]:
            raise CiError(f"corrupt zip: {m.name!r} overlaps the next member in {self.path.name}")
        # zipfile (what pip installs with) refuses a local name other than the directory's, decoded
        # with the directory's flags: so do we, or the two would read different wheels.
        local_name = head[LOCAL.size: LOCAL.size + nlen]  # read with the header, unless over 1024 bytes
        if len(local_name) < nlen:
            local_name = os.pread(self._fd, nlen, m.header_offset + LOCAL.size)
        if local_name.decode("utf-8" if m.flags & FLAG_UTF8 else "cp437", "replace") != m.name:
            raise CiError(f"corrupt zip: the local header of {m.name!r} names {local_name!r} in {self.path.name}")
        sizes_ok = (csize, usize) == (m.csize, m.usize) or (csize, usize) == (U32, U32)
        same = (flags == m.flags and not flags & FLAG_DESCRIPTOR and method == m.method and crc == m.crc
                and (t, d) == (m.dos_time, m.dos_date) and sizes_ok and nlen <= 1024
                and head[LOCAL.size: LOCAL.size + nlen] == m.name.encode("utf-8" if flags & FLAG_UTF8 else "cp437"))
        self._headers[id(m)] = start, same
        return start, same

    def read_raw(self, m: Member) -> bytes:
        """The member's compressed bytes."""
        return os.pread(self._fd, m.csize, self.data_offset(m)) if m.csize else b""

    def _check_method(self, m: Member) -> None:
        if m.flags & FLAG_ENCRYPTED:
            raise CiError(f"encrypted member not supported: {m.name}")
        if m.method not in (STORED, DEFLATED):
            raise CiError(f"unsupported compression method {m.method} for {m.name}")

    def _read_small(self, m: Member) -> bytes:
        """A member of at most SMALL bytes in one read and one inflate: torch's 12k small files
        cost a generator and a loop each through iter_chunks, a quarter of its verify."""
        self._check_method(m)
        raw = os.pread(self._fd, m.csize, self.data_offset(m)) if m.csize else b""
        if len(raw) < m.csize:
            raise CiError(f"truncated zip: {m.name}")
        if m.method == DEFLATED:
            d = inflate_lib.decompressobj(-15)
            try:
                out = d.decompress(raw, m.usize + 1) + d.flush()  # +1: one byte past the size is corrupt
            except INFLATE_ERRORS as e:
                raise CiError(f"corrupt data for {m.name}: {e}") from None
        else:
            out = raw
        if len(out) != m.usize or crc32(out) != m.crc:
            raise CiError(f"corrupt data for {m.name}: CRC or size does not match the zip directory")
        return out

    def iter_chunks(self, m: Member, check_crc: bool = True) -> Iterable[bytes]:
        """Uncompressed content in chunks, CRC-checked at the end (memory stays flat for 1 GB libraries).
        `check_crc=False` leaves the CRC to a caller that computes it on another thread (the size is
        still checked)."""
        self._check_method(m)
        d = inflate_lib.decompressobj(-15) if m.method == DEFLATED else None
        pos, crc, n = self.data_offset(m), 0, 0
        end = pos + m.csize
        while pos < end:
            raw = os.pread(self._fd, min(CHUNK * 4, end - pos), pos)
            if not raw:
                raise CiError(f"truncated zip: {m.name}")
            pos += len(raw)
            while raw:  # bounded output per step: a deflate bomb never gets more memory than a chunk
                try:
                    out = d.decompress(raw, CHUNK * 4) if d else raw
                except INFLATE_ERRORS as e:
                    raise CiError(f"corrupt data for {m.name}: {e}") from None
                raw = d.unconsumed_tail if d else b""
                if check_crc:
                    crc = crc32(out, crc)
                n += len(out)
                if n > m.usize:
                    raise CiError(f"corrupt data for {m.name}: it inflates past the size the zip directory "
                                  f"gives ({m.usize} bytes)")
                yield out
        if d:
            tail = d.flush()
            if check_crc:
                crc = crc32(tail, crc)
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
        return self._read_small(m) if m.usize <= SMALL else b"".join(self.iter_chunks(m))

    def read_text(self, name: str, limit: int) -> str:
        """A dist-info text file: UTF-8, size-capped; anything else is bad input."""
        try:
            return self.read(name, limit).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CiError(f"{self.path.name}: {name} is not valid UTF-8 (byte {e.start})") from None

    @contextlib.contextmanager
    def seekable(self, m: Member) -> Iterator[BinaryIO]:
        """The member for readers that seek all over it (ELF section and symbol tables): in memory when
        small, else inflated once into a temporary file, so a 1 GB library never sits in memory."""
        if m.usize <= IN_MEMORY_CAP:
            yield io.BytesIO(self.read(m))
            return
        with tempfile.TemporaryDirectory(prefix="wheelci-member-") as tmp, \
                open(self.extract(m, Path(tmp) / "member"), "rb") as f:
            yield f

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
        if m.usize <= SMALL:
            h.update(self._read_small(m))
            return f"{algo}={b64(h.digest())}"
        if m.usize < PIPELINE_MIN:
            for chunk in self.iter_chunks(m):
                h.update(chunk)
            return f"{algo}={b64(h.digest())}"
        chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        crc = 0

        def consume() -> None:  # the CRC too: inflating is the slower half (0.66 s vs 0.35 s of sha256)
            nonlocal crc
            while (chunk := chunks.get()) is not None:
                h.update(chunk)
                crc = crc32(chunk, crc)
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
        return f"{algo}={b64(h.digest())}"

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
        size = BATCH
        for m in big_first:
            if size >= BATCH:
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
    with open(path, "rb") as f:
        cd_offset, cd_size, count = _directory_extent(f, os.fstat(f.fileno()).st_size, path.name)
        f.seek(cd_offset)
        cd = f.read(cd_size)
    return _entries(cd, count, cd_offset, path.name), cd_offset


def _directory_extent(f: BinaryIO, size: int, where: str) -> tuple[int, int, int]:
    """(offset, size, entry count) of the central directory, from the end records where zipfile (what pip
    installs with) finds them; a count of -1: read entries to the directory's end."""
    head = f.read(4)
    tail_len = min(size, EOCD.size + U16)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    # As zipfile does: a record at the very end with no comment first, else the last signature.
    # A bare search from the end can find the signature inside the record's own fields (a central
    # directory at offset 0x06054b50) and refuse a valid zip as truncated.
    if tail[-EOCD.size:-EOCD.size + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
        pos = len(tail) - EOCD.size
    else:
        pos = tail.rfind(b"PK\x05\x06")
    if pos < 0 or pos + EOCD.size > len(tail):
        if head == b"PK\x03\x04":
            raise CiError(f"truncated zip (no end of central directory): {where}")
        raise CiError(f"not a zip file: {where}")
    eocd_at = size - tail_len + pos
    _, disk, cd_disk, _n_disk, count, cd_size, cd_offset, _clen = EOCD.unpack_from(tail, pos)
    if disk or cd_disk:
        raise CiError(f"multi-disk zip not supported: {where}")
    # Where zipfile (pip) looks: a ZIP64 locator right before the end record, whatever the end
    # record says, and the ZIP64 end record right before the locator, not where the locator points.
    loc_at = eocd_at - LOCATOR64.size
    f.seek(max(loc_at, 0))  # a crafted end record near the start: no seek before the file
    loc = f.read(LOCATOR64.size)
    if loc_at >= 0 and len(loc) == LOCATOR64.size and LOCATOR64.unpack(loc)[0] == SIG_LOCATOR64:
        eocd64_at = loc_at - EOCD64.size
        f.seek(max(eocd64_at, 0))
        rec = f.read(EOCD64.size)
        if eocd64_at < 0 or len(rec) < EOCD64.size or EOCD64.unpack(rec)[0] != SIG_EOCD64:
            raise CiError(f"corrupt zip (ZIP64 end record missing): {where}")
        if LOCATOR64.unpack(loc)[2] != eocd64_at:
            raise CiError(f"corrupt zip (the ZIP64 locator points away from the ZIP64 end record): {where}")
        _, _, _, _, disk, cd_disk, _, count, cd_size, cd_offset = EOCD64.unpack(rec)
        if disk or cd_disk:
            raise CiError(f"multi-disk zip not supported: {where}")
        cd_end = eocd64_at
    elif cd_size == U32 or cd_offset == U32:
        raise CiError(f"corrupt zip (ZIP64 locator missing): {where}")
    else:
        if count == U16:
            count = -1  # exactly 65535 entries without ZIP64 records (zipfile does this): read to the end
        cd_end = eocd_at
    # zipfile reads the directory that ends at the end record (taking any gap for a prepended
    # stub); we read where the offset points. Only when the two agree is it one wheel.
    if cd_offset + cd_size != cd_end:
        raise CiError(f"corrupt zip (the central directory does not end where its end record starts: "
                      f"a second directory or a prepended stub): {where}")
    return cd_offset, cd_size, count


def _entries(cd: bytes, count: int, cd_offset: int, where: str) -> list[Member]:
    """The central directory's entries, each name safe and installed to a path no other entry takes."""
    members: list[Member] = []
    seen: dict[str, str] = {}  # canonical name -> the name as written
    pos = 0
    while len(members) < count or (count < 0 and pos < len(cd)):
        if pos + CENTRAL.size > len(cd):
            raise CiError(f"corrupt zip (central directory too short): {where}")
        (sig, made_by, need, flags, method, dtime, ddate, crc, csize, usize, nlen, xlen, clen, _disk,
         _iattr, eattr, offset) = CENTRAL.unpack_from(cd, pos)
        if sig != SIG_CENTRAL:
            raise CiError(f"corrupt zip (bad central directory entry): {where}")
        raw_name = cd[pos + CENTRAL.size: pos + CENTRAL.size + nlen]
        extra = cd[pos + CENTRAL.size + nlen: pos + CENTRAL.size + nlen + xlen]
        pos += CENTRAL.size + nlen + xlen + clen
        if need & 0xFF > 63:  # zipfile refuses versions it cannot extract
            raise CiError(f"unsupported zip version {need & 0xFF} for a member of {where}")
        try:
            name = raw_name.decode("utf-8" if flags & FLAG_UTF8 else "cp437")
        except UnicodeDecodeError:
            raise CiError(f"member name is not valid UTF-8 though the zip says it is: {raw_name!r} in "
                          f"{where}") from None
        usize, csize, offset = _zip64_extra(extra, usize, csize, offset)
        check_name(name)
        key = canonical_name(name)
        if key in seen:
            other = seen[key]
            raise CiError(f"duplicate member in wheel: {name}" if other == name else
                          f"member {name!r} is the same file as {other!r} once installed (aliased "
                          f"through './' or '//'): {where}")
        seen[key] = name
        m = Member(name, method, flags, crc, csize, usize, dtime, ddate, eattr, made_by, offset)
        if m.mode & S_IFMT == S_IFLNK:
            raise CiError(f"symlink member in wheel (wheels cannot carry symlinks): {name}")
        if offset + LOCAL.size > cd_offset:
            raise CiError(f"truncated or corrupt zip (member {name} outside the archive): {where}")
        members.append(m)
    if pos != len(cd):  # zipfile reads entries until the directory's size, ignoring the count
        raise CiError(f"corrupt zip (the central directory holds more than the {count} entries its end record "
                      f"counts): {where}")
    return members
