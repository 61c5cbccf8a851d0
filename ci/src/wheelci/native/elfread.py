"""Bounded reads of the ELF structures the stages use: header, program and section headers, the dynamic
segment, string tables, dynamic symbols and the versions they need.

A shared library in a wheel is untrusted input. Every offset, size and count is checked against the
file before it is used, and every loop is bounded by the file's size: program headers, dynamic entries,
section headers, symbols and version entries are each at most the bytes they occupy, and the entries
pointing into a string table may name at most twice its size in strings (plus a small allowance). Anything out of bounds is one CiError naming what is wrong, never another exception and never a
loop. Readers seek and read the stream only where asked (a zip member read forwards inflates once).

Both classes (32/64-bit) and both byte orders are read; only what the dynamic linker and auditwheel
use is decoded.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from wheelci.errors import CiError

MAGIC = b"\x7fELF"
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
ET_EXEC = 2
SHT_STRTAB, SHT_DYNSYM, SHT_GNU_VERNEED, SHT_GNU_VERSYM = 3, 11, 0x6FFFFFFE, 0x6FFFFFFF
SHN_UNDEF, SHN_XINDEX = 0, 0xFFFF
NAME_MAX = 4096  # PATH_MAX: a DT_NEEDED or SONAME longer than this is no file the loader can open
STRING_ALLOWANCE = 64 << 10  # strings beyond twice their table's size: a few long names sharing a tail


class Stream(Protocol):
    """What the readers use of a file: a BinaryIO, or the seekable view of a wheel member (elf.member_view)."""

    def seek(self, offset: int, whence: int = ..., /) -> int: ...
    def read(self, n: int, /) -> bytes: ...


# struct layouts per class: (ELF header after e_ident, program header, section header, dynamic entry, symbol)
_LAYOUT = {
    False: ("HHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", "iI", "IIIBBH"),
    True: ("HHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", "qQ", "IBBHQQ"),
}


@dataclass(frozen=True)
class Header:
    """The ELF header fields the readers need, with the file's size."""

    order: str  # struct byte order: '<' or '>'
    wide: bool  # ELFCLASS64
    type: int
    phoff: int
    phentsize: int
    phnum: int
    shoff: int
    shentsize: int
    shnum: int
    shstrndx: int
    size: int

    def fmt(self, index: int) -> struct.Struct:
        return struct.Struct(self.order + _LAYOUT[self.wide][index])


@dataclass(frozen=True)
class Segment:
    type: int
    offset: int
    vaddr: int
    filesz: int


@dataclass(frozen=True)
class Section:
    name: int  # offset in the section-name string table
    type: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


def read_at(stream: Stream, offset: int, n: int, size: int, what: str) -> bytes:
    """Exactly n bytes at offset, all inside the file, else CiError naming `what`."""
    if offset < 0 or n < 0 or offset + n > size:
        raise CiError(f"{what}: {n} bytes at offset {offset}, outside the file ({size} bytes)")
    stream.seek(offset)
    data = stream.read(n)
    if len(data) != n:
        raise CiError(f"{what}: the file ends early")
    return data


def read_header(stream: Stream) -> Header | None:
    """The ELF header; None when the stream is not ELF. An ELF file the header makes no sense of is
    a CiError."""
    stream.seek(0)
    ident = stream.read(16)
    if ident[:4] != MAGIC:
        return None
    size = stream.seek(0, io.SEEK_END)
    if len(ident) < 16 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise CiError("ELF header: unknown class or byte order")
    wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    layout = struct.Struct(order + _LAYOUT[wide][0])
    (etype, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum,
     shstrndx) = layout.unpack(read_at(stream, 16, layout.size, size, "ELF header"))
    return Header(order, wide, etype, phoff, phentsize, phnum, shoff, shentsize, shnum, shstrndx, size)


def _table(stream: Stream, h: Header, offset: int, count: int, entsize: int, layout: struct.Struct,
           what: str) -> Iterator[tuple[int, ...]]:
    """`count` fixed-size entries at offset: each entry the size the class defines (as the loader
    requires), the whole table inside the file."""
    if count == 0:
        return iter(())
    if entsize != layout.size:
        raise CiError(f"{what}: entries of {entsize} bytes where this ELF class has {layout.size}")
    return layout.iter_unpack(read_at(stream, offset, count * entsize, h.size, what))


def segments(stream: Stream, h: Header) -> list[Segment]:
    layout = h.fmt(1)
    out = []
    for p in _table(stream, h, h.phoff, h.phnum, h.phentsize, layout, "program headers"):
        # 64-bit: type, flags, offset, vaddr, paddr, filesz, ...; 32-bit: type, offset, vaddr, paddr, filesz, ...
        out.append(Segment(p[0], p[2], p[3], p[5]) if h.wide else Segment(p[0], p[1], p[2], p[4]))
    return out


