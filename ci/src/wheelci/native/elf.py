"""Read the dynamic section of shared libraries in wheels and installed directories.

Only what the dynamic linker uses to find libraries is read: SONAME, DT_NEEDED, DT_RPATH and
DT_RUNPATH. The program headers (read with struct, by wheelci.native.elfread) locate the dynamic segment
and the dynamic string table, so the section headers, symbols and debug info of a 1 GB libtorch_cuda.so are never
touched: 3 ms on disk, where iterating its dynamic symbols alone takes 0.6 s.

Wheel members are compressed, and a zip member can only be inflated forwards: a backward seek
restarts from byte 0, and a reader's first act (pyelftools', under auditwheel: seek to the end for the
length) inflates it all.
Reading in file order through `_BlockReader` (known length, cached blocks) inflates a member once,
up to its dynamic string table, with no temp file: 3 s for the 470 MB libtorch_cuda.so in the torch
wheel, about one plain inflate, where auditwheel's pyelftools on the raw zip member takes 60 s (measured).
Wheels are read through ci.wheel.zipread, as by every other stage: zipfile lists a different member set
for some crafted zips (duplicate names, symlinks), and what is checked must be what is shipped.

Which distribution provides a library: in a wheel, the wheel's project; in a directory, the
`*.dist-info/RECORD` that lists the file (None when no RECORD does).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterable, Iterator, TypeVar

from wheelci.archs import of_platform_tag
from wheelci.errors import CiError
from wheelci.native import elfread
from wheelci.wheel.names import normalize
from wheelci.wheel.record import read_record_file
from wheelci.wheel.zipformat import Member
from wheelci.wheel.zipread import WheelArchive

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

T = TypeVar("T")

# Libraries a wheel may expect from the system rather than from another wheel (fnmatch patterns):
# auditwheel's manylinux_2_28 whitelist, the dynamic loader itself, and the NVIDIA driver (which no
# wheel ships; it comes with the kernel module).
SYSTEM_LIBS: tuple[str, ...] = (
    "ld-linux*.so.*", "libc.so.6", "libm.so.6", "libmvec.so.1", "libdl.so.2", "librt.so.1",
    "libpthread.so.0", "libutil.so.1", "libanl.so.1", "libnsl.so.1", "libresolv.so.2",
    "libgcc_s.so.1", "libstdc++.so.6", "libatomic.so.1", "libz.so.1", "libexpat.so.1",
    "libGL.so.1", "libX11.so.6", "libXext.so.6", "libXrender.so.1", "libICE.so.6", "libSM.so.6",
    "libglib-2.0.so.0", "libgobject-2.0.so.0", "libgthread-2.0.so.0",
    "libcuda.so.1", "libnvidia-ml.so.1",
)

@dataclass(frozen=True)
class DynamicInfo:
    """What the dynamic linker reads to resolve a library's dependencies."""

    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    executable: bool = False  # ET_EXEC, or ET_DYN with an interpreter (a PIE): a program, not a library


@dataclass(frozen=True)
class SharedLib:
    """One shared library found in an input (a wheel or an installed directory)."""

    soname: str | None
    path: str  # '/'-separated, relative to the wheel root or the directory
    source: str  # the wheel or directory it was found in
    distribution: str | None  # normalized project name that ships it
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    program: bool = False  # an executable (scan_wheel(executables=True)): it needs libraries, provides none

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def name(self) -> str:
        """What a DT_NEEDED entry matches: the SONAME, else the file name (Python extensions)."""
        return self.soname or self.filename


def is_system_lib(name: str, patterns: Iterable[str] = SYSTEM_LIBS) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def looks_like_shared_lib(name: str) -> bool:
    """`libfoo.so`, `libfoo.so.12`, `_C.cpython-311-x86_64-linux-gnu.so`: the names worth opening."""
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 5, 10, 14, 15, 29
_STRING_TAGS = (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH)


def _unreadable(read: Callable[[BinaryIO], T]) -> Callable[[BinaryIO], T]:
    """A CiError from a reader says the file is unreadable as ELF, and why."""
    @functools.wraps(read)
    def reader(stream: BinaryIO) -> T:
        try:
            return read(stream)
        except CiError as e:
            raise CiError(f"unreadable ELF file: {e}") from None
    return reader


