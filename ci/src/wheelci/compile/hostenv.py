"""Host build environments: a cached venv holding the plan's torch, and a CUDA root built from wheels.

A host build needs three things a container image would otherwise bring: the right torch build (CPU,
or the CUDA build matching --cuda), an nvcc of that CUDA version, and the CUDA/cuDNN headers and
libraries torch's CMake config expects. The venv lives in the cache directory and is reused across
runs (a stamp file marks it complete); the CUDA root is a directory of symlinks laid over the host
nvcc (when its version matches) or the nvidia-cuda-nvcc wheel, plus every nvidia-* wheel torch pulled
in, with the unversioned library links (libcudart.so -> libcudart.so.13) CMake looks for.
Builds on one machine share the venv: whoever creates or changes it holds its lock (ci.util.lock).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from wheelci.config import constraints, matrix as mx
from wheelci.engine import host_nvcc, nvcc_version, real_nvcc
from wheelci.errors import CiError
from wheelci.plan import CUDA_VARIABLES
from wheelci.util import log, proc, secret, share
from wheelci.util.atomic import write_text
from wheelci.util.cache import cache_dir, mark_used, read_stamp
from wheelci.util.http import shown
from wheelci.util.lock import held_for_process, locked_file
from wheelci.wheel.names import cuda_tag

PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class TorchSpec:
    """Which torch to install: version, CUDA variant (None = CPU) and where it comes from."""

    version: str
    cuda: str | None
    index_url: str | None  # the PyTorch index for this variant
    on_pypi: bool  # PyPI's default Linux build of this version is this CUDA variant

    @property
    def variant(self) -> str:
        return cuda_tag(self.cuda)


@dataclass(frozen=True)
class BuildEnv:
    """A ready venv: its interpreter, site-packages, and what torch it really holds."""

    root: Path
    python: Path
    site: Path
    torch_version: str
    torch_cuda: str | None
    requires: list[str]  # torch's Requires-Dist, for the repair stage (cuDNN pin)
    torch_source: str | None = None  # where its torch was installed from (torch_source); None: not recorded

    def __str__(self) -> str:
        return f"torch {self.torch_version} in {self.root}"


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


def uv_binary() -> str | None:
    """uv, where it serves: the `uv` distribution's binary (a dependency of this tool), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


PYTORCH_INDEX = "https://download.pytorch.org/"  # the PyTorch indexes, which others may stand in for


def torch_pip_args(spec: TorchSpec) -> tuple[list[str], str]:
    """pip arguments that install exactly this torch variant, and a line saying where it comes from.

    An index of the user's (not PYTORCH_INDEX) is the only source: unreachable, it is one error line.
    Prefers the PyTorch index of the variant; when that is unreachable, falls back to PyPI where
    PyPI's default build is this variant (cu130 for 2.13.0), and for CPU builds to pip's own
    configuration (a mirror or find-links); the installed build is checked afterwards either way.
    Arguments that start with --isolated name their index themselves: uv can run them too.
    """
    req = f"torch=={spec.version}"
    if spec.index_url and reachable(spec.index_url):
        return ["--isolated", "--index-url", spec.index_url, "--extra-index-url", PYPI, req], spec.index_url
    if spec.index_url and not spec.index_url.startswith(PYTORCH_INDEX):
        # an index of the user's (a mirror, a private index): the environment is keyed for it, so a torch
        # from anywhere else never fills it

        raise CiError(f"the torch index {shown(spec.index_url)} is unreachable from here: torch {spec.version} is "
                      "installed from that index only; check its address and the network")
    if spec.cuda is not None and spec.on_pypi:
        return ["--isolated", req], f"PyPI (its default Linux build of torch {spec.version} is {spec.variant})"
    if spec.cuda is None:
        return [req], "pip's configured indexes (the PyTorch CPU index is unreachable)"
    raise CiError(
        f"torch {spec.version} for CUDA {spec.cuda} is only on {spec.index_url}, which is unreachable "
        f"from here; pass --torch-index-url with a mirror"
    )


