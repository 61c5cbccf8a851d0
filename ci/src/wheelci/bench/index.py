"""Benchmark ci.index against simple503 and dir2pi: `python -m ci.bench index`.

Inputs (real wheels, cached under ~/.cache/cuda-wheel-ci/): the torch 2.13.0 CPU wheel (`pip download
--no-deps`, which pip's config may serve from a local file), a few nvidia-* CUDA wheels and some small
pure-python ones (taken from ~/.cache/cuda-wheel-ci/wheelhouse when there, else `pip download
--isolated --no-deps`). Or `--wheels DIR` to index your own.

Each tool gets its own temp directory holding hard links (copies across filesystems) of the same files,
is run as a subprocess the way a user runs it (interpreter start-up included), once on the fresh
directory and once more on the unchanged result. The files are read once beforehand so every tool
meets a warm page cache. Reported: median seconds over --repeat rounds and the ratios.

- ci.index: hashes, PEP 658 metadata files, data-requires-python, PEP 691 JSON, incremental cache.
- simple503 -S -e (in place, metadata on): hashes, metadata files, no JSON, rehashes every run.
- dir2pi: no hashes, no metadata; symlinks only.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from wheelci.index import build_index
from wheelci.util.cache import cache_dir
from wheelci.util.invocation import command

CACHE = cache_dir()
TORCH = "torch==2.13.0"
# Real third-party wheels of the kinds an internal CUDA index holds: CUDA runtime pieces and small deps.
NVIDIA = ("nvidia-cuda-runtime==13.0.96", "nvidia-nvtx==13.0.85", "nvidia-cuda-cupti==13.0.85",
          "nvidia-cuda-nvrtc==13.0.88", "nvidia-curand==10.4.0.35")
SMALL = ("jinja2==3.1.6", "filelock==4.2.11", "mpmath==1.3.0", "typing-extensions==4.16.0",
         "networkx==3.6.1", "sympy==1.14.0", "fsspec==2026.9.0")
BIN = Path(sys.executable).parent


def _escaped(req: str) -> tuple[str, str]:
    name, _, version = req.partition("==")
    return name.replace("-", "_").lower(), version


def fetch(req: str, isolated: bool = True) -> Path:
    """A wheel for req: from the shared wheelhouse or our cache, else pip download into the cache."""
    name, version = _escaped(req)
    # Not isolated means "what pip's config gives", here the CPU build: never take a CUDA build for it.
    prefix = f"{name}-{version}-" if isolated else f"{name}-{version}+cpu-"
    for d in (CACHE / "wheelhouse", CACHE / "bench", CACHE / "bench-index"):
        for p in sorted(d.glob("*.whl")) if d.is_dir() else ():
            if p.name.lower().startswith(prefix):
                return p
    dest = CACHE / "bench-index"
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", req, "-d", str(dest)]
    if isolated:
        cmd.insert(4, "--isolated")
    subprocess.run(cmd, check=True)
    found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{name}-{version}"))
    if not found:
        raise SystemExit(f"bench index: pip download {req} gave no wheel in {dest}")
    return found[0]


def inputs(wheels: str | None, *, no_torch: bool = False) -> list[Path]:
    if wheels:
        files = sorted(p for p in Path(wheels).iterdir() if p.name.endswith((".whl", ".tar.gz")))
        if not files:
            raise SystemExit(f"bench index: no wheels in {wheels}")
        return files
    files = [fetch(TORCH, isolated=False)] if not no_torch else []
    return files + [fetch(r) for r in NVIDIA + SMALL]


def stage(files: list[Path], d: Path) -> Path:
    d.mkdir(parents=True)
    for f in files:
        try:
            os.link(f, d / f.name)
        except OSError:
            shutil.copy2(f, d / f.name)
    return d


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    elapsed = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return elapsed


OURS = "wheelci"  # `wheelci index`, by the tool's name: the same rows however the bench was run
TOOLS: dict[str, Callable[[Path], list[str]]] = {
    OURS: lambda d: [sys.executable, "-m", "wheelci.index", str(d)],
    "simple503": lambda d: [str(BIN / "simple503"), "-S", "-e", str(d)],
    "dir2pi": lambda d: [str(BIN / "dir2pi"), str(d)],
}
FEATURES = {
    OURS: "sha256, PEP 658 metadata, requires-python, PEP 691 JSON, incremental",
    "simple503": "sha256, PEP 658 metadata (data-dist-info-metadata only), requires-python",
    "dir2pi": "links only (no hashes, no metadata), single-quoted hrefs",
}


def run(*, wheels: str | None = None, repeat: int = 3, no_torch: bool = False) -> int:
    """Each tool's first run and re-run over the wheels in `wheels` (default: torch, unless `no_torch`,
    and a set from PyPI), the median of `repeat` rounds."""

    files = inputs(wheels, no_torch=no_torch)
    total = sum(f.stat().st_size for f in files)
    print(f"{len(files)} wheels, {total / 2**20:.0f} MiB: "
          + ", ".join(f.name.split("-")[0] for f in files))
    for f in files:  # warm the page cache for everyone
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass

    times: dict[str, dict[str, list[float]]] = {t: {"first": [], "rerun": []} for t in TOOLS}
    broken: dict[str, str] = {}
    inproc: dict[str, list[float]] = {"first": [], "rerun": []}
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        for rnd in range(repeat):
            for tool, cmd in TOOLS.items():
                if tool in broken:
                    continue
                d = stage(files, Path(tmp) / f"{tool}-{rnd}")
                try:
                    times[tool]["first"].append(timed(cmd(d)))
                    times[tool]["rerun"].append(timed(cmd(d)))
                except RuntimeError as e:
                    broken[tool] = str(e)
                shutil.rmtree(d)
            # The same work without interpreter start-up: what the cache saves, per run.
            d = stage(files, Path(tmp) / f"inproc-{rnd}")
            for key in ("first", "rerun"):
                start = time.perf_counter()
                build_index(d)
                inproc[key].append(time.perf_counter() - start)
            shutil.rmtree(d)

    med = {t: {k: statistics.median(v) for k, v in times[t].items() if v} for t in TOOLS if t not in broken}
    print(f"\n{'tool':<10} {'first s':>8} {'re-run s':>9}  features")
    for t in TOOLS:
        if t in broken:
            print(f"{t:<10} {'-':>8} {'-':>9}  did not run: {broken[t]}")
        else:
            print(f"{t:<10} {med[t]['first']:>8.3f} {med[t]['rerun']:>9.3f}  {FEATURES[t]}")
    ip = {k: statistics.median(v) for k, v in inproc.items()}
    print(f"{'(in-proc)':<10} {ip['first']:>8.3f} {ip['rerun']:>9.4f}  {OURS}'s build_index() alone, "
          "no interpreter start-up")
    ours = med[OURS]
    print(f"\n{OURS} re-run vs its first run: {ours['first'] / ours['rerun']:.1f}x faster as a command, "
          f"{ip['first'] / ip['rerun']:.0f}x in-process (target 20x)")
    for base in ("simple503", "dir2pi"):
        if base in med:
            print(f"{base} / {OURS}, first run: {med[base]['first'] / ours['first']:.2f}x   "
                  f"re-run: {med[base]['rerun'] / ours['rerun']:.1f}x")
    print(f"(median of {repeat}; ratio > 1 means {OURS} is faster)")
    return 0

