"""ci.native.elf on libraries compiled by gcc: dynamic sections, wheels vs installed dirs, bad input."""

from __future__ import annotations

import ctypes
import io
import os
import random
import zipfile
from pathlib import Path

import pytest

from wheelci.native.elf import (SharedLib, _BlockReader, _ChunkReader, is_system_lib, looks_like_shared_lib, read_dynamic,
                    read_dynamic_path, record_owners, scan, scan_dir, scan_wheel)
from wheelci.errors import CiError
from tests._elfbuild import build_lib, install_alone, make_wheel
from tests import _proc


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("elf")
    c = build_lib(d / "libC.so.1", "libC.so.1")
    b = build_lib(d / "libB.so.2", "libB.so.2", [c], rpath="$ORIGIN/../../c/lib:$ORIGIN/../d/lib")
    a = build_lib(d / "libA.so.3", "libA.so.3", [b, c], runpath="$ORIGIN")
    return {"A": a, "B": b, "C": c}


def test_dynamic_section_of_gcc_libraries(libs):
    a, b, c = (read_dynamic_path(libs[k]) for k in "ABC")
    assert c.soname == "libC.so.1" and c.rpath == () and c.runpath == ()
    assert "libC.so.1" in c.needed or "libc.so.6" in c.needed
    assert b.soname == "libB.so.2" and b.needed[0] == "libC.so.1"
    assert b.rpath == ("$ORIGIN/../../c/lib", "$ORIGIN/../d/lib") and b.runpath == ()
    assert a.needed[:2] == ("libB.so.2", "libC.so.1")
    assert a.runpath == ("$ORIGIN",) and a.rpath == ()


def test_not_elf_and_no_dynamic_segment(tmp_path):
    assert read_dynamic(io.BytesIO(b"#!/bin/sh\necho hi\n")) is None
    # a relocatable object has no program headers, hence no dynamic segment
    (tmp_path / "x.c").write_text("int x(void) { return 1; }\n")
    _proc.run(["gcc", "-c", "-fPIC", "-o", str(tmp_path / "x.o"), str(tmp_path / "x.c")], check=True)
    assert read_dynamic_path(tmp_path / "x.o") is None


def test_truncated_elf_is_bad_input(libs, tmp_path):
    data = libs["B"].read_bytes()
    cut = tmp_path / "libcut.so"
    cut.write_bytes(data[:200])
    with pytest.raises(CiError, match="libcut.so: unreadable ELF file"):
        read_dynamic_path(cut)


def test_block_reader_matches_the_file(libs):
    """Random seeks (backwards too) through a deflated zip member give the file's bytes."""
    data = libs["A"].read_bytes() * 50  # several blocks
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("x", data)
    zf = zipfile.ZipFile(buf)
    reader = _BlockReader(lambda: zf.open("x"), len(data))
    rng = random.Random(7)
    for _ in range(200):
        off, n = rng.randrange(len(data)), rng.randrange(1, 3 * _BlockReader.BLOCK)
        reader.seek(off)
        assert reader.read(n) == data[off:off + n]
    reader.seek(-10, io.SEEK_END)
    assert reader.read() == data[-10:]
    # over WheelArchive.iter_chunks: chunks of any size, read back in exact lengths
    chunked = _BlockReader(lambda: _ChunkReader(data[i:i + 7777] for i in range(0, len(data), 7777)), len(data))
    for _ in range(200):
        off, n = rng.randrange(len(data)), rng.randrange(1, 3 * _BlockReader.BLOCK)
        chunked.seek(off)
        assert chunked.read(n) == data[off:off + n]


