"""The device code read back from a library's CUDA fat binaries (wheelci.native.fatbin): real objects
compiled by nvcc (the heavy tier), compared with cuobjdump where it is installed; crafted containers for
every bound (hermetic), each one CiError, never another exception or a loop."""

from __future__ import annotations

import io
import os
import random
import re
import shutil
import struct
from pathlib import Path

import pytest

from wheelci.errors import CiError
from wheelci.native import fatbin as fb
from tests import _proc

KERNEL = """
__global__ void add(float *a, const float *b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += b[i]; }
extern "C" void launch(float *a, const float *b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
"""


def entry(kind: int, arch: int, payload: bytes = b"\0" * 16, *, flags: int = 0x11, ptx: tuple[int, int] = (0, 0),
          header_size: int = 64, size: int | None = None, packed: int = 0) -> bytes:
    """One fat binary entry as nvcc 13.0 writes it: header (kind, version 0x0101, header size, payload
    size, compressed size, PTX minor/major, SM, flags, uncompressed size), then the payload."""
    head = struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, header_size, len(payload) if size is None else size, packed, 0,
                       ptx[1], ptx[0], arch, 0, 0, flags, 0, 0)
    return head + b"\0" * (header_size - len(head)) + payload


def container(*entries: bytes, size: int | None = None, header_size: int = 16, magic: int = fb.MAGIC) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", magic, 1, header_size, len(body) if size is None else size) + body


def read(data: bytes) -> list[fb.DeviceImage]:
    return fb.read_fatbins(io.BytesIO(data), 0, len(data))


def test_entries_of_two_containers_with_padding_between():
    data = container(entry(2, 80), entry(1, 90, flags=0x8011, ptx=(9, 0), packed=12, header_size=80))
    data += b"\0" * 8 + container(entry(2, 90, flags=0x108011))
    images = read(data)
    assert [i.name for i in images] == ["sm_80", "compute_90", "sm_90a"]
    assert images[1].ptx_version == "9.0" and images[1].compressed and not images[0].compressed
    assert fb.summary(images) == (["sm_80", "sm_90a"], ["compute_90"])
    assert read(container(entry(2, 100, flags=0x1200011)))[0].name == "sm_100f"


