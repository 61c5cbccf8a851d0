"""Read the dynamic section of shared libraries in wheels and installed directories.

Only what the dynamic linker uses to find libraries is read: SONAME, DT_NEEDED, DT_RPATH and
DT_RUNPATH. The program headers (pyelftools structs) locate the dynamic segment and the dynamic
string table, so the section headers, symbols and debug info of a 1 GB libtorch_cuda.so are never
touched: 3 ms on disk, where iterating its dynamic symbols alone takes 0.6 s.

Wheel members are compressed, and a zip member can only be inflated forwards: a backward seek
restarts from byte 0, and pyelftools' first act (seek to the end for the length) inflates it all.
Reading in file order through `_BlockReader` (known length, cached blocks) inflates a member once,
up to its dynamic string table, with no temp file: 3 s for the 470 MB libtorch_cuda.so in the torch
wheel, about one plain inflate, where pyelftools on the raw zip member takes 60 s (measured).
Wheels are read through ci.wheel.zipread, as by every other stage: zipfile lists a different member set
for some crafted zips (duplicate names, symlinks), and what is checked must be what is shipped.

Which distribution provides a library: in a wheel, the wheel's project; in a directory, the
`*.dist-info/RECORD` that lists the file (None when no RECORD does).
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from elftools.common.exceptions import ELFError
from elftools.common.utils import parse_cstring_from_stream, struct_parse
from elftools.elf.elffile import ELFFile

from wheelci.errors import CiError
from wheelci.wheel.zipformat import Member
from wheelci.wheel.zipread import WheelArchive
from wheelci.wheel.names import normalize

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

_ELF_MAGIC = b"\x7fELF"


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


def read_dynamic(stream: BinaryIO) -> DynamicInfo | None:
    """The dynamic section of an ELF stream; None if it is not ELF or has no dynamic segment.

    Reads, in file order: the ELF header, the program headers, the dynamic segment, the strings it
    names. (pyelftools' DynamicSegment would also read the section headers at the end of the file,
    forcing a second inflation of a zip member.) A truncated or corrupt file is bad input (CiError).
    """
    if stream.read(4) != _ELF_MAGIC:
        return None
    stream.seek(0)
    try:
        return _read_dynamic(ELFFile(stream), stream)
    except (ELFError, ValueError, KeyError, AssertionError, EOFError) as e:
        raise CiError(f"unreadable ELF file: {e}") from None
    except Exception as e:  # pyelftools' vendored construct raises its own errors on a truncated file
        if type(e).__module__.startswith("elftools."):
            raise CiError(f"unreadable ELF file: {e}") from None
        raise


def _read_dynamic(elf: ELFFile, stream: BinaryIO) -> DynamicInfo | None:
    phdrs = [struct_parse(elf.structs.Elf_Phdr, stream, elf["e_phoff"] + i * elf["e_phentsize"])
             for i in range(elf["e_phnum"])]
    dynamic = next((p for p in phdrs if p["p_type"] == "PT_DYNAMIC"), None)
    if dynamic is None:
        return None
    size = elf.structs.Elf_Dyn.sizeof()
    tags: list[tuple[str, int]] = []
    for i in range(dynamic["p_filesz"] // size):
        tag = struct_parse(elf.structs.Elf_Dyn, stream, dynamic["p_offset"] + i * size)
        if tag["d_tag"] == "DT_NULL":
            break
        tags.append((tag["d_tag"], tag["d_val"]))
    strtab = next((v for t, v in tags if t == "DT_STRTAB"), None)
    base = next((p["p_offset"] + strtab - p["p_vaddr"] for p in phdrs if p["p_type"] == "PT_LOAD"
                 and p["p_vaddr"] <= (strtab or 0) < p["p_vaddr"] + p["p_filesz"]), None)
    strings: dict[str, list[str]] = {}
    for t, v in tags:
        if t in ("DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH"):
            if base is None:
                raise CiError("dynamic string table outside the file")
            raw = parse_cstring_from_stream(stream, base + v)
            if raw is None:
                raise CiError("truncated dynamic string table")
            strings.setdefault(t, []).append(raw.decode("utf-8", "surrogateescape"))
    return DynamicInfo(
        soname=(strings.get("DT_SONAME") or [None])[0],
        needed=tuple(strings.get("DT_NEEDED", ())),
        rpath=tuple(p for s in strings.get("DT_RPATH", ()) for p in s.split(":") if p),
        runpath=tuple(p for s in strings.get("DT_RUNPATH", ()) for p in s.split(":") if p),
        executable=elf["e_type"] == "ET_EXEC" or any(p["p_type"] == "PT_INTERP" for p in phdrs),
    )


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


class _BlockReader(io.RawIOBase):
    """A seekable view of a forward-only stream (a zip member) that remembers the blocks it read.

    Seeking to the end is free (the length is known), re-reading a block is free, reading ahead
    inflates forwards; only a read before the inflated position restarts (a string table placed
    before the dynamic segment: one extra, short pass).
    """

    BLOCK = 1 << 16

    def __init__(self, opener, size: int):
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

    def readinto(self, buf) -> int:
        n = min(len(buf), max(0, self._size - self._pos))
        out = memoryview(buf)
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
        reader = _BlockReader(lambda m=m: _ChunkReader(wa.iter_chunks(m)), m.usize)
        try:
            dyn = read_dynamic(reader)  # type: ignore[arg-type]
        except CiError as e:
            raise CiError(f"{wa.path.name}: {m.name}: {e}") from None
        finally:
            reader.close()
        if dyn is not None and (is_lib or dyn.executable):
            libs.append(_lib(dyn, m.name, str(wa.path), wa.name.project, program=not is_lib))
    return libs


def record_owners(root: Path) -> dict[str, str]:
    """Relative path -> normalized project name, from every `*.dist-info/RECORD` under root."""
    owners: dict[str, str] = {}
    from wheelci.wheel.record import read_record_file

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


def versioned_references(stream: BinaryIO) -> list[tuple[str, str]]:
    """(symbol, version name) for each undefined dynamic symbol bound to a version (GLIBC_2.29,
    GLIBCXX_3.4.26, CXXABI_1.3.13, ...)."""
    try:
        elf = ELFFile(stream)
        dynsym, versym = elf.get_section_by_name(".dynsym"), elf.get_section_by_name(".gnu.version")
        verneed = elf.get_section_by_name(".gnu.version_r")
        if dynsym is None or versym is None or verneed is None:
            return []
        versions = {aux["vna_other"]: aux.name for _, auxes in verneed.iter_versions() for aux in auxes}
        out = []
        for i, sym in enumerate(dynsym.iter_symbols()):
            if sym["st_shndx"] != "SHN_UNDEF":
                continue
            name = versions.get(versym.get_symbol(i)["ndx"]) if i else None
            if name:
                out.append((sym.name, name))
        return out
    except Exception as e:
        if type(e).__module__.startswith("elftools.") or isinstance(e, ELFError):
            raise CiError(f"not a readable ELF file: {e}") from None
        raise


def libstdcxx_versions(policy: str) -> dict[str, set[str]]:
    """The GLIBCXX and CXXABI versions a manylinux policy allows, from auditwheel's own policy file
    (empty where auditwheel is not installed: only glibc is then checked)."""
    try:
        import auditwheel
    except ImportError:
        return {}
    import json

    name = policy.removesuffix("_x86_64")
    data = json.loads((Path(auditwheel.__file__).parent / "policy" / "manylinux-policy.json").read_text())
    for p in data:
        if name == p["name"] or name in p.get("aliases", []):
            return {k: set(v) for k, v in p["symbol_versions"].get("x86_64", {}).items() if k in ("GLIBCXX", "CXXABI")}
    return {}


def too_recent_for(wheel: Path, policy: str) -> list[str]:
    """`symbol@VERSION (library)` for every reference newer than a manylinux_2_N policy allows: glibc's,
    and libstdc++'s (GLIBCXX, CXXABI) as auditwheel's policy lists them."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)(_x86_64)?", policy)
    if not m:
        return []
    limit = (int(m[1]), int(m[2]))
    allowed = libstdcxx_versions(policy)
    found = []
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name):
                continue
            with _seekable(wa, member) as stream:
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
            with _seekable(wa, member) as stream:
                try:
                    names = {s.name for s in ELFFile(stream).iter_sections()}
                except (ELFError, ValueError, KeyError, AssertionError, EOFError):
                    continue  # not an ELF file: nothing nvcc made
            if names & set(DEVICE_CODE_SECTIONS):
                found.append(member.name)
    return found


