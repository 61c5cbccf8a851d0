"""Crafted ELF fields through the real stages: each is one `error:` line naming the library and what is
wrong (exit 2), read in time and memory in proportion to the file, never "unexpected TypeError", an
OverflowError or an endless loop.

Each library is built field by field (tests._elfbuild.crafted_elf) and shipped in a small wheel; the
stages that read that part of a library run on it: ci.preload and ci.split read the dynamic segment,
ci.abi the dynamic symbols too, ci.repair everything auditwheel reads (before auditwheel does). Each
stage runs under an address-space limit, so a reader that materialises what the fields ask for fails
here instead of swapping.
"""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.native.elf import read_dynamic, undefined_symbols, versioned_references
from tests._bounded import bounded_stage
from tests._elfbuild import (DT_NEEDED, DT_RUNPATH, DT_SONAME, DT_STRSZ, DT_STRTAB, DYNSTR_ADDRESS, crafted_elf,
                             elf_sym, elf_vernaux, elf_verneed, make_wheel)



def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    return data[:offset] + struct.pack(fmt, value) + data[offset + struct.calcsize(fmt):]


def _versioned(verneed: bytes, count: int) -> bytes:
    """A library whose one undefined symbol needs GLIBC_2.99 through .gnu.version_r (`count` entries)."""
    return crafted_elf(b"\0libfoo.so.1\0GLIBC_2.99\0sym\0", [(DT_NEEDED, 1)], dynsym=elf_sym(0, 0, 0) + elf_sym(24),
                       versym=b"\0\0\2\0", verneed=verneed, verneed_count=count)