BAD = {
    "wrong magic": (container(entry(2, 80), magic=0x12345678), "no fat binary container at offset 0"),
    "container past the section": (container(entry(2, 80), size=2**64 - 1), "runs past the section"),
    "container header size 0": (container(entry(2, 80), header_size=0), "runs past the section"),
    "entry past its container": (container(entry(2, 80, size=2**64 - 16)), "runs past its container"),
    "entry header size 0": (container(entry(2, 80, header_size=64)[:4] + b"\0\0\0\0" + entry(2, 80)[8:]),
                            "runs past its container"),
    "entry header cut": (container(entry(2, 80)[:40]), "runs past its container"),
    "garbage after a container": (container(entry(2, 80)) + b"\x01" * 16, "no fat binary container at offset"),
    # empty images, 64 bytes each: a 1 GiB section (a few MB compressed in a wheel) would be 16M of them
    "too many images": (container(*[entry(2, 80, b"")] * (fb.MAX_ENTRIES + 1)), "device images in one fat binary"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_bad_fat_binary_is_one_error_naming_what_is_wrong(case):
    data, message = BAD[case]
    with pytest.raises(CiError, match=re.escape(message)):
        read(data)


def test_mutated_fat_binaries_read_or_refuse_in_bounded_steps():
    """Every mutant of a real-shaped section reads as entries or one CiError: never another exception,
    and never more entries than headers fit in it (each step moves by a header at least)."""
    seed = container(entry(2, 80), entry(1, 90, ptx=(9, 0), header_size=80)) + container(entry(2, 90))
    values = (0, 1, 8, 15, 16, 63, 64, 0xFFFF, 0xFFFFFFFF, 2**63, 2**64 - 1)
    for case in range(3000):
        rng = random.Random(case)
        data = bytearray(seed)
        for _ in range(rng.randint(1, 4)):
            width = rng.choice((1, 2, 4, 8))
            at = rng.randrange(0, len(data) - width)
            data[at:at + width] = (rng.choice(values) % (1 << 8 * width)).to_bytes(width, "little")
        if rng.random() < 0.1:
            data = data[:rng.randrange(len(data))]
        try:
            found = read(bytes(data))
        except CiError:
            continue
        assert len(found) <= len(data) // 64, case


def test_the_arch_list_compared_with_what_a_library_holds():
    assert fb.asked("8.0;9.0+PTX") == (["sm_80", "sm_90"], ["compute_90"])
    assert fb.asked("7.5 9.0a 10.0f") == (["sm_75", "sm_90a", "sm_100f"], [])
    assert fb.compare("9.0", ["sm_90"]) == ([], [])
    assert fb.compare("9.0", ["sm_80", "sm_90", "compute_90"]) == (["sm_80", "compute_90"], [])
    assert fb.compare("8.0;9.0", ["sm_80"]) == ([], ["sm_90"])
    # nine hard-coded gencodes where 9.0 was asked: the warning names the script's flags
    (warning,) = fb.mismatch_warnings({"flash_attn_2_cuda.so": ["sm_80", "sm_90"]}, "9.0", ["sm_80", "sm_90"],
                                      ["setup.py"])
    assert "not asked for: sm_80" in warning and "setup.py hard-codes sm_80 sm_90" in warning, warning
    (warning,) = fb.mismatch_warnings({"pkg/_C.so": ["sm_80"]}, "8.0;9.0", [], [])
    assert "missing: sm_90" in warning and "the project's own nvcc flags" in warning, warning
    assert fb.mismatch_warnings({"pkg/_C.so": ["sm_90"]}, "9.0", [], []) == []


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc is not on PATH: the heavy tier compiles device code with it"
    return nvcc


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    root = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    return str(Path(root) / "bin" / "cuobjdump") if (Path(root) / "bin" / "cuobjdump").is_file() else None


# nvcc's gencode flags -> the targets read back (a cubin per SM, a PTX per virtual architecture)
BUILDS = {
    "sm_80 + compute_90 PTX": (["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=compute_90"],
                               ["sm_80", "compute_90"], "-shared"),
    "sm_90a, sm_80 + PTX, compressed": (["-gencode", "arch=compute_90a,code=sm_90a", "-gencode",
                                          "arch=compute_80,code=[sm_80,compute_80]", "-Xfatbin", "-compress-all"],
                                         ["sm_80", "sm_90a", "compute_80"], "-shared"),
    "relocatable device code": (["-rdc=true", "-gencode", "arch=compute_75,code=sm_75"], ["sm_75"], "-c"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BUILDS, ids=list(BUILDS))
def test_real_objects_compiled_by_nvcc(case, tmp_path):
    flags, expected, link = BUILDS[case]
    (tmp_path / "k.cu").write_text(KERNEL)
    out = tmp_path / ("libk.so" if link == "-shared" else "k.o")
    _proc.run([_nvcc(), *flags, link, "-Xcompiler", "-fPIC", "k.cu", "-o", out.name], cwd=tmp_path, check=True,
              capture_output=True)
    with open(out, "rb") as f:
        images = fb.read_library(f)
    sms, ptx = fb.summary(images)
    assert sms + ptx == expected, images
    assert all(i.ptx_version == "9.0" for i in images if i.kind == "ptx")  # nvcc 13.0 writes PTX ISA 9.0
    cuobjdump = _cuobjdump()
    if cuobjdump:  # its own listing, entry by entry (it names a PTX entry by its SM)
        r = _proc.run([cuobjdump, "--list-elf", "--list-ptx", str(out)], capture_output=True, text=True)
        listed = re.findall(r"(ELF|PTX) file\s+\d+: \S+\.(sm_\d+[af]?)\.(?:cubin|ptx)", r.stdout)
        assert sorted((k, t) for k, t in listed) == sorted(
            ("ELF" if i.kind == "elf" else "PTX", i.name.replace("compute_", "sm_")) for i in images), r.stdout


@pytest.mark.slow
def test_a_wheels_libraries_listed_with_their_device_code(tmp_path):
    from tests._elfbuild import make_wheel
    from wheelci.report import BuildReport, to_markdown, wheel_report

    (tmp_path / "k.cu").write_text(KERNEL)
    _proc.run([_nvcc(), "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=compute_90",
               "-shared", "-Xcompiler", "-fPIC", "k.cu", "-o", "libk.so"], cwd=tmp_path, check=True, capture_output=True)
    wheel = make_wheel(tmp_path / "w", "kpkg", {"kpkg/_C.so": tmp_path / "libk.so", "kpkg/__init__.py": b""})
    assert fb.wheel_device_code(wheel) == {"kpkg/_C.so": ["sm_80", "compute_90"]}
    w = wheel_report(wheel)
    assert w.device_code == {"kpkg/_C.so": ["sm_80", "compute_90"]}
    w.warnings = fb.mismatch_warnings(w.device_code, "9.0", [], [])
    md = to_markdown(BuildReport(plan={"project": "kpkg", "cuda": "13.0", "torch": "2.13.0"}, wheels=[w]))
    assert "`kpkg/_C.so` device code: sm_80 compute_90" in md, md
    # the warning is text from the wheel, escaped for Markdown: `_C` would open emphasis
    assert "> warning: \\_C.so holds device code for sm_80 compute_90, the arch list 9.0 asked for sm_90" in md, md


def elf_with_fatbins(ranges: list[tuple[int, int]], region: bytes) -> bytes:
    """A minimal ELF whose `.nv_fatbin` section headers each name (offset into region, size)."""
    shstr = b"\0.nv_fatbin\0.shstrtab\0"
    region_off = 64
    shstr_off = region_off + len(region)
    shoff = shstr_off + len(shstr)
    shoff += -shoff % 8
    sh = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
          struct.pack("<IIQQQQIIQQ", 11, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0)]
    sh += [struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, region_off + off, size, 0, 0, 8, 0) for off, size in ranges]
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sh), 1)
    data = ehdr + region + shstr
    return data + bytes(shoff - len(data)) + b"".join(sh)


class CountingStream(io.BytesIO):
    """A real in-memory file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, n=-1):
        data = super().read(n)
        self.read_bytes += len(data)
        return data


@pytest.mark.parametrize("sections", [1, 200])
def test_a_library_is_read_once_whatever_its_section_headers_say(sections):
    """Many `.nv_fatbin` headers over one run of zeros cost sections x zeros / 8 steps (a 98 KB file
    took 38 s): the padding is skipped whole and a range named twice is read once."""
    region = bytes(1 << 20) + container(entry(2, 80))
    data = elf_with_fatbins([(0, len(region))] * sections, region)
    stream = CountingStream(data)
    assert [i.name for i in fb.read_library(stream)] == ["sm_80"]
    assert stream.read_bytes <= 2 * len(data)


def test_overlapping_or_too_many_fat_binary_sections_are_refused():
    region = bytes(4096) + container(entry(2, 80))
    with pytest.raises(CiError, match="overlap"):
        fb.read_library(io.BytesIO(elf_with_fatbins([(0, len(region)), (8, 64)], region)))
    many = [(8 * i, 8) for i in range(fb.MAX_SECTIONS + 1)]
    with pytest.raises(CiError, match="more than"):
        fb.read_library(io.BytesIO(elf_with_fatbins(many, bytes(8 * len(many)))))
