"""Host build environments: a cached venv holding the plan's torch, and a CUDA root built from wheels.

A host build needs three things a container image would otherwise bring: the right torch build (CPU,
or the CUDA build matching --cuda), an nvcc of that CUDA version, and the CUDA/cuDNN headers and
libraries torch's CMake config expects. The venv lives in the cache directory and is reused across
runs (a stamp file marks it complete); the CUDA root is a directory of symlinks laid over the host
nvcc (when its version matches) or the nvidia-cuda-nvcc wheel, plus every nvidia-* wheel torch pulled
in, with the unversioned library links (libcudart.so -> libcudart.so.13) CMake looks for.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from wheelci.config import constraints
from wheelci.engine import host_nvcc, nvcc_version, real_nvcc
from wheelci.util import log, proc
from wheelci.util.cache import cache_dir
from wheelci.errors import CiError

PYPI = "https://pypi.org/simple"
# Build tools installed next to torch, at the versions of wheelci/resources/build-constraints.txt.
BUILD_TOOLS = ("scikit-build-core", "cmake", "ninja", "build", "wheel", "pyelftools", "packaging")


@dataclass(frozen=True)
class TorchSpec:
    """Which torch to install: version, CUDA variant (None = CPU) and where it comes from."""

    version: str
    cuda: str | None
    index_url: str | None  # the PyTorch index for this variant
    on_pypi: bool  # PyPI's default Linux build of this version is this CUDA variant

    @property
    def variant(self) -> str:
        return "cpu" if self.cuda is None else "cu" + self.cuda.replace(".", "")


@dataclass(frozen=True)
class BuildEnv:
    """A ready venv: its interpreter, site-packages, and what torch it really holds."""

    root: Path
    python: Path
    site: Path
    torch_version: str
    torch_cuda: str | None
    requires: list[str]  # torch's Requires-Dist, for the repair stage (cuDNN pin)


def reachable(url: str, timeout: float = 5.0) -> bool:
    """Can we open a TCP connection to the URL's host? A closed network fails at once (DNS), so
    checking first avoids pip's minutes of retries against an index we cannot reach."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        return Path(urllib.parse.unquote(parts.path)).exists()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def torch_pip_args(spec: TorchSpec) -> tuple[list[str], str]:
    """pip arguments that install exactly this torch variant, and a line saying where it comes from.

    Prefers the PyTorch index of the variant; when that is unreachable, falls back to PyPI where
    PyPI's default build is this variant (cu130 for 2.13.0), and for CPU builds to pip's own
    configuration (a mirror or find-links); the installed build is checked afterwards either way.
    """
    req = f"torch=={spec.version}"
    if spec.index_url and reachable(spec.index_url):
        return ["--isolated", "--index-url", spec.index_url, "--extra-index-url", PYPI, req], spec.index_url
    if spec.cuda is not None and spec.on_pypi:
        return ["--isolated", req], f"PyPI (its default Linux build of torch {spec.version} is {spec.variant})"
    if spec.cuda is None:
        return [req], "pip's configured indexes (the PyTorch CPU index is unreachable)"
    raise CiError(
        f"torch {spec.version} for CUDA {spec.cuda} is only on {spec.index_url}, which is unreachable "
        f"from here; pass --torch-index-url with a mirror"
    )