def test_wheel_and_installed_dir_agree(libs, tmp_path):
    wheel = make_wheel(tmp_path / "w", "dep-b", {
        "depb/lib/libB.so.2": libs["B"], "depb/__init__.py": b"", "depb/README.txt": b"not a lib"})
    root = install_alone(wheel, tmp_path / "site")
    os.symlink("libB.so.2", root / "depb/lib/libB.so")  # a dev symlink: the same library, once
    from_wheel, from_dir = scan_wheel(wheel), scan_dir(root)
    assert [(l.name, l.path, l.distribution, l.needed) for l in from_wheel] == \
           [(l.name, l.path, l.distribution, l.needed) for l in from_dir] == \
           [("libB.so.2", "depb/lib/libB.so.2", "dep-b", read_dynamic_path(libs["B"]).needed)]
    assert record_owners(root)["depb/lib/libB.so.2"] == "dep-b"


def test_library_without_record_has_no_distribution(libs, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libC.so.1").write_bytes(libs["C"].read_bytes())
    [lib] = scan([tmp_path])
    assert lib == SharedLib("libC.so.1", "lib/libC.so.1", str(tmp_path), None, lib.needed, (), ())


def test_python_extension_has_no_soname(tmp_path):
    (tmp_path / "m.c").write_text("int m(void) { return 0; }\n")
    ext = tmp_path / "_m.cpython-311-x86_64-linux-gnu.so"
    _proc.run(["gcc", "-shared", "-fPIC", "-o", str(ext), str(tmp_path / "m.c")], check=True)
    (tmp_path / "m.c").unlink()
    [lib] = scan([tmp_path])
    assert lib.soname is None and lib.name == ext.name


@pytest.mark.parametrize("name, expected", [
    ("libcublas.so.13", True), ("libtorch.so", True), ("_C.cpython-311-x86_64-linux-gnu.so", True),
    ("foo.py", False), ("libfoo.a", False), ("notes.song", False)])
def test_shared_lib_names(name, expected):
    assert looks_like_shared_lib(name) is expected


def test_system_libs():
    assert is_system_lib("libc.so.6") and is_system_lib("ld-linux-x86-64.so.2")
    assert is_system_lib("libcuda.so.1")
    assert not is_system_lib("libcudart.so.13") and not is_system_lib("libcublas.so.13")


def test_bad_inputs(libs, tmp_path):
    with pytest.raises(CiError, match="no such wheel or directory"):
        scan([tmp_path / "missing.whl"])
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(CiError, match="not a wheel or a directory"):
        scan([tmp_path / "x.txt"])
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(CiError, match="truncated zip"):
        scan([bad])
    cut = make_wheel(tmp_path / "w", "cut", {"cut/libcut.so": libs["A"].read_bytes()[:300]})
    with pytest.raises(CiError, match=r"cut-1.0-.*\.whl: cut/libcut.so: unreadable ELF"):
        scan([cut])


def test_corrupt_member_and_bad_wheel_name(libs, tmp_path):
    good = make_wheel(tmp_path / "w", "bent", {"bent/libA.so.3": libs["A"].read_bytes() * 20})
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo("bent/libA.so.3")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 100, start + info.compress_size - 100, 7):  # scramble the deflate stream
        data[i] ^= 0x5A
    bent = tmp_path / good.name
    bent.write_bytes(bytes(data))
    with pytest.raises(CiError, match="bent-1.0-.*whl"):
        scan([bent])
    renamed = tmp_path / "noversion.whl"
    renamed.write_bytes(good.read_bytes())
    with pytest.raises(CiError, match="invalid wheel file name"):
        scan([renamed])


def _patch_dynamic(src: Path, dest: Path, tag_name: str, value: int) -> None:
    """Copy src with the first `tag_name` entry of its dynamic segment set to `value`."""
    from elftools.elf.elffile import ELFFile

    data = bytearray(src.read_bytes())
    with open(src, "rb") as f:
        elf = ELFFile(f)
        seg = next(elf.iter_segments("PT_DYNAMIC"))
        for i, tag in enumerate(seg.iter_tags()):
            if tag.entry.d_tag == tag_name:
                off = seg["p_offset"] + i * elf.structs.Elf_Dyn.sizeof() + 8  # d_val of an Elf64_Dyn
                data[off:off + 8] = value.to_bytes(8, "little")
                break
        else:
            raise AssertionError(f"no {tag_name}")
    dest.write_bytes(bytes(data))


