"""A compile cache (ccache, or sccache over a remote store) in front of the project's compilers.

CMake takes it as CMAKE_<LANG>_COMPILER_LAUNCHER; Meson finds ccache by itself. torch's cpp_extension
(setuptools) puts the ccache it finds in front of its compilers by itself from torch 2.13
(wheelci.config.compilecache.torch_finds_ccache), nvcc and its one-file-at-a-time path included, and puts
nothing before: there, and for sccache (which torch's wrapper would put behind ccache), CXX becomes a
one-word script (cpp_extension quotes CXX as one word) that runs the real compiler through the cache, nvcc
comes through PYTORCH_NVCC, and torch's own wrapper is off (TORCH_NO_COMPILER_WRAPPER): never two caches
in a row. (Through those, only the ninja path is cached: the other compiles C++ with CC.) CC stays plain: cpp_extension gives it to nvcc as
-ccbin, where a script fails nvcc's probe of its host compiler.
"""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from wheelci.config.project import Backend


@dataclass(frozen=True)
class Launchers:
    """What puts the cache in front of the compilers: the variables, and the build's config settings."""

    environ: dict[str, str] = field(default_factory=dict)
    config: list[str] = field(default_factory=list)  # -C cmake.define.CMAKE_<LANG>_COMPILER_LAUNCHER=...


def cmake_config(launcher: str, cuda: bool) -> list[str]:
    """scikit-build-core's settings putting `launcher` in front of CMake's compilers."""
    langs = ["C", "CXX"] + (["CUDA"] if cuda else [])
    return [a for lang in langs for a in ("-C", f"cmake.define.CMAKE_{lang}_COMPILER_LAUNCHER={launcher}")]


def shim_text(launcher: str, compiler: str) -> str:
    """The one-word CXX: `launcher compiler ARGS...`."""
    return f'#!/bin/sh\nexec {shlex.quote(launcher)} {shlex.quote(compiler)} "$@"\n'


def launchers(launcher: Path, *, backend: str, cuda: bool, cxx: str | None, path: str | None, shim_dir: Path,
              nvcc: Path | None, torch_finds_it: bool = False) -> Launchers:
    """`launcher` in front of a host build's compilers, as the project's build `backend` takes it. `cxx`:
    the CXX the build would use (None: c++), resolved on `path`; a compiler given with its flags (more than
    one word) stays as given, uncached. `torch_finds_it`: the build's torch puts `launcher` there itself."""
    if backend == Backend.SCIKIT_BUILD_CORE:
        return Launchers(config=cmake_config(str(launcher), cuda))
    if backend == Backend.MESON_PYTHON or torch_finds_it:
        return Launchers()
    out = {"TORCH_NO_COMPILER_WRAPPER": "1"}
    given = (cxx or "c++").strip()
    real = shutil.which(given, path=path) if given and " " not in given else None
    if real is not None:
        shim_dir.mkdir(parents=True, exist_ok=True)
        shim = shim_dir / "c++"  # torch checks the compiler by its name (c++, g++)
        shim.write_text(shim_text(str(launcher), real))
        shim.chmod(0o755)
        out["CXX"] = str(shim)
    if nvcc is not None:
        out["PYTORCH_NVCC"] = shlex.join([str(launcher), str(nvcc)])
    return Launchers(environ=out)