def _torch_info(python: Path) -> dict:
    code = (
        "import json, importlib.metadata as m, torch, sysconfig;"
        "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
        "'site': sysconfig.get_paths()['purelib'], 'requires': m.requires('torch') or []}))"
    )
    out = proc.run([python, "-c", code], what=f"reading torch's version in {python}", capture_output=True,
                   text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Serialize processes preparing the same environment (parallel builds on one machine)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _load_env(root: Path, stamp: Path) -> BuildEnv:
    info = json.loads(stamp.read_text())
    return BuildEnv(root, root / "bin" / "python", Path(info["site"]), info["version"], info["cuda"],
                    info["requires"])


def ensure_env(spec: TorchSpec) -> BuildEnv:
    """Create (or reuse) the cached build venv for this torch variant and this Python.

    A stamp written last marks it complete, so an interrupted creation is redone, not reused."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    root = cache_dir() / "envs" / f"torch-{spec.version}-{spec.variant}-{tag}"
    stamp = root / ".complete.json"
    if stamp.exists():
        return _load_env(root, stamp)
    with _exclusive(root.with_name(root.name + ".lock")):
        if stamp.exists():  # another process made it while we waited
            return _load_env(root, stamp)
        args, source = torch_pip_args(spec)
        log.info(f"creating build environment {root} (torch {spec.version} {spec.variant} from {source})")
        start = time.monotonic()
        shutil.rmtree(root, ignore_errors=True)
        # GBs of downloads: pip's own progress bars on a terminal, one line when done in logs and CI.
        # Its output goes to stderr: stdout belongs to the stage (`--json` must stay parseable).
        quiet = [] if sys.stderr.isatty() else ["--quiet"]
        to_stderr = {"stdout": sys.stderr.fileno(), "stderr": None}  # progress and pip's errors, live
        what = f"creating the build environment {root}"
        proc.run([sys.executable, "-m", "venv", root], what=what, **to_stderr)
        pip = [root / "bin" / "python", "-m", "pip", "install", *quiet, "--disable-pip-version-check"]
        with log.Ticker("creating the build environment", live=False):  # a quiet pip: minutes of silence in CI
            proc.run([*pip, *args], what=f"{what} (torch {spec.version} from {source})", **to_stderr)
            proc.run([*pip, "-c", constraints.CONSTRAINTS, *BUILD_TOOLS], what=f"{what} (the build tools)",
                     **to_stderr)
        info = _torch_info(root / "bin" / "python")
        got_cuda = info["cuda"]
        want = spec.cuda
        if (want is None) != (got_cuda is None) or (want and not got_cuda.startswith(want)):
            shutil.rmtree(root, ignore_errors=True)
            raise CiError(
                f"{source} gave torch {info['version']} (CUDA {got_cuda or 'none'}), not the "
                f"{spec.variant} build; pass --torch-index-url for the {spec.variant} index or a mirror"
            )
        stamp.write_text(json.dumps(info))
        log.info(f"build environment ready in {time.monotonic() - start:.0f} s")
        return _load_env(root, stamp)


# --- nvcc and the CUDA root -------------------------------------------------------------------


def find_nvcc(env: BuildEnv, cuda: str, wheels: tuple[str, ...] = (), *, source: str = "auto",
) -> Path:
    """nvcc of exactly this CUDA version: the host's (source "host", or "auto" when it matches), else
    NVIDIA's wheels installed into the build env (`wheels`: the matrix row's toolkit wheels, empty
    where NVIDIA ships no nvcc wheel for that version)."""
    host = host_nvcc()
    host_version = nvcc_version(host) if host else None
    if source in ("auto", "host") and host_version == cuda:
        return real_nvcc(host)
    have = f"host nvcc is {host_version}" if host else "no host nvcc"
    if source == "host":
        raise CiError(f"--nvcc host: {have}, not {cuda}")
    for cand in sorted(env.site.glob("nvidia/*/bin/nvcc")):
        if nvcc_version(cand) == cuda:
            return cand
    if not wheels:
        raise CiError(f"no nvcc obtainable for CUDA {cuda}: {have} and NVIDIA ships no nvcc wheel for it")
    log.info(f"{have}; installing nvcc {cuda} from NVIDIA's wheels ({', '.join(wheels)})")
    with log.Ticker(f"installing nvcc {cuda}"):
        r = proc.run([env.python, "-m", "pip", "install", "--quiet", "--isolated", *wheels],
                     what=f"installing nvcc {cuda}", check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise CiError(f"no nvcc obtainable for CUDA {cuda}: {have} and pip could not install {wheels[0]} "
                      f"({proc.failure(r.args, r)})")
    for cand in sorted(env.site.glob("nvidia/*/bin/nvcc")):
        if nvcc_version(cand) == cuda:
            return cand
    raise CiError(f"no nvcc obtainable for CUDA {cuda}: {wheels[0]} installed no working nvcc {cuda}")


def _link_entries(src: Path, dest: Path) -> None:
    """Symlink every entry of src into dest unless dest already has that name (first wins)."""
    if not src.is_dir():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        target = dest / entry.name
        if not target.exists() and not target.is_symlink():
            target.symlink_to(entry.resolve())


def assemble_cuda_root(env: BuildEnv, nvcc: Path) -> Path:
    """A CUDA_HOME-shaped tree: nvcc's own toolkit first, then every nvidia-* wheel in the env.

    Only symlinks, keyed by the nvcc and the wheels it is made of, built in a temp directory and
    renamed into place: a concurrent build never sees a half-made root, and a changed env gets a
    new one.
    """
    home = nvcc.parent.parent
    wheel_dirs = sorted(p for p in (env.site / "nvidia").glob("*") if p.is_dir())
    key = hashlib.sha256("\n".join(map(str, [nvcc, *wheel_dirs])).encode()).hexdigest()[:12]
    root = env.root / f"cuda-root-{key}"
    if root.is_dir():
        return root
    tmp = Path(tempfile.mkdtemp(prefix=".cuda-root-", dir=env.root))
    _link_entries(home / "bin", tmp / "bin")
    for name in ("nvvm", "share"):
        if (home / name).is_dir():
            (tmp / name).symlink_to((home / name).resolve())
    for src in [home, *wheel_dirs]:
        _link_entries(src / "include", tmp / "include")
        for lib in ("lib64", "lib"):
            _link_entries(src / lib, tmp / "lib64")
    # CMake and the linker look for unversioned names; wheels ship only libfoo.so.N.
    for lib in sorted((tmp / "lib64").glob("lib*.so.*")):
        plain = lib.parent / (lib.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(lib.resolve())
    (tmp / "lib").symlink_to("lib64")
    try:
        tmp.rename(root)
    except OSError:  # another build made the same root first
        shutil.rmtree(tmp)
    return root


def cuda_build_environ(root: Path, arch_list: str) -> dict[str, str]:
    """Environment variables that point CMake, torch's CMake config and nvcc at the CUDA root."""
    return {
        "CUDA_HOME": str(root),
        "CUDA_PATH": str(root),
        "CUDACXX": str(root / "bin" / "nvcc"),
        "CUDAToolkit_ROOT": str(root),
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def cpu_environ(environ: dict[str, str], nvcc_dirs: list[str], where: Path) -> dict[str, str]:
    """`environ` as a CPU build's compile sees it (ci.plan.CpuView): each PATH entry of `nvcc_dirs`
    replaced by a directory made in `where` of links to everything it holds but nvcc, and no variable
    naming a CUDA toolkit. Links, not a narrower PATH: the same directory may hold the C++ compiler."""
    from wheelci.plan import CUDA_VARIABLES

    if where.exists():
        shutil.rmtree(where)  # a reused work directory: the PATH of an earlier build
    views: dict[str, str] = {}
    for i, entry in enumerate(nvcc_dirs):
        view = where / str(i)
        view.mkdir(parents=True)
        try:
            names = sorted(os.listdir(entry))
        except OSError:  # unreadable: the compile could not run from it either
            names = []
        for name in names:
            if name != "nvcc":
                (view / name).symlink_to(os.path.join(entry, name))
        views[entry] = str(view)
    path = [views.get(e, e) for e in environ.get("PATH", "").split(os.pathsep)]
    return {**{k: v for k, v in environ.items() if k not in CUDA_VARIABLES}, "PATH": os.pathsep.join(path)}