def test_dynamic_strings_out_of_bounds_are_bad_input(libs, tmp_path):
    _patch_dynamic(libs["B"], tmp_path / "libstrtab.so", "DT_STRTAB", 0x7FFF_FFFF_0000)
    with pytest.raises(CiError, match="libstrtab.so: unreadable ELF file: dynamic string table outside the file"):
        read_dynamic_path(tmp_path / "libstrtab.so")
    _patch_dynamic(libs["B"], tmp_path / "libneeded.so", "DT_NEEDED", 10 * libs["B"].stat().st_size)
    with pytest.raises(CiError, match=r"libneeded.so: unreadable ELF file: dynamic string table: string offset \d+ "
                                      r"outside the table"):
        read_dynamic_path(tmp_path / "libneeded.so")


NEW_GLIBC_SOURCE = """
#include <cmath>
#include <dlfcn.h>
#include <memory>
double f(double x) { auto p = std::make_shared<double>(x); auto q = p; return std::exp(*q); }
extern "C" void *g(const char *name) { return dlsym(RTLD_DEFAULT, name); }  // as torch 2.14 does
"""


def _compat_lib(tmp_path: Path, compat: bool) -> Path:
    src = tmp_path / "f.cpp"
    src.write_text(NEW_GLIBC_SOURCE)
    out = tmp_path / ("libcompat.so" if compat else "libplain.so")
    from wheelci.compile import host
    
    inc = host.GLIBC_COMPAT
    flags = ["-isystem", str(inc), "-include", str(inc / "glibc_compat.h")] if compat else []
    _proc.run(["g++", "-O2", "-fPIC", "-shared", *flags, str(src), "-o", str(out)], check=True)
    return out


def test_too_recent_symbols_are_named_and_the_compat_header_removes_them(tmp_path):
    """This machine's glibc (2.36) binds exp@GLIBC_2.29, dlsym@GLIBC_2.34 and libstdc++'s
    __libc_single_threaded@GLIBC_2.32; ci/resources/glibc_compat keeps them out, so the library fits
    manylinux_2_28."""
    from wheelci.native.elf import glibc_references, too_recent_for

    plain = make_wheel(tmp_path / "a", "plain", {"plain/libplain.so": _compat_lib(tmp_path, False)})
    assert too_recent_for(plain, "manylinux_2_28") == [
        "__libc_single_threaded@GLIBC_2.32 (libplain.so)", "dlsym@GLIBC_2.34 (libplain.so)",
        "exp@GLIBC_2.29 (libplain.so)"]
    assert too_recent_for(plain, "manylinux_2_36_x86_64") == []
    fixed = _compat_lib(tmp_path, True)
    with fixed.open("rb") as f:
        refs = dict(glibc_references(f))
    assert refs["exp"] == refs["dlsym"] == (2, 2, 5) and "__libc_single_threaded" not in refs
    g = ctypes.CDLL(str(fixed)).g  # the 2.2.5 dlsym still finds symbols (libc's compatibility version)
    g.restype, g.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    assert g(b"malloc") and not g(b"no_such_symbol_here")
    wheel = make_wheel(tmp_path / "b", "fixed", {"fixed/libcompat.so": fixed})
    assert too_recent_for(wheel, "manylinux_2_28") == []


STRINGSTREAM_SOURCE = """
#include <cstddef>
#include <memory>
#include <sstream>
#include <stdexcept>
void check(int x) { if (x < 0) { std::ostringstream s; s << "bad " << x; throw std::runtime_error(s.str()); } }
double *make(std::size_t n) { return std::allocator<double>().allocate(n); }  // as std::vector does
"""

CATCHER = """
#include <cstddef>
#include <cstdio>
#include <new>
double *make(std::size_t n);
int main() {
  try { make(static_cast<std::size_t>(-1)); } catch (const std::bad_array_new_length &) { std::puts("caught"); }
}
"""