IN_MEMORY_CAP = 64 << 20  # larger members are read from a temporary file


@contextlib.contextmanager
def _seekable(wa: WheelArchive, m: Member) -> Iterator[BinaryIO]:
    """A member for readers that seek all over it (symbol tables, section headers): in memory when
    small, else inflated once into a temporary file, so a 1 GB library never sits in memory."""
    if m.usize <= IN_MEMORY_CAP:
        yield io.BytesIO(wa.read(m))
        return
    with tempfile.TemporaryDirectory(prefix="ci-elf-") as tmp, \
            open(wa.extract(m, Path(tmp) / "member"), "rb") as f:
        yield f


def undefined_symbols(stream: BinaryIO) -> list[str]:
    """The dynamic symbols a library imports (undefined in it): what it needs from the libraries it links."""
    try:
        dynsym = ELFFile(stream).get_section_by_name(".dynsym")
        if dynsym is None:
            return []
        return sorted({s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"})
    except Exception as e:
        if type(e).__module__.startswith("elftools.") or isinstance(e, ELFError):
            raise CiError(f"not a readable ELF file: {e}") from None
        raise


def imports(wheel: Path) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Library path -> (its undefined dynamic symbols, its NEEDED), for every shared library in the wheel."""
    out = {}
    with WheelArchive.open(wheel) as wa:
        for member in wa.files:
            if not looks_like_shared_lib(member.name) or member.usize < 64:
                continue
            with _seekable(wa, member) as stream:
                dyn = read_dynamic(stream)
                if dyn is None:
                    continue
                stream.seek(0)
                try:
                    out[member.name] = (tuple(undefined_symbols(stream)), dyn.needed)
                except CiError as e:
                    raise CiError(f"{wa.path.name}: {member.name}: {e}") from None
    return out