def uv_args(pip_args: list[str]) -> list[str]:
    """torch_pip_args' isolated arguments as uv reads them: pip's --index-url and --extra-index-url are
    uv's --index and --default-index, and like pip uv then takes the best version from either (uv's default
    takes a package from the first index that has it, so a mirror's old copy of a dependency would win)."""
    args = pip_args[1:] if pip_args[:1] == ["--isolated"] else list(pip_args)
    out = ["--index-strategy", "unsafe-best-match"] if "--extra-index-url" in args else []  # pip's: every index
    while args:
        arg = args.pop(0)
        if arg in ("--index-url", "--extra-index-url"):
            out += ["--index" if arg == "--index-url" else "--default-index", args.pop(0)]
        else:
            out.append(arg)
    return out


def _torch_info(python: Path) -> dict[str, Any]:
    code = (
        "import json, importlib.metadata as m, torch, sysconfig;"
        "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
        "'site': sysconfig.get_paths()['purelib'], 'requires': m.requires('torch') or []}))"
    )
    out = proc.run([python, "-c", code], what=f"reading torch's version in {python}", capture_output=True,
                   text=True).stdout
    info: dict[str, Any] = json.loads(out.strip().splitlines()[-1])  # the document `code` prints
    return info


STAMP = ".complete.json"
TORCH_REPORT = "torch-install.json"  # pip's install report (--report) of the torch install, kept in the env


def torch_source(report: Path | None, uv_args: list[str], version: str) -> str | None:
    """Where the torch install took torch from: the file pip's install report names (an index's wheel URL, or
    a local wheel of a find-links directory). uv writes no report, but is only ever given indexes: the one
    index, else the first when the version has a local label (PyPI serves none), else both, as uv chose.
    Each URL without its userinfo: the stamp keeps this, and a cache holds no credential."""

    if report is not None:
        try:
            installed = json.loads(report.read_text()).get("install", [])
        except (OSError, ValueError, AttributeError):
            return None
        for item in installed if isinstance(installed, list) else []:
            name = str((item.get("metadata") or {}).get("name", "")) if isinstance(item, dict) else ""
            url = (item.get("download_info") or {}).get("url") if name.lower() == "torch" else None
            if isinstance(url, str) and url:
                return shown(url)
        return None
    indexes = [shown(uv_args[i + 1]) for i, a in enumerate(uv_args[:-1]) if a in ("--index", "--default-index")] or [PYPI]
    if len(indexes) == 1 or "+" in version:
        return indexes[0]
    return f"{' or '.join(indexes)} (uv took the best match of these indexes)"


