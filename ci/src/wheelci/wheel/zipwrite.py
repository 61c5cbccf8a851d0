"""Writing wheels: copied members as their compressed bytes, new content deflated, RECORD regenerated.

    w = WheelWriter(WheelName.parse("pkg_libs-1.0-py3-none-any.whl"))
    w.copy(wa, wa.get("pkg/lib/libx.so"), name="pkg_libs/lib/libx.so")  # compressed bytes, RECORD hash reused
    w.add("pkg_libs-1.0.dist-info/METADATA", text.encode())
    path = w.write(dest_dir)                                             # atomic; returns the new wheel

An untouched member costs a kernel copy (copy_file_range) of its bytes, so the cost of an edit is the cost
of the edited members. Output rules (the wheel spec's and reproducibility's): .dist-info members
physically last and RECORD last; RECORD regenerated (hashes of copied members reused from the source
RECORD); file modes kept; ZIP64 records written whenever a size, offset or the entry count needs them;
timestamps from SOURCE_DATE_EPOCH when set (for every member), else copied members keep theirs and new
members get the newest timestamp of the source, so the same inputs always give the same bytes; written
to a temp file and renamed (ci.util.atomic).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import time
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Union

from wheelci.errors import CiError
from wheelci.util import epoch
from wheelci.util.atomic import atomic_path
from wheelci.wheel.names import WheelName
from wheelci.wheel.record import b64, format_record
from wheelci.wheel.zipformat import (BLOCK, CENTRAL, CHUNK, COMPRESS_LEVEL, DEFLATED, EOCD, EOCD64,
                                     FLAG_DESCRIPTOR, FLAG_UTF8, LOCAL, LOCATOR64, SIG_CENTRAL, SIG_EOCD,
                                     SIG_EOCD64, SIG_LOCAL, SIG_LOCATOR64, S_IFMT, S_IFREG, U16, U32, UNIX, Member,
                                     canonical_name, check_name, crc32)
from wheelci.wheel.zipread import WheelArchive

Content = Union[bytes, Path]  # new content: bytes, or a file to stream from


def _dos_time(epoch: float) -> tuple[int, int]:
    t = time.gmtime(max(epoch, 315532800))  # zip cannot express times before 1980
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday


def _source_date_epoch() -> tuple[int, int] | None:
    fixed = epoch.current()
    return None if fixed is None else _dos_time(fixed)


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
        check_name(p.name)
        if p.name == f"{self.dist_info}/RECORD":
            return  # always regenerated
        key = canonical_name(p.name)
        if (other := self._canonical.get(key)) is not None:
            raise CiError(f"duplicate member in output wheel: {p.name}" if other == p.name else
                          f"member {p.name!r} would be the same file as {other!r} once installed")
        if p.content is not None and (p.mode & S_IFMT not in (0, S_IFREG) or p.mode & 0o7000):
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
        sources = {(st.st_dev, st.st_ino) for st in (os.fstat(a.fileno()) for a in archives.values())}
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
            fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)  # atomic_path gives it a plain file's mode
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
        z64 = self.force or csize >= U32 or usize >= U32
        extra = struct.pack("<HHQQ", 1, 16, usize, csize) if z64 else b""
        self._w(LOCAL.pack(SIG_LOCAL, 45 if z64 else 20, flags, method, t, d, crc,
                            U32 if z64 else csize, U32 if z64 else usize, len(name), len(extra)) + name + extra)

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
        if (same and not sde and not self.force and p.name == m.name and m.csize < U32 and m.usize < U32
                and (p.name.isascii() or m.flags & FLAG_UTF8)):
            flags, (t, d) = m.flags, (m.dos_time, m.dos_date)
            length = data_at - m.header_offset + m.csize
            self._queue(src.fileno(), m.header_offset, length)  # header and data verbatim
            self.pos += length
        else:
            name = p.name.encode("utf-8")
            flags = (m.flags & ~(FLAG_DESCRIPTOR | FLAG_UTF8)) | (FLAG_UTF8 if not p.name.isascii() else 0)
            t, d = sde or (m.dos_time, m.dos_date)
            self._local(name, flags, m.method, t, d, m.crc, m.csize, m.usize)
            self._queue(src.fileno(), data_at, m.csize)
            self.pos += m.csize
        attr = m.external_attr if m.made_by >> 8 == UNIX and m.mode else ((0o40755 if m.is_dir else 0o100644) << 16)
        self.entries.append(Member(p.name, m.method, flags, m.crc, m.csize, m.usize, t, d, attr, UNIX << 8, offset))
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
        flags = FLAG_UTF8 if not name_s.isascii() else 0
        if isinstance(content, Path):
            blocks: Iterable[bytes | memoryview] = _file_chunks(content)
        else:
            data = memoryview(bytes(content or b""))
            blocks = (data[i: i + BLOCK] for i in range(0, len(data), BLOCK))
        parts, crc, usize, digest = _deflate(blocks)
        cdata = b"".join(parts)
        offset = self.pos
        t, d = when
        self._local(name, flags, DEFLATED, t, d, crc, len(cdata), usize)
        self._w(cdata)
        if not mode & S_IFMT:
            mode |= S_IFREG
        self.entries.append(Member(name_s, DEFLATED, flags, crc, len(cdata), usize, t, d, mode << 16, UNIX << 8,
                                   offset))
        return name_s, f"sha256={b64(digest)}", usize

    def _central(self) -> None:
        cd_start = self.pos
        buf = bytearray()
        for e in self.entries:
            name = e.name.encode("utf-8")
            fields, z = [], {}
            z["usize"] = self.force or e.usize >= U32
            z["csize"] = self.force or e.csize >= U32
            z["offset"] = self.force or e.header_offset >= U32
            for key, val in (("usize", e.usize), ("csize", e.csize), ("offset", e.header_offset)):
                if z[key]:
                    fields.append(val)
            extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
            need = 45 if fields else 20
            buf += CENTRAL.pack(SIG_CENTRAL, (UNIX << 8) | need, need, e.flags, e.method, e.dos_time,
                                 e.dos_date, e.crc, U32 if z["csize"] else e.csize,
                                 U32 if z["usize"] else e.usize, len(name), len(extra), 0, 0, 0,
                                 e.external_attr, U32 if z["offset"] else e.header_offset)
            buf += name + extra
        self._w(bytes(buf))
        cd_size, n = len(buf), len(self.entries)
        z64 = self.force or n >= U16 or cd_size >= U32 or cd_start >= U32
        if z64:
            eocd64_at = self.pos
            self._w(EOCD64.pack(SIG_EOCD64, EOCD64.size - 12, (UNIX << 8) | 45, 45, 0, 0, n, n,
                                 cd_size, cd_start))
            self._w(LOCATOR64.pack(SIG_LOCATOR64, 0, eocd64_at, 1))
        self._w(EOCD.pack(SIG_EOCD, 0, 0, min(n, U16) if not z64 else U16, min(n, U16) if not z64 else U16,
                           U32 if z64 else cd_size, U32 if z64 else cd_start, 0))


def _file_chunks(path: Path) -> Iterable[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(BLOCK):
            yield chunk


def _deflate_block(data: bytes | memoryview, last: bool) -> bytes:
    c = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _with_last(blocks: Iterable[bytes | memoryview]) -> Iterable[tuple[bytes | memoryview, bool]]:
    it = iter(blocks)
    prev = next(it, None)
    if prev is None:
        yield b"", True
        return
    for cur in it:
        yield prev, False
        prev = cur
    yield prev, True


def _deflate(blocks: Iterable[bytes | memoryview]) -> tuple[list[bytes], int, int, bytes]:
    """Raw deflate of fixed-size blocks on every core, pigz-style: each block is compressed on its
    own and ends on a byte boundary (sync flush), so the concatenation is one valid stream. Output
    depends only on the content (fixed block size), never on the number of threads. Returns
    (compressed parts, crc32, size, sha256 digest)."""
    sha, crc, usize = hashlib.sha256(), 0, 0
    parts: list[bytes] = []
    pending: deque[Future[bytes]] = deque()
    pool: ThreadPoolExecutor | None = None
    workers = len(os.sched_getaffinity(0))  # the cores this process may use (taskset, cgroups), not the machine's
    try:
        for data, last in _with_last(blocks):
            sha.update(data)
            crc = crc32(data, crc)
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
        chunk = os.pread(src_fd, min(CHUNK * 8, count - done), offset + done)
        if not chunk:
            raise CiError("truncated zip: member data ends early")
        view = memoryview(chunk)
        while view:
            n = os.write(dst_fd, view)
            view = view[n:]
        done += len(chunk)