def test_libstdcxx_symbols_are_named_and_the_compat_header_removes_them(tmp_path):
    """GCC 12's libstdc++ exports std::ostringstream's constructor at GLIBCXX_3.4.26 and stringbuf::str()
    at 3.4.29, past manylinux_2_28's 3.4.25: torch's stable-ABI headers format every error that way.
    The names come from auditwheel's own policy; the compat header instantiates them in the library."""
    from wheelci.compile import host
    from wheelci.native.elf import too_recent_for

    src = tmp_path / "s.cpp"
    src.write_text(STRINGSTREAM_SOURCE)
    inc = host.GLIBC_COMPAT
    libs = {}
    for name, flags in (("plain", []), ("compat", ["-isystem", str(inc), "-include", str(inc / "glibc_compat.h")])):
        out = tmp_path / f"lib{name}.so"
        _proc.run(["g++", "-std=c++20", "-O2", "-fPIC", "-shared", *flags, str(src), "-o", str(out)], check=True)
        libs[name] = make_wheel(tmp_path / name, name, {f"{name}/lib{name}.so": out})
    named = too_recent_for(libs["plain"], "manylinux_2_28")
    assert any("@GLIBCXX_3.4.2" in n and "(libplain.so)" in n for n in named), named
    assert "_ZSt28__throw_bad_array_new_lengthv@GLIBCXX_3.4.29 (libplain.so)" in named, named
    assert too_recent_for(libs["plain"], "manylinux_2_34") == []
    assert too_recent_for(libs["compat"], "manylinux_2_28") == []
    # the library's own __throw_bad_array_new_length throws what libstdc++'s does
    (tmp_path / "main.cpp").write_text(CATCHER)
    exe = tmp_path / "catcher"
    _proc.run(["g++", "-std=c++20", str(tmp_path / "main.cpp"), str(tmp_path / "libcompat.so"),
               f"-Wl,-rpath,{tmp_path}", "-o", str(exe)], check=True)
    assert _proc.run([str(exe)], capture_output=True, text=True, check=True).stdout == "caught\n"


def test_repair_to_an_older_policy_names_the_symbols(tmp_path):
    from wheelci.repair import repair

    plain = make_wheel(tmp_path / "a", "plain", {"plain/libplain.so": _compat_lib(tmp_path, False)})
    with pytest.raises(CiError, match=r"cannot meet manylinux_2_28_x86_64: it references "
                                      r"__libc_single_threaded@GLIBC_2.32 \(libplain.so\), dlsym@GLIBC_2.34 \(libplain.so\), "
                                      r"exp@GLIBC_2.29"):
        repair(plain, tmp_path / "out", torch_version="2.13.0", torch_requires=[], plat="manylinux_2_28_x86_64")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["duplicate", "symlink"])
def test_zips_our_reader_refuses_are_refused_by_every_elf_reader(libs, tmp_path, kind):
    """zipfile reads both (a duplicate: two members of one name; a symlink: its target as content),
    ci.wheel.zipread refuses them: scan_wheel and too_recent_for read through ci.wheel.zipread, so every
    stage sees the same members, and a crafted zip is one error line."""
    from wheelci.native.elf import too_recent_for
    from tests._wheels import raw_zip, wheel_entries

    good = make_wheel(tmp_path / "w", "dup", {"dup/libA.so.3": libs["A"]})
    extra = ("dup/libA.so.3", libs["C"].read_bytes(), 0o100644) if kind == "duplicate" else \
        ("dup/libA.so", b"libA.so.3", 0o120777)
    bad = raw_zip(tmp_path / "bad" / good.name, wheel_entries(good) + [extra])
    with zipfile.ZipFile(bad) as zf:
        assert zf.testzip() is None
    needle = "duplicate member in wheel" if kind == "duplicate" else "symlink member in wheel"
    with pytest.raises(CiError, match=needle):
        scan_wheel(bad)
    with pytest.raises(CiError, match=needle):
        too_recent_for(bad, "manylinux_2_28")


