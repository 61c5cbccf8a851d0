"""The device code in a library, read back from its CUDA fat binaries: which cubins (SM) and PTX it holds.

nvcc puts the device code of each translation unit in a fat binary container, and the linker
concatenates them in one section (`.nv_fatbin`; `__nv_relfatbin` for relocatable device code). A
container is a 16-byte header (magic 0xBA55ED50, version, header size, size of what follows) and then
entries, each a header (kind: 1 PTX, 2 ELF cubin, 4 LTO IR; its header size and payload size; the
target SM; the PTX ISA version; flags, of which two say the payload is compressed, LZ4 or Zstandard)
and its payload. Only the headers are read: a compressed payload is never inflated, and a section is
read header by header, not whole.

A library in a wheel is untrusted input: every size is checked against the section it lies in, each
step moves forwards by at least a header, so the loop is bounded by the section's size; anything out
of bounds is one CiError.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

from wheelci.errors import CiError
from wheelci.native import elfread
from wheelci.native.elf import looks_like_shared_lib
from wheelci.wheel.zipread import WheelArchive

MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KINDS = {1: "ptx", 2: "elf", 4: "lto"}
COMPRESSED_FLAGS = 0x2000 | 0x8000  # LZ4, Zstandard
ARCH_SPECIFIC, FAMILY_SPECIFIC = 0x100000, 0x200000  # sm_90a, sm_100f (as nvcc 13.0 writes them)
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # kind, version, header size, payload size, compressed size, -,
# PTX minor, major, SM, name offset, name size, flags, -, uncompressed size
ALIGN = 8
PADDING_CHUNK = 1 << 16  # bytes of padding read at once
MAX_ENTRIES = 4096  # images in one container: one per architecture and kind, for each kernel's file at most
MAX_SECTIONS = 256  # fat binary sections read in one library (a real one has one or two)


@dataclass(frozen=True, order=True)
class DeviceImage:
    """One entry of a fat binary: a cubin for an SM (`sm_80`), PTX for a virtual one (`compute_90`)."""

    kind: str  # "elf" | "ptx" | "lto" | "kind N"
    arch: int  # 80, 90, 100
    variant: str = ""  # "a" or "f": an architecture-specific target (sm_90a)
    ptx_version: str | None = None  # the PTX ISA of a PTX entry ("9.0")
    compressed: bool = False

    @property
    def name(self) -> str:
        prefix = {"elf": "sm", "ptx": "compute", "lto": "lto"}.get(self.kind, self.kind)
        return f"{prefix}_{self.arch}{self.variant}"


def read_fatbins(stream: BinaryIO, offset: int, size: int, what: str = ".nv_fatbin") -> list[DeviceImage]:
    """The entries of every container in `size` bytes at `offset` (a section); zero padding between
    containers is skipped."""
    end, pos, found = offset + size, offset, []
    while pos + _CONTAINER.size <= end:
        head = elfread.read_at(stream, pos, _CONTAINER.size, end, what)
        magic, _version, header_size, body = _CONTAINER.unpack(head)
        if magic != MAGIC:
            if head[:ALIGN] == bytes(ALIGN):  # padding between containers, or after the last: skipped whole
                pos += _zeros(stream, pos, end, what)
                continue
            raise CiError(f"{what}: no fat binary container at offset {pos - offset} (magic {magic:#x})")
        if header_size < _CONTAINER.size or pos + header_size + body > end:
            raise CiError(f"{what}: a container at offset {pos - offset} of {header_size}+{body} bytes "
                          f"runs past the section ({size} bytes)")
        found += _entries(stream, pos + header_size, pos + header_size + body, what)
        pos += header_size + body
        pos += -(pos - offset) % ALIGN
    return found


def _zeros(stream: BinaryIO, pos: int, end: int, what: str) -> int:
    """How many bytes of zero padding (whole ALIGN steps, at least one) start at pos: read in chunks and
    scanned in C, each byte once, not ALIGN bytes a step."""
    skipped = 0
    while pos + skipped < end:
        chunk = elfread.read_at(stream, pos + skipped, min(PADDING_CHUNK, end - pos - skipped), end, what)
        zeros = len(chunk) - len(chunk.lstrip(b"\0"))
        skipped += zeros - zeros % ALIGN
        if zeros < len(chunk):
            break
    return max(skipped, ALIGN)


def _entries(stream: BinaryIO, pos: int, end: int, what: str) -> list[DeviceImage]:
    out: list[DeviceImage] = []
    while pos < end:
        if len(out) >= MAX_ENTRIES:
            raise CiError(f"{what}: more than {MAX_ENTRIES} device images in one fat binary")
        if pos + _ENTRY.size > end:
            if elfread.read_at(stream, pos, end - pos, end, what) == bytes(end - pos):
                break  # padding
            raise CiError(f"{what}: an entry header at {pos} runs past its container")
        (kind, _v, header_size, payload, packed, _r, minor, major, arch, _no, _ns, flags, _z,
         _full) = _ENTRY.unpack(elfread.read_at(stream, pos, _ENTRY.size, end, what))
        if kind == 0 and header_size == 0:
            break  # padding
        if header_size < _ENTRY.size or pos + header_size + payload > end:
            raise CiError(f"{what}: an entry at {pos} of {header_size}+{payload} bytes runs past its container")
        name = KINDS.get(kind, f"kind {kind}")
        out.append(DeviceImage(name, arch, "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY_SPECIFIC else "",
                               f"{major}.{minor}" if kind == 1 else None,
                               bool(flags & COMPRESSED_FLAGS) or packed != 0))
        pos += header_size + payload
    return out


def read_library(stream: BinaryIO) -> list[DeviceImage]:
    """The device code of one ELF file, from every fat binary section it has; [] for no such section, and
    for what is not ELF."""
    header = elfread.read_header(stream)
    if header is None:
        return []
    secs = elfread.sections(stream, header)
    table = elfread.section_name_table(stream, header, secs)
    if table is None:
        return []
    found: list[DeviceImage] = []
    wanted = [n.encode() for n in SECTIONS]
    # each byte of the file is read once: a range named twice is read once, one that overlaps another is
    # refused, and so is a library of more fat binary sections than any build makes
    ranges: dict[tuple[int, int], str] = {}
    for s in secs:
        name = table.is_one_of(s.name, wanted)
        if name is not None and s.type != 8 and s.size:  # SHT_NOBITS holds no bytes
            ranges.setdefault((s.offset, s.size), name.decode())
            if len(ranges) > MAX_SECTIONS:
                raise CiError(f"more than {MAX_SECTIONS} fat binary sections")
    last_end = -1
    for (offset, size), section in sorted(ranges.items()):
        if offset < last_end:
            raise CiError(f"{section}: fat binary sections overlap (at offset {offset})")
        last_end = offset + size
        found += read_fatbins(stream, offset, size, section)
    return found


def summary(images: Iterable[DeviceImage]) -> tuple[list[str], list[str]]:
    """The SMs with a cubin (`sm_80`) and the PTX targets (`compute_90`), each once, in order."""
    images = sorted(set(images))
    sms = list(dict.fromkeys(i.name for i in images if i.kind == "elf"))
    ptx = list(dict.fromkeys(i.name for i in images if i.kind == "ptx"))
    return sms, ptx


def wheel_device_code(wheel: Path) -> dict[str, list[str]]:
    """Each shared library of a wheel that holds device code -> its targets (`sm_80`, `compute_90`);
    a library whose fat binary cannot be read -> [`unreadable: why`]."""

    found: dict[str, list[str]] = {}
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name) or member.usize < 64:
                continue
            with wa.seekable(member) as stream:
                try:
                    images = read_library(stream)
                except CiError as e:
                    found[member.name] = [f"unreadable: {e}"]
                    continue
            if images:
                sms, ptx = summary(images)
                found[member.name] = sms + ptx
    return found


def asked(arch_list: str) -> tuple[list[str], list[str]]:
    """The targets a TORCH_CUDA_ARCH_LIST asks for: `8.0;9.0+PTX` -> ([sm_80, sm_90], [compute_90]); `9.0a`
    -> sm_90a."""
    sms, ptx = [], []
    for item in re.split(r"[;\s]+", arch_list.strip()):
        m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", item)
        if not m:
            continue
        sm = f"{m[1]}{m[2]}{m[3]}"
        sms.append(f"sm_{sm}")
        if m[4]:
            ptx.append(f"compute_{sm}")
    return sms, ptx


def compare(arch_list: str, found: Iterable[str]) -> tuple[list[str], list[str]]:
    """(more, fewer): the targets a library holds that the arch list does not ask for, and those asked for
    that it lacks."""
    sms, ptx = asked(arch_list)
    have = [t for t in found if not t.startswith("unreadable")]
    return [t for t in have if t not in {*sms, *ptx}], [t for t in (*sms, *ptx) if t not in have]


def mismatch_warnings(device_code: dict[str, list[str]], arch_list: str, hardcoded: list[str],
                      scripts: list[str]) -> list[str]:
    """A warning per library whose device code is not what the arch list asked for, naming where its
    targets came from: the project's own flags (`scripts` hard-code `hardcoded`), which --arch-list
    (TORCH_CUDA_ARCH_LIST) does not reach."""
    out = []
    for lib, targets in device_code.items():
        name = lib.rsplit("/", 1)[-1]
        bad = [t for t in targets if t.startswith("unreadable")]
        if bad:
            out.append(f"{name}: its device code could not be read ({bad[0].removeprefix('unreadable: ')})")
            continue
        more, fewer = compare(arch_list, targets)
        if not more and not fewer:
            continue
        what = "; ".join(part for part in (f"not asked for: {' '.join(more)}" if more else "",
                                           f"missing: {' '.join(fewer)}" if fewer else "") if part)
        source = (f"{', '.join(scripts)} hard-codes {' '.join(hardcoded)}, which --arch-list does not change"
                  if hardcoded else "the project's own nvcc flags (-gencode, -arch, CMAKE_CUDA_ARCHITECTURES) "
                                    "decide them, not --arch-list")
        out.append(f"{name} holds device code for {' '.join(targets)}, the arch list {arch_list} asked for "
                   f"{' '.join(sum(asked(arch_list), []))} ({what}): {source}")
    return out