def _symbols(entries: bytes, strtab: bytes = b"\0libfoo.so.1\0sym\0", entsize: int | None = None) -> bytes:
    """A library with `entries` as its .dynsym (entsize patched when given)."""
    data = crafted_elf(strtab, [(DT_NEEDED, 1)], dynsym=entries, versym=b"\0\0" * (len(entries) // 24),
                       verneed=b"", verneed_count=0)
    if entsize is not None:  # section 3 is .dynsym; sh_entsize is the last field of its header
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        data = _patched(data, shoff + 3 * 64 + 56, "<Q", entsize)
    return data


LONG = b"a" * 100_000
RUN = b"a" * 4000
# name -> (library bytes, what the error says); `dynamic` cases are read by every stage
DYNAMIC = {
    "no DT_STRTAB": (crafted_elf(b"\0libx.so.1\0", [(DT_NEEDED, 1)], strtab_tags=False),
                     "dynamic entries name strings but there is no dynamic string table (DT_STRTAB)"),
    "DT_NEEDED offset 2^64-16": (crafted_elf(b"\0libx.so.1\0", [(DT_NEEDED, 2**64 - 16)]),
                                 "string offset 18446744073709551600 outside the table"),
    "one long DT_NEEDED named 5000 times": (crafted_elf(b"\0" + LONG + b"\0", [(DT_NEEDED, 1)] * 5000),
                                            "a name longer than 4096 bytes"),
    "one DT_NEEDED named 5000 times": (crafted_elf(b"\0" + RUN + b"\0", [(DT_NEEDED, 1)] * 5000),
                                       "its entries name more than"),
    "4000 overlapping DT_NEEDED": (crafted_elf(b"\0" + RUN + b"\0", [(DT_NEEDED, i) for i in range(1, 4001)]),
                                   "its entries name more than"),
    "a string without its NUL": (crafted_elf(b"\0libx.so.1", [(DT_NEEDED, 1)]),
                                 "the string at offset 1 runs past the end of the table"),
    "DT_STRSZ past the segment": (crafted_elf(b"\0libx.so.1\0", [(DT_STRTAB, DYNSTR_ADDRESS), (DT_STRSZ, 2**40),
                                                             (DT_NEEDED, 1)], strtab_tags=False),
                                  "runs past its segment"),
    "dynamic segment past the file": (_patched(crafted_elf(b"\0libx.so.1\0", [(DT_NEEDED, 1)]), 64 + 56 + 32, "<Q", 2**40),
                                      "dynamic segment: 1099511627776 bytes at offset"),
    "program headers of 8 bytes": (_patched(crafted_elf(b"\0libx.so.1\0", [(DT_NEEDED, 1)]), 54, "<H", 8),
                                   "program headers: entries of 8 bytes where this ELF class has 56"),
    "a RUNPATH without its NUL": (crafted_elf(b"\0libx.so.1\0$ORIGIN", [(DT_NEEDED, 1), (DT_SONAME, 1), (DT_RUNPATH, 11)]),
                                  "the string at offset 11 runs past the end of the table"),
}


def _symbol_cases() -> dict[str, tuple[bytes, str]]:
    """Symbol tables with one field wrong (section header fields patched at offsets read from the file)."""
    base = _symbols(elf_sym(0, 0, 0) + elf_sym(13))
    shoff = struct.unpack_from("<Q", base, 0x28)[0]
    return {
        "dynamic symbols of 0 bytes": (_symbols(elf_sym(0, 0, 0) + elf_sym(13), entsize=0),
                                       "dynamic symbol table: entries of 0 bytes where this ELF class has 24"),
        "one symbol name 5000 times": (_symbols(elf_sym(0, 0, 0) + elf_sym(13) * 5000, b"\0libfoo.so.1\0" + RUN + b"\0"),
                                       "dynamic symbol table string table: its entries name more than"),
        "symbol names in no string table": (_patched(base, shoff + 3 * 64 + 40, "<I", 99),  # .dynsym's sh_link
                                            "dynamic symbol table: sh_link 99 is not a string table"),
        # e_shnum 0: the count is section 0's sh_size
        "2^40 sections": (_patched(_patched(base, 0x3C, "<H", 0), shoff + 32, "<Q", 2**40),
                          "section headers: 1099511627776 sections cannot fit"),
    }


SYMBOLS = _symbol_cases()
VERSIONS = {
    "version needs counted 2^32-1 (sh_info), chained 1": (
        _versioned(elf_verneed(1, 1, 16, 0) + elf_vernaux(2, 13, 0), 2**32 - 1), "4294967295 entries cannot fit"),
    "version needs counted 2, chained 1": (
        _versioned(elf_verneed(1, 1, 16, 0) + elf_vernaux(2, 13, 0) + bytes(32), 2),
        "2 entries counted (sh_info), the chain ends after 1"),
    "65535 versions counted, one chained": (
        _versioned(elf_verneed(65535, 1, 16, 0) + elf_vernaux(2, 13, 0), 1),
        "the entries count more versions than the section holds"),
    "a version chained outside its section": (
        _versioned(elf_verneed(2, 1, 16, 0) + elf_vernaux(2, 13, 1 << 20) + bytes(32), 1),
        "a version entry lies outside the section"),
}


def assert_one_error(r: subprocess.CompletedProcess, module: str, member: str, message: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith(f"python -m {module}: error: ") and "unexpected" not in lines[0], lines[0]
    assert f"{member}: unreadable ELF file: " in lines[0] and message in lines[0], lines[0]


def _wheel(tmp_path: Path, library: bytes, padding: bool = False) -> Path:
    """A wheel with the library; with `padding`, two incompressible ones ci.split must choose between."""
    files = {"crafted/__init__.py": b"", "crafted/libcrafted.so": library}
    if padding:
        files |= {"crafted/libpad1.so": os.urandom(60_000), "crafted/libpad2.so": os.urandom(60_000)}
    return make_wheel(tmp_path / "w", "crafted", files)


def _repair(tmp_path: Path, wheel: Path) -> subprocess.CompletedProcess:
    return bounded_stage("ci.repair", wheel, "-w", tmp_path / "out", "--torch", "2.13.0",
                         "--torch-requires", "filelock")


@pytest.mark.parametrize("case", DYNAMIC)
def test_crafted_dynamic_fields_are_one_error_in_every_stage(tmp_path, case):
    library, message = DYNAMIC[case]
    wheel = _wheel(tmp_path, library)
    member = "crafted/libcrafted.so"
    assert_one_error(bounded_stage("ci.preload", wheel, "--print-order"), "ci.preload", member, message)
    assert_one_error(_repair(tmp_path, wheel), "ci.repair", member, message)
    assert not (tmp_path / "out").exists()
    split = bounded_stage("ci.split", _wheel(tmp_path / "s", library, padding=True), "--limit", "100KB",
                          "-w", tmp_path / "split")
    assert_one_error(split, "ci.split", member, message)
    assert not (tmp_path / "split").exists()
    with pytest.raises(CiError, match="unreadable ELF file: "):
        read_dynamic(io.BytesIO(library))


@pytest.mark.parametrize("case", SYMBOLS)
def test_crafted_symbol_tables_are_one_error(tmp_path, case):
    library, message = SYMBOLS[case]
    wheel = _wheel(tmp_path, library)
    assert_one_error(_repair(tmp_path, wheel), "ci.repair", "crafted/libcrafted.so", message)
    with pytest.raises(CiError, match=re.escape(message)):
        undefined_symbols(io.BytesIO(library))


@pytest.mark.parametrize("case", VERSIONS)
def test_crafted_version_needs_are_one_error_not_a_loop(tmp_path, case):
    """ci.repair reads them before auditwheel (whose pyelftools reads sh_info entries whatever their
    chain: four billion reads of one entry), and so does too_recent_for after it."""
    library, message = VERSIONS[case]
    assert_one_error(_repair(tmp_path, _wheel(tmp_path, library)), "ci.repair", "crafted/libcrafted.so", message)
    with pytest.raises(CiError, match=re.escape(message)):
        versioned_references(io.BytesIO(library))


@pytest.mark.real_torch
@pytest.mark.parametrize("case", [*DYNAMIC, *SYMBOLS])
def test_crafted_libraries_in_ci_abi(tmp_path, case, torch_cpu_site):
    """ci.abi reads the dynamic segment and every undefined symbol's name."""
    library, message = {**DYNAMIC, **SYMBOLS}[case]
    r = bounded_stage("ci.abi", _wheel(tmp_path, library), "--torch-site", torch_cpu_site)
    assert_one_error(r, "ci.abi", "crafted/libcrafted.so", message)


@pytest.fixture(scope="module")
def torch_cpu_site() -> Path:
    from wheelci.compile.hostenv import TorchSpec, ensure_env

    return ensure_env(TorchSpec("2.13.0", None, None, True)).site


def test_well_formed_crafted_library_reads_as_written():
    """The builder's fields are what the readers see (the cases above differ from this in one field)."""
    library = crafted_elf(b"\0libfoo.so.1\0GLIBC_2.99\0sym\0libme.so\0$ORIGIN/x\0",
                          [(DT_NEEDED, 1), (DT_NEEDED, 1), (DT_SONAME, 28), (DT_RUNPATH, 37)],
                          dynsym=elf_sym(0, 0, 0) + elf_sym(24) + elf_sym(13, 5), versym=b"\0\0\2\0\1\0",
                          verneed=elf_verneed(1, 1, 16, 0) + elf_vernaux(2, 13, 0), verneed_count=1)
    info = read_dynamic(io.BytesIO(library))
    assert (info.soname, info.needed, info.runpath) == ("libme.so", ("libfoo.so.1",), ("$ORIGIN/x",))
    assert versioned_references(io.BytesIO(library)) == [("sym", "GLIBC_2.99")]
    assert undefined_symbols(io.BytesIO(library)) == ["sym"]
