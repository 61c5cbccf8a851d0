"""Test inputs for ci.native.elf / ci.preload: shared libraries compiled by gcc, tiny wheels holding them,
per-package "installs" (one directory per wheel, as Bazel's rules_python lays them out), and the real
nvidia-*/torch wheels fetched once into a cache.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Mapping, Sequence

from wheelci.util.cache import cache_dir
from tests import _proc, _shared

CACHE = cache_dir()


def symbol(soname: str) -> str:
    """libA.so.1 -> f_A: the function each test library exports."""
    return "f_" + re.sub(r"\W", "_", soname.split(".so")[0].removeprefix("lib"))


def build_lib(out: Path, soname: str, needs: Sequence[Path] = (), *, value: int = 1,
              rpath: str | None = None, runpath: str | None = None, call_deps: bool = True) -> Path:
    """Compile `out` (SONAME `soname`) whose f_X() returns value + the f_Y() of each library it needs.

    Calling the dependencies' functions makes a wrong or missing dependency fail loudly at load time.
    `call_deps=False` only records DT_NEEDED (for cycles, where the calls would recurse forever).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    dep_syms = [symbol(_soname_of(d)) for d in needs]
    body = f"return {value}" + "".join(f" + {s}()" for s in dep_syms) if call_deps else f"return {value}"
    decls = "".join(f"int {s}(void);\n" for s in dep_syms)
    refs = "" if call_deps else "".join(f"void *ref_{s} = (void *){s};\n" for s in dep_syms)
    src = out.parent / f".{out.name}.c"
    src.write_text(f"{decls}{refs}int {symbol(soname)}(void) {{ {body}; }}\n")
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,-soname,{soname}",
           "-Wl,--no-as-needed", *map(str, needs)]
    if rpath is not None:
        cmd += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
    if runpath is not None:
        cmd += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
    _proc.run(cmd, check=True, capture_output=True, text=True)
    src.unlink()
    return out