@_unreadable
def read_dynamic(stream: BinaryIO) -> DynamicInfo | None:
    """The dynamic section of an ELF stream; None if it is not ELF or has no dynamic segment.

    Reads, in file order: the ELF header, the program headers, the dynamic segment, the strings it
    names (each from the file once, in ascending order; ci.native.elfread.StringTable bounds what the
    entries may name together, repeats included). The section headers at the end of the
    file are never read: a zip member is inflated once, up to its dynamic string table. Every read
    is bounded by the file (ci.native.elfread): a truncated or crafted file is bad input (CiError).
    """
    header = elfread.read_header(stream)
    if header is None:
        return None
    segs = elfread.segments(stream, header)
    dynamic = next((p for p in segs if p.type == elfread.PT_DYNAMIC), None)
    if dynamic is None:
        return None
    tags = elfread.dynamic_entries(stream, header, dynamic)
    strings = _dynamic_strings(stream, header, segs, tags)
    entries = [(t, v) for t, v in tags if t in _STRING_TAGS]
    text: dict[int, str] = {}
    for i in sorted(range(len(entries)), key=lambda i: entries[i][1]):  # file order: a zip member reads forwards
        tag, offset = entries[i]
        limit = elfread.NAME_MAX if tag in (DT_NEEDED, DT_SONAME) else None
        text[i] = strings.get(offset, limit).decode("utf-8", "surrogateescape")  # type: ignore[union-attr]

    def named(tag: int) -> list[str]:
        return [text[i] for i, (t, _) in enumerate(entries) if t == tag]

    return DynamicInfo(
        soname=next(iter(named(DT_SONAME)), None),
        needed=tuple(dict.fromkeys(named(DT_NEEDED))),  # the loader loads each once
        rpath=tuple(p for s in named(DT_RPATH) for p in s.split(":") if p),
        runpath=tuple(p for s in named(DT_RUNPATH) for p in s.split(":") if p),
        executable=header.type == elfread.ET_EXEC or any(p.type == elfread.PT_INTERP for p in segs),
    )


def _dynamic_strings(stream: BinaryIO, header: elfread.Header, segs: list[elfread.Segment],
                     tags: list[tuple[int, int]]) -> elfread.StringTable | None:
    """The dynamic string table (DT_STRTAB, DT_STRSZ, mapped through the loaded segments); None when
    no entry names a string."""
    if not any(t in _STRING_TAGS for t, _ in tags):
        return None
    address = next((v for t, v in tags if t == DT_STRTAB), None)
    if address is None:
        raise CiError("dynamic entries name strings but there is no dynamic string table (DT_STRTAB)")
    where = elfread.file_offset(segs, address)
    if where is None:
        raise CiError("dynamic string table outside the file")
    offset, room = where
    size = next((v for t, v in tags if t == DT_STRSZ), room)
    if size > room:
        raise CiError(f"dynamic string table of {size} bytes (DT_STRSZ) runs past its segment's {room}")
    return elfread.StringTable(stream, offset, size, header.size, "dynamic string table")


def read_dynamic_path(path: Path | str) -> DynamicInfo | None:
    with open(path, "rb") as f:
        try:
            return read_dynamic(f)
        except CiError as e:
            raise CiError(f"{path}: {e}") from None