def test_scan_wheel_finds_executables_by_their_mode(libs, tmp_path):
    """With executables=True, members with an execute bit that are ELF executables (ET_EXEC, or
    ET_DYN with an interpreter) are listed as programs; scripts and plain libraries are not."""
    from tests._wheels import build_wheel

    (tmp_path / "main.c").write_text("int f_A(void);\nint main(void) { return f_A() - 1; }\n")
    files = {"pkg/lib/libA.so.3": libs["A"].read_bytes(), "pkg/bin/run.sh": b"#!/bin/sh\n",
             "pkg/data/libdata": libs["C"].read_bytes()}  # an ELF library, no .so name, no execute bit
    for exe, flag in (("pie", "-pie"), ("exec", "-no-pie")):
        _proc.run(["gcc", flag, "-o", str(tmp_path / exe), str(tmp_path / "main.c"), str(libs["A"]),
                   "-Wl,-rpath,$ORIGIN/../lib"], check=True)
        files[f"pkg/bin/{exe}"] = (tmp_path / exe).read_bytes()
    wheel = build_wheel(tmp_path / "w", "pkg", files=files, tag="py3-none-linux_x86_64",
                        modes={"pkg/bin/pie": 0o755, "pkg/bin/exec": 0o755, "pkg/bin/run.sh": 0o755})
    assert [(l.path, l.program) for l in scan_wheel(wheel)] == [("pkg/lib/libA.so.3", False)]
    found = {l.path: l for l in scan_wheel(wheel, executables=True)}
    assert sorted(found) == ["pkg/bin/exec", "pkg/bin/pie", "pkg/lib/libA.so.3"]
    assert found["pkg/bin/pie"].program and found["pkg/bin/exec"].program
    assert found["pkg/bin/pie"].needed[0] == "libA.so.3" and found["pkg/bin/exec"].runpath == ("$ORIGIN/../lib",)


@pytest.mark.parametrize("flags", [["-std=c++11", "-fno-exceptions"], ["-std=c++17"], ["-x", "c"]])
def test_the_compat_header_compiles_wherever_it_is_forced_in(tmp_path, flags):
    """It is -include'd into every translation unit of a host build: C, old standards, -fno-exceptions
    (where libstdc++ itself aborts instead of throwing)."""
    from wheelci.compile import host

    src = tmp_path / "u.cpp"
    src.write_text("#include <memory>\ndouble *make(unsigned long n) { return std::allocator<double>().allocate(n); }\n"
                   if "c" not in flags else "int one(void) { return 1; }\n")
    inc = host.GLIBC_COMPAT
    _proc.run(["g++", *flags, "-O2", "-fPIC", "-shared", "-isystem", str(inc), "-include",
               str(inc / "glibc_compat.h"), str(src), "-o", str(tmp_path / "libu.so")], check=True)


THREADS_SOURCE = """
#include <mutex>
#include <thread>
static std::once_flag flag;
static int hits = 0;
extern "C" int once() { std::call_once(flag, [] { ++hits; }); return hits; }
extern "C" int in_thread() { int v = 0; std::thread([&] { v = once(); }).join(); return v; }
"""


def test_threads_bind_to_libpthreads_versions(tmp_path):
    """std::call_once and std::thread call pthread_once and pthread_create inline: GLIBC_2.34 here,
    libpthread's 2.2.5 versions with the compat header; the library still runs."""
    from wheelci.compile import host
    from wheelci.native.elf import too_recent_for

    (tmp_path / "t.cpp").write_text(THREADS_SOURCE)
    inc = host.GLIBC_COMPAT
    wheels = {}
    for name, flags in (("plain", []), ("compat", ["-isystem", str(inc), "-include", str(inc / "glibc_compat.h")])):
        out = tmp_path / f"lib{name}.so"
        _proc.run(["g++", "-std=c++17", "-O2", "-fPIC", "-shared", *flags, str(tmp_path / "t.cpp"), "-o", str(out)],
                  check=True)
        wheels[name] = make_wheel(tmp_path / name, name, {f"{name}/lib{name}.so": out})
    assert "pthread_once@GLIBC_2.34 (libplain.so)" in too_recent_for(wheels["plain"], "manylinux_2_28")
    assert too_recent_for(wheels["compat"], "manylinux_2_28") == []
    lib = ctypes.CDLL(str(tmp_path / "libcompat.so"))
    assert lib.in_thread() == 1 and lib.once() == 1