def dynamic_entries(stream: Stream, h: Header, dynamic: Segment) -> list[tuple[int, int]]:
    """(tag, value) of the dynamic segment, up to DT_NULL: at most one per entry the segment holds."""
    layout = h.fmt(3)
    data = read_at(stream, dynamic.offset, dynamic.filesz - dynamic.filesz % layout.size, h.size,
                   "dynamic segment")
    out = []
    for tag, value in layout.iter_unpack(data):
        if tag == 0:
            break
        out.append((tag, value))
    return out


def file_offset(segs: Iterable[Segment], address: int) -> tuple[int, int] | None:
    """(file offset, bytes to the end of the loaded segment's file image) of a virtual address."""
    for s in segs:
        if s.type == PT_LOAD and s.vaddr <= address < s.vaddr + s.filesz:
            return s.offset + address - s.vaddr, s.filesz - (address - s.vaddr)
    return None


class StringTable:
    """NUL-terminated strings at offsets into one table of the file, bounded.

    A string must end inside its table, and each is read from the file once. Every reference is
    charged its string's length, repeats included, against twice the table's size plus
    STRING_ALLOWANCE: a linker shares string tails, and an entry may repeat, but never by much. N
    entries pointing into one long string (which a reader that materialises each entry, such as
    pyelftools under auditwheel, pays N times) are refused, not read N times.
    """

    def __init__(self, stream: Stream, offset: int, size: int, file_size: int, what: str):
        if offset < 0 or size < 0 or offset + size > file_size:
            raise CiError(f"{what}: {size} bytes at offset {offset}, outside the file ({file_size} bytes)")
        self.stream, self.offset, self.size, self.what = stream, offset, size, what
        self.budget = 2 * size + STRING_ALLOWANCE
        self._cache: dict[int, bytes] = {}

    def get(self, index: int, limit: int | None = None) -> bytes:
        """The string at index (without its NUL); with `limit`, one longer than that is a CiError."""
        found = self._cache.get(index)
        if found is not None:
            if limit is not None and len(found) > limit:
                raise CiError(f"{self.what}: a name longer than {limit} bytes at offset {index}")
            return self._charge(found)
        if not 0 <= index < self.size:
            raise CiError(f"{self.what}: string offset {index} outside the table ({self.size} bytes)")
        end = min(self.size, index + limit + 1) if limit is not None else self.size
        parts, pos, chunk = [], index, 256
        while pos < end:
            self.stream.seek(self.offset + pos)
            data = self.stream.read(min(chunk, end - pos))
            if not data:
                raise CiError(f"{self.what}: the file ends early")
            nul = data.find(b"\0")
            parts.append(data if nul < 0 else data[:nul])
            if nul >= 0:
                break
            pos, chunk = pos + len(data), min(chunk * 2, 1 << 20)
        else:
            if limit is not None and end < self.size:
                raise CiError(f"{self.what}: a name longer than {limit} bytes at offset {index}")
            raise CiError(f"{self.what}: the string at offset {index} runs past the end of the table")
        value = self._cache[index] = b"".join(parts)
        return self._charge(value)

    def _charge(self, value: bytes) -> bytes:
        self.budget -= len(value) + 1
        if self.budget < 0:
            raise CiError(f"{self.what}: its entries name more than {2 * self.size + STRING_ALLOWANCE} bytes of "
                          f"strings from a table of {self.size} (the same or overlapping strings, over and over)")
        return value

    def is_one_of(self, index: int, names: Iterable[bytes]) -> bytes | None:
        """Which of `names` the string at index is, reading no more than the longest of them."""
        names = list(names)
        longest = max(map(len, names), default=0)
        if not 0 <= index < self.size:
            return None
        self.stream.seek(self.offset + index)
        head = self.stream.read(min(longest + 1, self.size - index))
        return next((n for n in names if head[:len(n) + 1] == n + b"\0"), None)


def sections(stream: Stream, h: Header) -> list[Section]:
    """The section headers (none when the file has none). An e_shnum of 0 with a table present means
    the count is in section 0's sh_size (more than 65279 sections): bounded by the file like any other."""
    if h.shoff == 0:
        return []
    layout = h.fmt(2)
    count = h.shnum
    if count == 0:
        first = next(_table(stream, h, h.shoff, 1, h.shentsize, layout, "section headers"))
        count = first[5]
        if count * max(h.shentsize, 1) > h.size:
            raise CiError(f"section headers: {count} sections cannot fit in a file of {h.size} bytes")
    out = []
    for s in _table(stream, h, h.shoff, count, h.shentsize, layout, "section headers"):
        # 64/32-bit alike: name, type, flags, addr, offset, size, link, info, addralign, entsize
        out.append(Section(s[0], s[1], s[4], s[5], s[6], s[7], s[9]))
    return out