class _ChunkReader:
    """A forward-only stream over a chunk iterator (WheelArchive.iter_chunks): read(n) returns n bytes
    unless the content ends first, as _BlockReader's block arithmetic needs."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._rest = memoryview(b"")

    def read(self, n: int) -> bytes:
        parts = []
        while n > 0:
            if not self._rest:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._rest = memoryview(chunk)
            parts.append(self._rest[:n])
            n -= len(parts[-1])
            self._rest = self._rest[len(parts[-1]):]
        return b"".join(parts)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)  # a generator: stop inflating
        if close is not None:
            close()


def member_view(chunks: Callable[[], Iterable[bytes]], size: int) -> io.RawIOBase:
    """The one seekable view of an inflating zip member (its bytes as chunks, `size` long) that every
    ELF reader of a wheel member reads through."""
    return _BlockReader(lambda: _ChunkReader(chunks()), size)


class _BlockReader(io.RawIOBase):
    """A seekable view of a forward-only stream (a zip member) that remembers the blocks it read.

    Seeking to the end is free (the length is known), re-reading a block is free, reading ahead
    inflates forwards; only a read before the inflated position restarts (a string table placed
    before the dynamic segment: one extra, short pass).
    """

    BLOCK = 1 << 16

    def __init__(self, opener: Callable[[], _ChunkReader], size: int):
        self._open = opener
        self._size = size
        self._pos = 0
        self._raw = opener()
        self._raw_pos = 0
        self._blocks: dict[int, bytes] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _block(self, index: int) -> bytes:
        if index not in self._blocks:
            start = index * self.BLOCK
            if start < self._raw_pos:  # a zip member cannot seek backwards cheaply: reopen
                self._raw.close()
                self._raw, self._raw_pos = self._open(), 0
            while self._raw_pos < start:
                skipped = self._raw.read(min(start - self._raw_pos, 1 << 20))
                if not skipped:
                    break
                self._raw_pos += len(skipped)
            data = self._raw.read(self.BLOCK)
            self._raw_pos += len(data)
            self._blocks[index] = data
        return self._blocks[index]

    def readinto(self, buf: WriteableBuffer) -> int:
        out = memoryview(buf)  # the buffer's length read through its view: a buffer need not have len()
        n = min(len(out), max(0, self._size - self._pos))
        done = 0
        while done < n:
            index, skip = divmod(self._pos, self.BLOCK)
            chunk = self._block(index)[skip:skip + n - done]
            if not chunk:
                break
            out[done:done + len(chunk)] = chunk
            done += len(chunk)
            self._pos += len(chunk)
        return done

    def close(self) -> None:
        self._raw.close()
        super().close()


def _lib(info: DynamicInfo, path: str, source: str, dist: str | None, program: bool = False) -> SharedLib:
    return SharedLib(info.soname, path, source, dist, info.needed, info.rpath, info.runpath, program)


@contextlib.contextmanager
def _naming(wa: WheelArchive, m: Member) -> Iterator[None]:
    """A CiError about a member's bytes names the wheel and the member."""
    try:
        yield
    except CiError as e:
        raise CiError(f"{wa.path.name}: {m.name}: {e}") from None


def scan_wheel(wheel: Path, *, executables: bool = False) -> list[SharedLib]:
    """Every shared library in a wheel, with its dynamic section (see scan_archive)."""
    with WheelArchive.open(wheel) as wa:
        return scan_archive(wa, executables=executables)


def scan_archive(wa: WheelArchive, *, executables: bool = False) -> list[SharedLib]:
    """Every shared library in an open wheel, with its dynamic section. With `executables`, also
    the ELF programs (`program=True`): members with an execute bit, since pip makes only those
    executable, whatever their names."""
    libs = []
    for m in wa.files:
        is_lib = looks_like_shared_lib(m.name)
        if m.usize < 64 or not (is_lib or (executables and m.mode & 0o111)):
            continue
        reader = member_view(functools.partial(wa.iter_chunks, m), m.usize)
        try:
            with _naming(wa, m):
                dyn = read_dynamic(reader)  # type: ignore[arg-type]
        finally:
            reader.close()
        if dyn is not None and (is_lib or dyn.executable):
            libs.append(_lib(dyn, m.name, str(wa.path), wa.name.project, program=not is_lib))
    return libs


def record_owners(root: Path) -> dict[str, str]:
    """Relative path -> normalized project name, from every `*.dist-info/RECORD` under root."""
    owners: dict[str, str] = {}
    for record in sorted(root.glob("*.dist-info/RECORD")):
        project = normalize(record.parent.name[: -len(".dist-info")].rsplit("-", 1)[0])
        for rel in read_record_file(record):  # a regular file, size-bounded: never a FIFO or /dev/zero
            if rel:
                owners[os.path.normpath(rel)] = project
    return owners