def _pyelftools_reading(data: bytes):
    """What pyelftools (auditwheel's ELF reader, which these readers replaced) reads from a library:
    the oracle for the bounded readers of ci.native.elfread."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    tags = list(next(elf.iter_segments("PT_DYNAMIC")).iter_tags())

    def strings(tag: str, attr: str) -> list[str]:
        return [getattr(t, attr) for t in tags if t.entry.d_tag == tag]

    dynamic = (next(iter(strings("DT_SONAME", "soname")), None), tuple(dict.fromkeys(strings("DT_NEEDED", "needed"))),
               tuple(p for s in strings("DT_RPATH", "rpath") for p in s.split(":") if p),
               tuple(p for s in strings("DT_RUNPATH", "runpath") for p in s.split(":") if p))
    dynsym, versym = elf.get_section_by_name(".dynsym"), elf.get_section_by_name(".gnu.version")
    verneed = elf.get_section_by_name(".gnu.version_r")
    undefined = sorted({s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"})
    versions = {aux["vna_other"]: aux.name for _, auxes in verneed.iter_versions() for aux in auxes} if verneed else {}
    versioned = [(s.name, versions[versym.get_symbol(i)["ndx"]]) for i, s in enumerate(dynsym.iter_symbols())
                 if i and s["st_shndx"] == "SHN_UNDEF" and versym is not None and versym.get_symbol(i)["ndx"] in versions]
    return dynamic, undefined, versioned


def _bounded_reading(data: bytes):
    from wheelci.native.elf import undefined_symbols, versioned_references

    info = read_dynamic(io.BytesIO(data))
    return ((info.soname, info.needed, info.rpath, info.runpath), undefined_symbols(io.BytesIO(data)),
            versioned_references(io.BytesIO(data)))


def test_the_bounded_readers_read_what_pyelftools_reads(libs):
    """On the libraries this interpreter has loaded (libc, libm, its extension modules, ...) and the
    gcc-built ones: the same SONAME, NEEDED, RPATH, RUNPATH, undefined and versioned symbols."""
    import ssl  # noqa: F401  maps libssl and libcrypto: more real libraries
    mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
              if ".so" in line.rsplit("/", 1)[-1] and line.split()[-1].startswith("/")}
    paths = sorted(mapped) + [libs[k] for k in "ABC"]
    assert len(paths) >= 8, paths
    for path in paths:
        data = Path(path).read_bytes()
        assert _bounded_reading(data) == _pyelftools_reading(data), path


# Wheels for other ELF classes and byte orders: 32-bit little-endian, 64-bit big-endian, and aarch64.
OTHER_PLATFORMS = [("markupsafe", "3.0.2", "manylinux2014_i686"), ("markupsafe", "3.0.2", "manylinux2014_aarch64"),
                   ("pyyaml", "6.0.3", "manylinux2014_s390x")]


@pytest.mark.network
@pytest.mark.parametrize("dist, version, platform", OTHER_PLATFORMS)
def test_other_classes_and_byte_orders_read_as_pyelftools_reads_them(dist, version, platform):
    import sys

    from tests._elfbuild import CACHE

    house = CACHE / "wheelhouse-platforms" / f"{dist}-{version}-{platform}"
    if not list(house.glob("*.whl")):
        _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--quiet", "--only-binary",
                   ":all:", "--platform", platform, "--python-version", "3.11", f"{dist}=={version}", "-d",
                   str(house)], check=True, timeout=600)
    found = sorted(house.glob("*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        sos = [zf.read(n) for n in zf.namelist() if n.endswith(".so")]
    assert sos
    for data in sos:
        assert _bounded_reading(data) == _pyelftools_reading(data)
