"""Python extension modules among a wheel's ELF files: those exporting a `PyInit_*` function.

An extension module is found by its package path (`PIL/_imaging.cpython-311-...so` is `PIL._imaging`),
so it must stay where it is: no preload or RPATH brings it back from another wheel. A library loaded
as a library (by SONAME, through DT_NEEDED or dlopen) may move. The file name does not tell them
apart (`_C.so`, `foo.abi3.so`, an extension named `libfoo.so`); the export does: CPython calls
`PyInit_<name>`, and a shared library has no reason to export one.

Read as the dynamic linker reads it, never through the section headers at the end of the file: the
program headers, the dynamic entries (DT_SYMTAB, DT_STRTAB, DT_STRSZ, DT_SYMENT, DT_HASH,
DT_GNU_HASH), then the hash table, the symbols and their names. These sit near the start of the file,
so a 1 GB library in a wheel costs an inflate of its first pages, twice at most (the dynamic segment
comes after the code). Every offset, size and count is bounded by the file (ci.native.elfread).
"""

from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING, Callable, Iterable

from wheelci.errors import CiError
from wheelci.native import elfread
from wheelci.native.elf import member_view

if TYPE_CHECKING:
    from wheelci.wheel.zipread import WheelArchive

DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT, DT_GNU_HASH = 4, 5, 6, 10, 11, 0x6FFFFEF5
PREFIX = b"PyInit_"
MAX_TABLES = 256 << 20  # dynamic symbols and their names, read whole; libtorch_cuda.so's take a few MB
_EXPORTED = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE


def _offset(segs: list[elfread.Segment], address: int, what: str) -> int:
    where = elfread.file_offset(segs, address)
    if where is None:
        raise CiError(f"{what}: address {address:#x} is in no loaded segment")
    return where[0]


def _symbol_count(stream: elfread.Stream, h: elfread.Header, segs: list[elfread.Segment], tags: dict[int, int],
                  entsize: int) -> int:
    """How many dynamic symbols there are: DT_HASH's nchain, else what DT_GNU_HASH's buckets and
    chains reach (as the loader reads them); every step bounded by the file."""
    most = h.size // entsize

    def u32(offset: int, what: str) -> int:
        return int.from_bytes(elfread.read_at(stream, offset, 4, h.size, what), "little" if h.order == "<" else "big")

    if DT_HASH in tags:
        return min(u32(_offset(segs, tags[DT_HASH], "DT_HASH") + 4, "DT_HASH"), most)
    if DT_GNU_HASH not in tags:
        return 0
    base = _offset(segs, tags[DT_GNU_HASH], "DT_GNU_HASH")
    nbuckets, symoffset, bloom = u32(base, "DT_GNU_HASH"), u32(base + 4, "DT_GNU_HASH"), u32(base + 8, "DT_GNU_HASH")
    buckets_at = base + 16 + bloom * (8 if h.wide else 4)
    raw = elfread.read_at(stream, buckets_at, 4 * nbuckets, h.size, "GNU hash buckets")
    last = max(struct.unpack(f"{h.order}{nbuckets}I", raw), default=0)
    if last < symoffset:  # every bucket empty: only the symbols before symoffset
        return min(symoffset, most)
    chain_at = buckets_at + 4 * nbuckets + 4 * (last - symoffset)
    while last < most:  # the last bucket's chain ends at the entry with its low bit set
        if u32(chain_at, "GNU hash chain") & 1:
            return last + 1
        last, chain_at = last + 1, chain_at + 4
    raise CiError("GNU hash chain: runs past the file")


def _exports_pyinit(stream: elfread.Stream) -> bool:
    h = elfread.read_header(stream)
    if h is None:
        return False
    segs = elfread.segments(stream, h)
    dynamic = next((s for s in segs if s.type == elfread.PT_DYNAMIC), None)
    tags: dict[int, int] = {}
    for tag, value in elfread.dynamic_entries(stream, h, dynamic) if dynamic else ():
        tags.setdefault(tag, value)
    if DT_SYMTAB not in tags or DT_STRTAB not in tags:
        return False
    layout = h.fmt(4)
    entsize = tags.get(DT_SYMENT, layout.size)
    if entsize != layout.size:
        raise CiError(f"dynamic symbols: entries of {entsize} bytes where this ELF class has {layout.size}")
    symtab, strtab = _offset(segs, tags[DT_SYMTAB], "DT_SYMTAB"), _offset(segs, tags[DT_STRTAB], "DT_STRTAB")
    strsz = tags.get(DT_STRSZ, 0)
    count = _symbol_count(stream, h, segs, tags, entsize)
    if count * entsize + strsz > MAX_TABLES:
        raise CiError(f"dynamic symbols: over the {MAX_TABLES >> 20} MiB this tool reads")
    # In file order (a linker puts the symbols before their names): the member is inflated once more.
    reads = sorted([(symtab, count * entsize, "dynamic symbols"), (strtab, strsz, "dynamic string table")])
    got = {what: elfread.read_at(stream, off, n, h.size, what) for off, n, what in reads}
    strings, symbols = got["dynamic string table"], got["dynamic symbols"]
    if PREFIX not in strings:
        return False
    for sym in layout.iter_unpack(symbols):
        # 64-bit: name, info, other, shndx, value, size; 32-bit: name, value, size, info, other, shndx
        name, info, shndx = (sym[0], sym[1], sym[3]) if h.wide else (sym[0], sym[3], sym[5])
        if shndx != elfread.SHN_UNDEF and info >> 4 in _EXPORTED and strings.startswith(PREFIX, name):
            return True
    return False


def exports_pyinit(chunks: Callable[[], Iterable[bytes]], size: int) -> bool:
    """Whether the ELF file (its bytes as chunks, `size` long) exports a PyInit_* function: a Python
    extension module. CiError for a file whose fields point outside it."""

    stream = member_view(chunks, size)
    try:
        return _exports_pyinit(stream)
    finally:
        stream.close()


def extension_modules(wa: WheelArchive, names: Iterable[str]) -> set[str]:
    """The members among `names` of an open wheel (ci.wheel.zipread.WheelArchive) that are Python
    extension modules."""
    found = set()
    for name in names:
        m = wa.get(name)
        try:
            if m is not None and exports_pyinit(functools.partial(wa.iter_chunks, m, check_crc=False), m.usize):
                found.add(name)
        except CiError as e:
            raise CiError(f"{wa.path.name}: {name}: {e}") from None
    return found