def scan_dir(root: Path) -> list[SharedLib]:
    """Every shared library under an installed directory (a site-packages or a `--target` dir).

    Symlinks to a library already seen (libfoo.so -> libfoo.so.1) are the same library: listed once.
    """
    owners = record_owners(root)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        files += [os.path.join(dirpath, fn) for fn in sorted(filenames) if looks_like_shared_lib(fn)]
    seen: set[str] = set()
    libs = []
    for full in sorted(files, key=os.path.islink):  # real files first, then links to them (stable)
        real = os.path.realpath(full)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        dyn = read_dynamic_path(full)
        if dyn is None:
            continue
        rel = os.path.relpath(full, root)
        libs.append(_lib(dyn, rel.replace(os.sep, "/"), str(root), owners.get(os.path.normpath(rel))))
    return libs


def scan(inputs: Iterable[Path | str]) -> list[SharedLib]:
    """Shared libraries of each input, in input order: a `.whl` file or an installed directory."""
    libs: list[SharedLib] = []
    for item in map(Path, inputs):
        if item.is_dir():
            libs.extend(scan_dir(item))
        elif item.is_file() and item.suffix == ".whl":
            libs.extend(scan_wheel(item))
        elif item.exists():
            raise CiError(f"not a wheel or a directory: {item}")
        else:
            raise CiError(f"no such wheel or directory: {item}")
    return libs



def glibc_references(stream: BinaryIO) -> list[tuple[str, tuple[int, ...]]]:
    """(symbol, glibc version) for each undefined dynamic symbol bound to a GLIBC_x.y version: what
    decides the oldest glibc, hence the manylinux policy, a library can load on."""
    return [(sym, tuple(int(p) for p in ver[6:].split("."))) for sym, ver in versioned_references(stream)
            if re.fullmatch(r"GLIBC_\d+(\.\d+)+", ver)]


@_unreadable
def versioned_references(stream: BinaryIO) -> list[tuple[str, str]]:
    """(symbol, version name) for each undefined dynamic symbol bound to a version (GLIBC_2.29,
    GLIBCXX_3.4.26, CXXABI_1.3.13, ...): .dynsym, .gnu.version and .gnu.version_r, found by their
    section types, every read bounded (ci.native.elfread). Empty for a file that is not ELF."""
    header = elfread.read_header(stream)
    if header is None:
        return []
    secs = elfread.sections(stream, header)
    dynsym, versym, verneed = (elfread.first_of_type(secs, kind) for kind in
                               (elfread.SHT_DYNSYM, elfread.SHT_GNU_VERSYM, elfread.SHT_GNU_VERNEED))
    if dynsym is None or versym is None or verneed is None:
        return []
    versions = elfread.version_needs(stream, header, secs, verneed)
    indexes = elfread.symbol_versions(stream, header, versym)
    names = elfread.linked_strings(stream, header, secs, dynsym, "dynamic symbol table")
    out = []
    for i, (name, shndx) in enumerate(elfread.symbols(stream, header, dynsym)):
        version = versions.get(indexes[i]) if 0 < i < len(indexes) and shndx == elfread.SHN_UNDEF else None
        if version:
            out.append((names.get(name).decode("utf-8", "surrogateescape"), version))
    return out


def check_readable(wheel: Path) -> None:
    """Read every shared library of a wheel through the bounded readers, all of what auditwheel reads
    (dynamic entries, every dynamic symbol's name, section names, version needs), so that a crafted
    one is one CiError before auditwheel's pyelftools, which trusts each count and materialises each
    name, reads it (a version count that disagrees with its chain loops there for hours)."""
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name) or member.usize < 64:
                continue
            with wa.seekable(member) as stream, _naming(wa, member):
                if read_dynamic(stream) is not None:
                    _read_all_names(stream)


@_unreadable
def _read_all_names(stream: BinaryIO) -> None:
    header = elfread.read_header(stream)
    assert header is not None  # read_dynamic read it
    secs = elfread.sections(stream, header)
    if (shstr := elfread.section_name_table(stream, header, secs)) is not None:
        for s in secs:
            shstr.get(s.name)
    if (dynsym := elfread.first_of_type(secs, elfread.SHT_DYNSYM)) is not None:
        names = elfread.linked_strings(stream, header, secs, dynsym, "dynamic symbol table")
        for name, _ in elfread.symbols(stream, header, dynsym):
            names.get(name)
    if (verneed := elfread.first_of_type(secs, elfread.SHT_GNU_VERNEED)) is not None:
        elfread.version_needs(stream, header, secs, verneed)


