"""Benchmark creating a torch build environment with uv against pip: `python -m ci.bench env`.

Both make the same environment the host engine makes (a venv, torch from PyPI, the build tools), from
the same index, into fresh directories, alternating which goes first each round; both keep their own
download caches, so after the first round this is the re-creation a user waits for (another Python,
a removed cache entry, a new torch). Prints each time and the ratio.
"""

from __future__ import annotations
from wheelci.compile.hostenv import TorchSpec, create_env
from wheelci.util.invocation import command

import shutil
import tempfile
import time
from pathlib import Path



def run(*, torch: str = "2.14.1", cuda: str = "13.0", repeat: int = 2) -> int:
    """`repeat` rounds of pip and uv each making the environment of PyPI's torch `torch` (CUDA `cuda`)."""

    spec = TorchSpec(torch, cuda, None, True)  # PyPI's own build: both installers name that index
    times: dict[str, list[float]] = {"pip": [], "uv": []}
    with tempfile.TemporaryDirectory(prefix="wheelci-bench-env-") as tmp:
        for round_ in range(repeat):
            for installer in ("pip", "uv") if round_ % 2 == 0 else ("uv", "pip"):
                root = Path(tmp) / f"{installer}-{round_}"
                start = time.monotonic()
                create_env(root, spec, installer=installer)
                times[installer].append(time.monotonic() - start)
                print(f"round {round_ + 1}: {installer} {times[installer][-1]:.1f} s", flush=True)
                shutil.rmtree(root)
    pip, uv = min(times["pip"]), min(times["uv"])
    print(f"torch {torch} (CUDA {cuda}) environment, best of {repeat}: pip {pip:.1f} s, "
          f"uv {uv:.1f} s, uv/pip {uv / pip:.2f} ({pip / uv:.1f}x faster)")
    return 0
