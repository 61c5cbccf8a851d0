"""Scaled softmax as a PyTorch custom op: `softmax(x * scale, dim=-1)` with CPU and CUDA (cuDNN) kernels.

The op library has no Python.h in it, so the same file serves Python (loaded here with
torch.ops.load_library) and C++ programs (linked directly). Before loading it we preload, in
dependency order, the libraries it links but the wheel does not bundle (torch's, cuDNN, cudart), so
the package also imports when every wheel sits in its own directory (Bazel, PEX, pip --target).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

try:  # generated into the wheel by the build pipeline (python -m ci.build)
    from . import _preload
except ImportError:  # a plain `pip install .` has no generated preload: RUNPATH must suffice
    _preload = None
if _preload is not None:
    _preload.preload()

NAMESPACE = __name__.rsplit(".", 1)[-1]


def _find_library() -> Path:
    """The op library: in our lib/, or in the `<package>_libs` companion wheel when a size limit
    made the pipeline split it out (ci.split keeps its relative path, so RUNPATH still holds)."""
    dirs = [Path(__file__).parent / "lib"]
    dirs += [Path(entry) / f"{NAMESPACE}_libs" / "lib" for entry in sys.path if entry]
    for d in dirs:
        found = sorted(d.glob(f"lib{NAMESPACE}.so"))
        if found:
            return found[0]
    raise ImportError(f"lib{NAMESPACE}.so not found in {', '.join(map(str, dirs))}")


LIBRARY = _find_library()
torch.ops.load_library(str(LIBRARY))
_ops = getattr(torch.ops, NAMESPACE)

from . import _meta  # noqa: E402  (fake and autograd kernels need the library loaded first)

__all__ = ["scaled_softmax", "scaled_softmax_backward", "LIBRARY", "NAMESPACE"]


def scaled_softmax(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """softmax(x * scale) over the last dimension; differentiable, traceable, scriptable via torch.ops."""
    return _ops.scaled_softmax(x, float(scale))


def scaled_softmax_backward(grad: torch.Tensor, y: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Gradient of scaled_softmax with respect to x, given its output y."""
    return _ops.scaled_softmax_backward(grad, y, float(scale))