def libstdcxx_versions(policy: str) -> dict[str, set[str]]:
    """The GLIBCXX and CXXABI versions a manylinux policy allows, from auditwheel's own policy file
    (empty where auditwheel is not installed: only glibc is then checked)."""
    try:
        import auditwheel
    except ImportError:
        return {}
    import json


    arch = of_platform_tag(policy)
    arch, name = (arch, policy.removesuffix(f"_{arch}")) if arch != policy else ("x86_64", policy)
    data = json.loads((Path(auditwheel.__file__).parent / "policy" / "manylinux-policy.json").read_text())
    for p in data:
        if name == p["name"] or name in p.get("aliases", []):
            return {k: set(v) for k, v in p["symbol_versions"].get(arch, {}).items() if k in ("GLIBCXX", "CXXABI")}
    return {}


def too_recent_for(wheel: Path, policy: str) -> list[str]:
    """`symbol@VERSION (library)` for every reference newer than a manylinux_2_N policy allows: glibc's,
    and libstdc++'s (GLIBCXX, CXXABI) as auditwheel's policy lists them."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)(_x86_64|_aarch64)?", policy)
    if not m:
        return []
    limit = (int(m[1]), int(m[2]))
    allowed = libstdcxx_versions(policy)
    found = []
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name):
                continue
            with wa.seekable(member) as stream, _naming(wa, member):
                refs = versioned_references(stream)
            for sym, ver in refs:
                family, _, number = ver.partition("_")
                if family == "GLIBC" and re.fullmatch(r"\d+(\.\d+)+", number):
                    too_new = tuple(int(p) for p in number.split(".")) > limit
                else:
                    too_new = family in allowed and number not in allowed[family]
                if too_new:
                    found.append(f"{sym}@{ver} ({member.name.rsplit('/', 1)[-1]})")
    return sorted(set(found))


# Where nvcc puts device code in a host object: the fat binary, and relocatable device code (-rdc).
DEVICE_CODE_SECTIONS = (".nv_fatbin", "__nv_relfatbin")


def device_code(wheel: Path) -> list[str]:
    """The wheel's shared libraries that carry CUDA device code (a section nvcc writes). A --cuda
    build with none compiled its CPU path only: many setup.py files build CUDA kernels only when
    torch.cuda.is_available(), which is False on a GPU-less builder."""
    found = []
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name) or member.usize < 64:
                continue
            with wa.seekable(member) as stream:
                if _has_sections(stream, DEVICE_CODE_SECTIONS):
                    found.append(member.name)
    return found


def _has_sections(stream: BinaryIO, names: Iterable[str]) -> bool:
    """Whether an ELF file has a section of one of these names (False for what is not ELF, or not
    readable as ELF: nothing nvcc made)."""
    try:
        header = elfread.read_header(stream)
        if header is None:
            return False
        return bool(elfread.section_names(stream, header, elfread.sections(stream, header),
                                          [n.encode() for n in names]))
    except CiError:
        return False


@_unreadable
def undefined_symbols(stream: BinaryIO) -> list[str]:
    """The dynamic symbols a library imports (undefined in it): what it needs from the libraries it links."""
    header = elfread.read_header(stream)
    if header is None:
        return []
    secs = elfread.sections(stream, header)
    dynsym = elfread.first_of_type(secs, elfread.SHT_DYNSYM)
    if dynsym is None:
        return []
    names = elfread.linked_strings(stream, header, secs, dynsym, "dynamic symbol table")
    found = {names.get(name) for name, shndx in elfread.symbols(stream, header, dynsym)[1:]
             if shndx == elfread.SHN_UNDEF and name}
    return sorted(n.decode("utf-8", "surrogateescape") for n in found if n)


def imports(wheel: Path) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Library path -> (its undefined dynamic symbols, its NEEDED), for every shared library in the wheel."""
    out = {}
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name) or member.usize < 64:
                continue
            with wa.seekable(member) as stream, _naming(wa, member):
                dyn = read_dynamic(stream)
                if dyn is not None:
                    out[member.name] = (tuple(undefined_symbols(stream)), dyn.needed)
    return out
