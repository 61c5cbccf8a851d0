"""The one cache directory every stage and test shares: build envs, downloaded wheels, ccache.

$CUDA_WHEEL_CI_CACHE, else $XDG_CACHE_HOME/cuda-wheel-ci, else ~/.cache/cuda-wheel-ci. Kept outside
the checkout so a fresh clone (and CI on the same machine) reuses the ~3 GB CUDA environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping


def cache_dir(*parts: str, env: Mapping[str, str] | None = None) -> Path:
    """A path in the cache; `env` is the environment to read (default: this process's)."""
    env = os.environ if env is None else env
    base = env.get("CUDA_WHEEL_CI_CACHE")
    root = Path(base) if base else Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cuda-wheel-ci"
    return root.expanduser().joinpath(*parts)
