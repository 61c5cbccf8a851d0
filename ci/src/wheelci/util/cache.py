"""The one cache directory every stage and test shares: build envs, downloaded wheels, ccache.

$CUDA_WHEEL_CI_CACHE, else $XDG_CACHE_HOME/cuda-wheel-ci, else ~/.cache/cuda-wheel-ci. Kept outside
the checkout so a fresh clone (and CI on the same machine) reuses the ~3 GB CUDA environment.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    base = os.environ.get("CUDA_WHEEL_CI_CACHE")
    root = Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cuda-wheel-ci"
    return root.expanduser().joinpath(*parts)