def _soname_of(path: Path) -> str:
    from wheelci.native.elf import read_dynamic_path

    info = read_dynamic_path(path)
    assert info is not None and info.soname
    return info.soname


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(dest_dir: Path, dist: str, files: Mapping[str, bytes | Path], version: str = "1.0",
               tag: str = "py3-none-linux_x86_64", requires: tuple[str, ...] = (),
               requires_python: str | None = None) -> Path:
    """A minimal valid wheel: the files, METADATA, WHEEL, RECORD (deflated, .dist-info last)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    name = dist.replace("-", "_")
    di = f"{name}-{version}.dist-info"
    members = {k: (v.read_bytes() if isinstance(v, Path) else v) for k, v in files.items()}
    members[f"{di}/METADATA"] = (f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
                                 + (f"Requires-Python: {requires_python}\n" if requires_python else "")
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode()
    members[f"{di}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    record = "".join(record_line(k, v) + "\n" for k, v in members.items()) + f"{di}/RECORD,,\n"
    path = dest_dir / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for k, v in members.items():
            zf.writestr(k, v)
        zf.writestr(f"{di}/RECORD", record)
    return path


def install_alone(wheel: Path, root: Path) -> Path:
    """Unpack a wheel into its own directory, like rules_python or `pip install --target` per wheel."""
    root.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            target = root / re.sub(r"^[^/]+\.data/(?:purelib|platlib)/", "", info.filename)
            if info.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)
    return root


def run_python(code: str, path: Sequence[Path | str] = (), cwd: Path | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run code in a fresh interpreter (dlopen state never leaks between tests) with PYTHONPATH=path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    env["PYTHONNOUSERSITE"] = "1"
    return _proc.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                     text=True, timeout=timeout)


# --- the real wheels ----------------------------------------------------------------------------

# What torch 2.13.0 (the cu130 build on PyPI) pins, through cuda-toolkit[...]==13.0.3 and its own
# Requires-Dist; plus the pure-Python dependencies `import torch` needs.
NVIDIA_WHEELS: dict[str, str] = {
    "nvidia-cublas": "13.1.1.3",
    "nvidia-cuda-cupti": "13.0.85",
    "nvidia-cuda-nvrtc": "13.0.88",
    "nvidia-cuda-runtime": "13.0.96",
    "nvidia-cudnn-cu13": "9.20.0.48",
    "nvidia-cufft": "12.0.0.61",
    "nvidia-cufile": "1.15.1.6",
    "nvidia-curand": "10.4.0.35",
    "nvidia-cusolver": "12.0.4.66",
    "nvidia-cusparse": "12.6.3.3",
    "nvidia-cusparselt-cu13": "0.8.1",
    "nvidia-nccl-cu13": "2.29.7",
    "nvidia-nvjitlink": "13.5.37",
    "nvidia-nvshmem-cu13": "3.4.5",
    "nvidia-nvtx": "13.0.85",
}
TORCH = ("torch", "2.13.0")
TORCH_PURE_DEPS: dict[str, str] = {
    "typing-extensions": "4.16.0",
    "sympy": "1.14.0",
    "mpmath": "1.3.0",
    "filelock": "4.2.11",
    "networkx": "3.6.1",
    "jinja2": "3.1.6",
    "markupsafe": "3.0.4",
    "fsspec": "2026.9.0",
    "setuptools": "84.2.1",
}


def cached_wheel(dist: str, version: str) -> Path:
    """The wheel for dist==version from the cache, downloaded from the public index if missing.

    `--isolated` ignores pip's configuration, so a local `+cpu` torch build is never taken for the
    CUDA one.
    """
    house = CACHE / "wheelhouse"
    stem = f"{re.sub(r'[-_.]+', '_', dist)}-{version}-"
    with _shared.held(f"wheelhouse-{stem}"):
        found = sorted(p for p in house.glob(f"{stem}*.whl")) if house.is_dir() else []
        if found:
            return found[0]
        house.mkdir(parents=True, exist_ok=True)
        _proc.run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--quiet",
                   "--only-binary", ":all:", f"{dist}=={version}", "-d", str(house)],
                  check=True, timeout=1800)
        found = sorted(house.glob(f"{stem}*.whl"))
        _shared.store_once(house, *sorted((CACHE / "real-torch").glob("*/wheels")))
    if not found:
        raise FileNotFoundError(f"pip download {dist}=={version} gave no {stem}*.whl in {house}")
    return found[0]


def cached_install(wheel: Path) -> Path:
    """The wheel unpacked into its own directory under the cache, keyed by its file name.

    Unpacked into a temp directory and renamed, so an interrupted run never leaves half a tree.
    """
    root = CACHE / "per-package" / wheel.name[: -len(".whl")]
    with _shared.held(f"per-package-{root.name}"):  # another worker may unpack the same wheel
        if not root.is_dir():
            root.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root.parent))
            try:
                install_alone(wheel, tmp)
                os.replace(tmp, root)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        _shared.store_once(root, *_shared.env_sites())  # torch's own files, as its build environment has them
    return root


# --- crafted ELF files --------------------------------------------------------------------------
# A 64-bit little-endian shared object laid out by hand, every field the caller's to choose: what a
# hostile wheel can hold. Addresses equal file offsets (one PT_LOAD maps the whole file at 0).

DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
SHT_STRTAB, SHT_DYNAMIC, SHT_DYNSYM, SHT_VERNEED, SHT_VERSYM = 3, 6, 11, 0x6FFFFFFE, 0x6FFFFFFF
DYNSTR_ADDRESS = 64 + 2 * 56  # the dynamic string table follows the ELF header and two program headers


def elf_sym(name: int, shndx: int = 0, info: int = 0x12) -> bytes:
    """An Elf64_Sym: a global function, undefined unless shndx says where it lives."""
    return struct.pack("<IBBHQQ", name, info, 0, shndx, 0, 0)


def elf_verneed(count: int, file: int, aux: int, next_: int) -> bytes:
    """An Elf64_Verneed: `count` Vernaux entries `aux` bytes on, the next Verneed `next_` bytes on."""
    return struct.pack("<HHIII", 1, count, file, aux, next_)


def elf_vernaux(other: int, name: int, next_: int) -> bytes:
    """An Elf64_Vernaux: version index `other` is the version named at `name`."""
    return struct.pack("<IHHII", 0, 0, other, name, next_)


def crafted_elf(strtab: bytes, dynamic: Sequence[tuple[int, int]], *, strtab_tags: bool = True,
                dynsym: bytes = b"", versym: bytes = b"", verneed: bytes = b"", verneed_count: int = 0,
                sections: Mapping[str, bytes] | None = None) -> bytes:
    """A shared object with `strtab` as its dynamic string table and `dynamic` as its dynamic entries
    (DT_STRTAB and DT_STRSZ first unless `strtab_tags` is False, DT_NULL last). With `dynsym`, the
    section headers name .dynsym, .gnu.version and .gnu.version_r (sh_info `verneed_count`) as a
    linker writes them; `sections` adds named PROGBITS sections (.nv_fatbin, ...)."""
    ehdr, phdr = 64, 56
    dynstr_off = DYNSTR_ADDRESS
    entries = ([(DT_STRTAB, dynstr_off), (DT_STRSZ, len(strtab))] if strtab_tags else []) + list(dynamic)
    dyn = b"".join(struct.pack("<qQ", t, v) for t, v in [*entries, (DT_NULL, 0)])
    blobs = [(".dynstr", SHT_STRTAB, strtab, 0, 0, 1), (".dynamic", SHT_DYNAMIC, dyn, 1, 0, 16)]
    if dynsym:
        blobs += [(".dynsym", SHT_DYNSYM, dynsym, 1, 1, 24), (".gnu.version", SHT_VERSYM, versym, 3, 0, 2),
                  (".gnu.version_r", SHT_VERNEED, verneed, 1, verneed_count, 0)]
    blobs += [(name, 1, data, 0, 0, 0) for name, data in (sections or {}).items()]
    names = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in blobs) + b".shstrtab\0"
    body, headers, off = b"", [bytes(64)], dynstr_off
    name_off = 1
    for name, kind, data, link, info, entsize in [*blobs, (".shstrtab", SHT_STRTAB, names, 0, 0, 0)]:
        pad = -off % 8
        body += bytes(pad) + data
        off += pad
        headers.append(struct.pack("<IIQQQQIIQQ", name_off, kind, 2, off, off, len(data), link, info, 8, entsize))
        name_off += len(name) + 1
        off += len(data)
    dyn_off = dynstr_off + ((len(strtab) + 7) & ~7)
    shoff = off + (-off % 8)
    size = shoff + 64 * len(headers)
    header = (b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, ehdr, shoff, 0,
                                                              ehdr, phdr, 2, 64, len(headers), len(headers) - 1))
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)
    dynamic_ph = struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)
    out = header + load + dynamic_ph + body + bytes(-off % 8) + b"".join(headers)
    assert len(out) == size
    return out