def linked_strings(stream: Stream, h: Header, secs: list[Section], section: Section, what: str) -> StringTable:
    """The string table a section's sh_link names."""
    if not 0 < section.link < len(secs) or secs[section.link].type != SHT_STRTAB:
        raise CiError(f"{what}: sh_link {section.link} is not a string table")
    table = secs[section.link]
    return StringTable(stream, table.offset, table.size, h.size, f"{what} string table")


def section_name_table(stream: Stream, h: Header, secs: list[Section]) -> StringTable | None:
    """The section-name string table (e_shstrndx), None when the file names no sections."""
    index = h.shstrndx if h.shstrndx != SHN_XINDEX else (secs[0].link if secs else 0)
    if not secs or not 0 < index < len(secs):
        return None
    names = secs[index]
    return StringTable(stream, names.offset, names.size, h.size, "section name table")


def section_names(stream: Stream, h: Header, secs: list[Section], wanted: Iterable[bytes]) -> set[str]:
    """Which of the `wanted` section names the file has (each name read no further than the longest)."""
    table = section_name_table(stream, h, secs)
    if table is None:
        return set()
    wanted = list(wanted)
    return {found.decode() for s in secs if (found := table.is_one_of(s.name, wanted)) is not None}


def first_of_type(secs: list[Section], kind: int) -> Section | None:
    return next((s for s in secs if s.type == kind), None)


def symbols(stream: Stream, h: Header, dynsym: Section) -> list[tuple[int, int]]:
    """(st_name, st_shndx) of each symbol of a symbol table section."""
    layout = h.fmt(4)
    rows = _table(stream, h, dynsym.offset, dynsym.size // max(dynsym.entsize, 1), dynsym.entsize, layout,
                  "dynamic symbol table")
    return [(r[0], r[3]) for r in rows] if h.wide else [(r[0], r[5]) for r in rows]


def symbol_versions(stream: Stream, h: Header, versym: Section) -> tuple[int, ...]:
    """The version index of each dynamic symbol (.gnu.version), hidden bit cleared."""
    n = versym.size // 2
    data = read_at(stream, versym.offset, 2 * n, h.size, "symbol version table")
    return tuple(v & 0x7FFF for v in struct.unpack(f"{h.order}{n}H", data))


_VERNEED = struct.Struct("HHIII")  # vn_version, vn_cnt, vn_file, vn_aux, vn_next
_VERNAUX = struct.Struct("IHHII")  # vna_hash, vna_flags, vna_other, vna_name, vna_next


def version_needs(stream: Stream, h: Header, secs: list[Section], verneed: Section) -> dict[int, str]:
    """Version index -> version name (GLIBC_2.29, ...) from .gnu.version_r.

    Walked as auditwheel (pyelftools) and readelf walk it: sh_info entries, each with vn_cnt
    auxiliaries, chained by relative offsets. Every entry lies inside the section and each chain has
    exactly the length its count says: a count that disagrees with the chain (which makes pyelftools
    read one entry four billion times) is a CiError.
    """
    data = read_at(stream, verneed.offset, verneed.size, h.size, "version needs (.gnu.version_r)")
    strings = linked_strings(stream, h, secs, verneed, "version needs")
    need, aux = struct.Struct(h.order + _VERNEED.format), struct.Struct(h.order + _VERNAUX.format)
    if verneed.info * need.size > len(data):
        raise CiError(f"version needs: {verneed.info} entries cannot fit in {len(data)} bytes")
    out: dict[int, str] = {}
    pos, left = 0, len(data) // need.size  # entries the section can hold: every walk step takes one
    for i in range(verneed.info):
        if pos + need.size > len(data):
            raise CiError("version needs: an entry lies outside the section")
        _version, count, _file, aux_off, next_off = need.unpack_from(data, pos)
        at = pos + aux_off
        left -= 1 + count
        if left < 0:
            raise CiError("version needs: the entries count more versions than the section holds")
        for j in range(count):
            if at + aux.size > len(data):
                raise CiError("version needs: a version entry lies outside the section")
            _hash, _flags, other, name, aux_next = aux.unpack_from(data, at)
            out[other] = strings.get(name).decode("utf-8", "surrogateescape")
            if aux_next == 0 and j + 1 < count:
                raise CiError(f"version needs: {count} versions counted, the chain ends after {j + 1}")
            at += aux_next
        if next_off == 0 and i + 1 < verneed.info:
            raise CiError(f"version needs: {verneed.info} entries counted (sh_info), the chain ends after {i + 1}")
        pos += next_off
    return out
