"""A compile cache (ccache, or sccache over a remote store) in front of the project's compilers.

CMake takes it as CMAKE_<LANG>_COMPILER_LAUNCHER; Meson finds ccache by itself. torch's cpp_extension
(setuptools) puts the ccache it finds in front of its compilers by itself from torch 2.13
(wheelci.config.compilecache.torch_finds_ccache), nvcc and its one-file-at-a-time path included, and puts
nothing before. There, and for sccache (which torch's wrapper would put behind ccache), CXX becomes a
one-word script that runs the real compiler through the cache (torch 2.13 quotes CXX as one word; older
torch writes it into its ninja file as is), named as the compiler is (torch picks GCC's or clang's limits
by that name), nvcc comes through PYTORCH_NVCC unless the user set it, and torch's own wrapper is off
(TORCH_NO_COMPILER_WRAPPER): never two caches in a row. Only the ninja path is cached so: the other
compiles C++ with CC, which stays plain (cpp_extension gives it to nvcc as -ccbin).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from wheelci.config.compilecache import cache_goes
from wheelci.util.atomic import fresh_text


CACHES = ("ccache", "sccache")
STEADY_EPOCH, STEADY_SPAN = 946_684_800 * 10**9, 10**17  # 2000-01-01 and about three years, in ns


@dataclass(frozen=True)
class Launchers:
    """What puts the cache in front of the compilers: the variables, and the build's config settings."""

    environ: dict[str, str] = field(default_factory=dict)
    config: list[str] = field(default_factory=list)  # -C cmake.define.CMAKE_<LANG>_COMPILER_LAUNCHER=...


def cmake_config(launcher: str, cuda: bool, cuda_launcher: str | None = None) -> list[str]:
    """scikit-build-core's settings putting `launcher` in front of CMake's compilers (`cuda_launcher` in
    front of nvcc, where given)."""
    given = {"C": launcher, "CXX": launcher, **({"CUDA": cuda_launcher or launcher} if cuda else {})}
    return [a for lang, run in given.items() for a in ("-C", f"cmake.define.CMAKE_{lang}_COMPILER_LAUNCHER={run}")]


def shim_text(launcher: str | tuple[str, ...], compiler: str | None, extra: tuple[str, ...] = ()) -> str:
    """A one-word compiler: `launcher [compiler] ARGS... [extra]` (no compiler: a launcher, given it first).
    `launcher`: one word, or several (a program and its arguments)."""
    words = " ".join(shlex.quote(w) for w in ((launcher,) if isinstance(launcher, str) else launcher)
                     + ((compiler,) if compiler else ()))
    after = "".join(f" {shlex.quote(a)}" for a in extra)
    return f'#!/bin/sh\nexec {words} "$@"{after}\n'


