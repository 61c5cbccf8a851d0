"""The libraries torch and NVIDIA's wheels provide: an extension links them but never carries them.

Shared by repair (auditwheel's exclusions), verify (nothing of them grafted) and the build report.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable

# Library stems that must never be grafted: torch's own (its OpenMP runtime included: torch ships
# libgomp.so.1 and a second copy in the extension's wheel breaks at run time), then NVIDIA's. One list;
# the auditwheel patterns are derived from it as `lib<stem>*.so*`, so versioned sonames match.
TORCH_LIBRARIES = ("torch", "c10", "shm", "caffe2", "gomp")
CUDA_LIBRARIES = (
    "cuda", "cudart", "cudnn", "cublas", "cublasLt", "cufft", "cufile", "curand", "cusolver",
    "cusparse", "cusparseLt", "cupti", "nvrtc", "nvJitLink", "nvToolsExt", "nvtx3interop", "nccl",
    "nvshmem", "nvidia-ml", "nvperf", "cudss", "cutensor",
)
EXCLUDES = tuple(f"lib{stem}*.so*" for stem in TORCH_LIBRARIES + CUDA_LIBRARIES)


def is_excluded(soname: str) -> bool:
    return any(fnmatch.fnmatchcase(soname, p) for p in EXCLUDES)


def links_libtorch(needed: Iterable[str]) -> bool:
    """Whether any of these sonames is LibTorch's own (libtorch*, libc10*): a library that links none (a
    ctypes-loaded CUDA library, bitsandbytes') does not tie its wheel to one torch release."""
    return any(fnmatch.fnmatchcase(n, p) for n in needed for p in ("libtorch*.so*", "libc10*.so*"))


def excluded_of(needed: Iterable[str]) -> list[str]:
    """The NEEDED sonames torch and the CUDA wheels provide (each once, sorted): what a repaired wheel
    leaves to them and declares instead."""
    return sorted({n for n in needed if is_excluded(n)})