def scrub_credentials(path: Path) -> None:
    """A file the environment keeps (pip's install report) with every URL's userinfo and every registered
    secret removed: a cache holds no credential."""
    try:
        text = path.read_text(errors="surrogateescape")
    except OSError:
        return
    clean = secret.redact(re.sub(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s'\"@]*@", r"\1", text))
    if clean != text:
        write_text(path, clean)


CHANGED = ".changed-by-a-build"  # a build changed the environment after all: made again when next needed


def _load_env(root: Path) -> tuple[BuildEnv | None, str]:
    """The environment its stamp describes, or (None, why not): a stamp that is missing, cut off or
    not ours, or an environment that lost its interpreter (the Python it was made from was removed)
    or its torch. Read and checked, never trusted: a broken one is rebuilt, not used."""
    try:
        raw = read_stamp(root / STAMP, 1 << 20)
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"its stamp cannot be read ({e.strerror or 'not a regular file'})"
    try:
        info = json.loads(raw)
        site, version, cuda, requires = info["site"], info["version"], info["cuda"], info["requires"]
        source = info.get("source")  # absent from a stamp written before it was recorded
        if not (isinstance(site, str) and isinstance(version, str) and isinstance(cuda, (str, type(None)))
                and isinstance(requires, list) and all(isinstance(r, str) for r in requires)
                and isinstance(source, (str, type(None)))):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        return None, "its stamp is cut off or corrupt"
    python = root / "bin" / "python"
    if not (python.is_file() and os.access(python, os.X_OK)):
        return None, "its interpreter is missing"
    if (root / CHANGED).exists():
        return None, "a build changed it (wheelci.compile.overlay)"
    if not (Path(site) / "torch" / "__init__.py").is_file():
        return None, "its torch is missing"
    return BuildEnv(root, python, Path(site), version, cuda, requires, source), ""


def cached_env(root: Path, create: Callable[[Path], dict[str, Any]]) -> BuildEnv:
    """The ready environment at root, made by create(root) (which returns what the stamp records)
    where it is missing or broken.

    Processes preparing the same environment take turns (ci.util.lock): the first creates it and
    the others wait, then use it. The stamp is written last and atomically, so an interrupted
    creation is redone, not reused; a broken environment is removed whole and made again."""

    env, _ = _load_env(root)
    if env is not None:
        return env
    with locked_file(root.with_name(root.name + ".lock"), f"the build environment {root.name}"):
        env, why = _load_env(root)  # another process may have made it while this one waited
        if env is not None:
            return env
        if why != "missing":
            log.info(f"rebuilding the build environment {root}: {why}")
        (root / STAMP).unlink(missing_ok=True)
        shutil.rmtree(root, ignore_errors=True)
        info = create(root)
        write_text(root / STAMP, json.dumps(info))
        env, why = _load_env(root)
        if env is None:
            raise CiError(f"the build environment {root} is not usable right after creating it: {why}")
        return env


def env_root(spec: TorchSpec, env: Mapping[str, str] = os.environ) -> Path:
    """Where the build venv of this torch variant, this Python and this provenance is cached: an index
    other than the matrix's own for the variant (a mirror, --torch-index-url, pip's configured index)
    adds its key, so two indexes never share an environment (the first one's torch would be reused)."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    key = provenance_key(spec, env)
    return cache_dir() / "envs" / (f"torch-{spec.version}-{spec.variant}-{tag}" + (f"-from-{key}" if key else ""))


def provenance(spec: TorchSpec, env: Mapping[str, str] = os.environ) -> str:
    """Where this spec's torch comes from, as the environment's key reads it: the index's URL without its
    credentials, or (no index named) pip's configured indexes and find-links. Never a credential."""

    if spec.index_url:
        return shown(spec.index_url).rstrip("/")
    pip = [f"{k}={shown(v) if '://' in v else v}" for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS")
           if (v := env.get(k, "").strip())]
    return "pip:" + ";".join(pip) if pip else ""


def provenance_key(spec: TorchSpec, env: Mapping[str, str] = os.environ) -> str:
    """"" for the matrix's own index of the variant (or pip's defaults): the name environments always had."""

    where = provenance(spec, env)
    matrix = mx.load()
    defaults = {"", matrix.cpu_index_url.rstrip("/"), *(r.torch_index_url.rstrip("/") for r in matrix.rows)}
    return "" if where in defaults else hashlib.sha256(where.encode()).hexdigest()[:12]


def ensure_env(spec: TorchSpec) -> BuildEnv:
    """Create (or reuse) the cached build venv for this torch variant and this Python (see cached_env)."""
    return held_env(env_root(spec), lambda where: create_env(where, spec))


def env_state(spec: TorchSpec) -> str:
    """What a build will do for its environment, as the dry run says it: reuse the one cached (checked as
    cached_env checks it, nothing made), or make it."""
    root = env_root(spec)
    env, why = _load_env(root)
    if env is not None:
        return f"the cached build environment {root} (torch {env.torch_version}), reused"
    return (f"none cached yet: this build makes one at {root}" if why == "missing"
            else f"the cached one at {root} is not usable ({why}): this build makes it again")


def held_env(root: Path, create: Callable[[Path], dict[str, Any]]) -> BuildEnv:
    """cached_env, held shared for the rest of this process (no prune removes it under the build) and
    stamped used; made again where a prune removed it between the two."""

    for _ in range(3):
        env = cached_env(root, create)
        if held_for_process(root, f"the build environment {root.name}"):
            mark_used(root, measure=False)  # measured at its first use
            return env
    raise CiError(f"the build environment {root} was removed by other runs three times while this one used it")


def create_env(root: Path, spec: TorchSpec, installer: str = "auto") -> dict[str, Any]:
    """A venv with the spec's torch and the build tools; returns what the stamp records. `installer`:
    auto (uv where the arguments name their index, else pip), or pip or uv (`wheelci bench env`)."""
    args, source = torch_pip_args(spec)
    log.info(f"creating build environment {root} (torch {spec.version} {spec.variant} from {source})")
    start = time.monotonic()
    # GBs of downloads: pip's own progress bars on a terminal, one line when done in logs and CI.
    # Its output goes to stderr: stdout belongs to the stage (`--json` must stay parseable).
    quiet = [] if sys.stderr.isatty() else ["--quiet"]
    # progress and pip's errors, live, through the one redaction (an index page's signed links appear in
    # them) and bound to this build's life (proc.stream)
    what = f"creating the build environment {root}"
    proc.stream([sys.executable, "-m", "venv", root], what=what)
    pip = [root / "bin" / "python", "-m", "pip", "install", *quiet, "--disable-pip-version-check"]
    uv = uv_binary() if args[0] == "--isolated" and installer != "pip" else None  # pip's configuration is pip's
    if installer == "uv" and uv is None:
        raise CiError("no uv to create the environment with (or its torch comes from pip's configuration)")
    report: Path | None = root / TORCH_REPORT
    torch_install = [*pip, "--report", report, *args]
    if uv is not None:  # uv: parallel downloads and installs, and a torch release pip's configuration caps
        torch_install = [uv, "pip", "install", *quiet, "--python", root / "bin" / "python", *uv_args(args)]
        report = None
    with log.Ticker("creating the build environment", live=False):  # a quiet pip: minutes of silence in CI
        proc.stream(torch_install, what=f"{what} (torch {spec.version} from {source})")
        # the tools through pip, from wherever the machine's pip configuration says (a mirror, its CA)
        proc.stream([*pip, "-c", constraints.CONSTRAINTS, *constraints.BUILD_TOOLS], what=f"{what} (the build tools)")
    info = _torch_info(root / "bin" / "python")
    info["source"] = torch_source(report, uv_args(args) if report is None else [], info["version"])
    if report is not None:
        scrub_credentials(report)
    got_cuda = info["cuda"]
    want = spec.cuda
    if (want is None) != (got_cuda is None) or (want and not got_cuda.startswith(want)):
        shutil.rmtree(root, ignore_errors=True)
        raise CiError(
            f"{source} gave torch {info['version']} (CUDA {got_cuda or 'none'}), not the "
            f"{spec.variant} build; pass --torch-index-url for the {spec.variant} index or a mirror"
        )
    # CUDA builds of torch of one line install many of the same nvidia-* libraries: store them once
    siblings = sorted(p for p in root.parent.iterdir() if p != root and (p / STAMP).is_file())
    saved = share.link_identical(root, siblings)
    shared = f", {saved / 2**30:.1f} GB of it shared with other environments" if saved >= 2**27 else ""
    log.info(f"build environment ready in {time.monotonic() - start:.0f} s{shared}")
    return info


# --- nvcc and the CUDA root -------------------------------------------------------------------


def find_nvcc(env: BuildEnv, cuda: str, wheels: tuple[str, ...] = (), *, source: str = "auto",
) -> Path:
    """nvcc of exactly this CUDA version: the host's (source "host", or "auto" when it matches), else
    NVIDIA's wheels installed into the build env (`wheels`: the matrix row's toolkit wheels, empty
    where NVIDIA ships no nvcc wheel for that version)."""
    host = host_nvcc()
    host_version = nvcc_version(host) if host else None
    if host is not None and source in ("auto", "host") and host_version == cuda:
        return real_nvcc(host)
    have = f"host nvcc is {host_version}" if host else "no host nvcc"
    if source == "host":
        raise CiError(f"--nvcc host: {have}, not {cuda}")
    for cand in sorted(env.site.glob("nvidia/*/bin/nvcc")):
        if nvcc_version(cand) == cuda:
            return cand
    if not wheels:
        raise CiError(f"no nvcc obtainable for CUDA {cuda}: {have} and NVIDIA ships no nvcc wheel for it")

    # The env is shared: two builds installing into it at once would interleave pip's writes.
    with locked_file(env.root.with_name(env.root.name + ".lock"), f"the build environment {env.root.name}"):
        return _install_nvcc(env, cuda, wheels, have)


def _install_nvcc(env: BuildEnv, cuda: str, wheels: tuple[str, ...], have: str) -> Path:
    for cand in sorted(env.site.glob("nvidia/*/bin/nvcc")):  # installed while this run waited
        if nvcc_version(cand) == cuda:
            return cand
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
    for versioned in sorted((tmp / "lib64").glob("lib*.so.*")):
        plain = versioned.parent / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.resolve())
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