def _script(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh_text(path, text, 0o755)  # a link planted in a kept shim directory is replaced, never written through
    return str(path)


def real_compiler(name: str, path: str | None, shim_dir: Path | None = None) -> str | None:
    """`name` on `path`, as an absolute path, passing over ccache's and sccache's compiler links
    (/usr/lib/ccache/c++: in front of one, the cache would take the link for the compiler and keep its
    objects when the compiler changes) and our own scripts in `shim_dir` (one would run itself forever)."""
    ours = shim_dir.resolve() if shim_dir is not None else None

    def usable(found: str | None) -> bool:
        real = Path(found).resolve() if found else None
        return real is not None and real.name not in CACHES and real.parent != ours

    if "/" in name:
        found = shutil.which(name)
        return os.path.abspath(found) if found and usable(found) else None
    for folder in (path or "").split(os.pathsep):
        found = shutil.which(name, path=folder) if folder else None
        if found and usable(found):
            return os.path.abspath(found)
    return None


def launchers(launcher: Path, *, backend: str, cuda: bool, cxx: str | None, path: str | None, shim_dir: Path,
              nvcc: Path | None, torch_finds_it: bool = False, nvcc_args: tuple[str, ...] = (),
              nvcc_front: tuple[str, ...] = ()) -> Launchers:
    """`launcher` in front of a host build's compilers, as the project's build `backend` takes it. `cxx`:
    the CXX the build would use (None: c++), resolved on `path`; a compiler given with its flags (more than
    one word) stays as given, uncached. `nvcc`: None where the user named their own (PYTORCH_NVCC).
    `torch_finds_it`: the build's torch puts `launcher` there itself. `nvcc_args`: added to every nvcc call,
    by a script (neither CMake's flags nor cpp_extension's PYTORCH_NVCC keep a word's backslash).
    `nvcc_front`: a program nvcc's calls go through, given the launcher first (sccache: nvcc_launch)."""
    nvcc_launcher = (*nvcc_front, str(launcher))
    how = cache_goes(backend, torch_finds_it)
    if how == "cmake":
        cuda_launcher = _script(shim_dir / "nvcc-launcher", shim_text(nvcc_launcher, None, nvcc_args)) \
            if cuda and (nvcc_args or nvcc_front) else None
        return Launchers(config=cmake_config(str(launcher), cuda, cuda_launcher))
    if how == "itself":
        return Launchers()
    out = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    given = (cxx or "c++").strip()
    real = real_compiler(given, path, shim_dir) if given and not any(c.isspace() for c in given) else None
    if real is not None:  # torch checks the compiler by its name (c++, g++, clang++)
        out["CXX"] = _script(shim_dir / Path(given).name, shim_text(str(launcher), real))
    if nvcc is not None:
        # torch writes it into build.ninja as it is, which a shell runs: quoted
        out["PYTORCH_NVCC"] = (shlex.quote(_script(shim_dir / "nvcc", shim_text(nvcc_launcher, str(nvcc), nvcc_args)))
                               if nvcc_args or nvcc_front else shlex.join([str(launcher), str(nvcc)]))
    return Launchers(environ=out)


def _steady_script(path: Path, text: str, runs: Path) -> str:
    """_script for a script ccache takes for the compiler, which ccache knows by its size and mtime: the
    mtime is made from the text and from the compiler it `runs` (its real path, size and mtime: a toolkit
    upgraded in place), STEADY_EPOCH plus their digest, so a fresh work tree's script is the same compiler
    and another arch list or nvcc a new one. A file we cannot set is written anew."""
    real = runs.resolve()
    try:
        st = real.stat()
        key = f"{text}\0{real}\0{st.st_size}\0{st.st_mtime_ns}"
    except OSError:
        key = f"{text}\0{real}"
    mtime = STEADY_EPOCH + int(hashlib.sha256(key.encode()).hexdigest()[:15], 16) % STEADY_SPAN
    if not (path.is_file() and not path.is_symlink() and path.read_text(errors="replace") == text):
        _script(path, text)
    if path.stat().st_mtime_ns != mtime:
        try:
            os.utime(path, ns=(mtime, mtime), follow_symlinks=False)
        except OSError:  # not ours to set (another user's file with the same text)
            _script(path, text)
            os.utime(path, ns=(mtime, mtime), follow_symlinks=False)
    return str(path)


def narrowing(arch_list: str, python: Path, put: Launchers, environ: dict[str, str], *, cmake: bool, root: Path,
              where: Path) -> Launchers:
    """Every nvcc call of the build through resources/nvcc_targets.py (its docstring: why), in front of the
    compile cache's launchers `put`, so the cache keys the narrowed call. CMake: as CUDA's launcher.
    cpp_extension: as PYTORCH_NVCC, and as the nvcc of a CUDA root made of links to `root` (its one-file
    path runs CUDA_HOME's nvcc); `environ` is pointed at that root. Returns the launchers to use."""
    narrow = str(files("wheelci.resources") / "nvcc_targets.py")
    front = (str(python), "-I", "-S", narrow, arch_list, "--")
    environ["CCACHE_EXTRAFILES"] = os.pathsep.join(filter(None, (environ.get("CCACHE_EXTRAFILES"), narrow)))
    if cmake:
        prefix = "cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER="
        pairs = list(zip(put.config[::2], put.config[1::2]))
        given = [v.removeprefix(prefix) for _, v in pairs if v.startswith(prefix)]
        script = _steady_script(where / "nvcc-launcher", shim_text((*front, *given[:1]), None), root / "bin" / "nvcc")
        rest = [w for k, v in pairs if not v.startswith(prefix) for w in (k, v)]
        return Launchers(environ=put.environ, config=[*rest, "-C", prefix + script])
    chain = shlex.split(environ.get("PYTORCH_NVCC", "")) or [str(root / "bin" / "nvcc")]
    view = where / "cuda-root"
    nvcc = Path(_steady_script(view / "bin" / "nvcc", shim_text((*front, *chain), None), root / "bin" / "nvcc"))
    _link_view(root, view)
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT"):
        environ[name] = str(view)
    environ["CUDACXX"] = str(nvcc)
    environ["PATH"] = os.pathsep.join(str(view / "bin") if p == str(root / "bin") else p
                                      for p in environ.get("PATH", "").split(os.pathsep))
    out = dict(put.environ)
    if "PYTORCH_NVCC" in environ:  # torch's own ccache wrapper (no PYTORCH_NVCC) finds CUDA_HOME's nvcc: this one
        out["PYTORCH_NVCC"] = environ["PYTORCH_NVCC"] = shlex.quote(str(nvcc))
    return Launchers(environ=out, config=put.config)


def _link_view(root: Path, view: Path) -> None:
    """`view`: links to every entry of `root`, and of its bin/ but nvcc (already there); stale links go."""
    for src, dst in ((root, view), (root / "bin", view / "bin")):
        names = {n for n in os.listdir(src) if not (dst == view and n == "bin") and not (dst.name == "bin" and n == "nvcc")}
        for old in os.listdir(dst):
            if (dst / old).is_symlink() and old not in names:
                (dst / old).unlink()
        for name in names:
            link, target = dst / name, src / name
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            if link.is_symlink() or link.is_file():
                link.unlink()
            elif link.exists():
                shutil.rmtree(link)
            link.symlink_to(target)
