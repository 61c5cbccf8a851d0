"""Stable-ABI builds against classic ones: `python -m ci.bench stable`.

In one run, for the example (CMake) and the stable fixture's classic twin where given: the same op built
classic (`ci.build --cpu`) and stable (`ci.build --cpu --stable-abi 2.10`), each with an empty compiler
cache, so each compile is cold. The compile step's seconds are what the ABI changes (torch's stable
headers are far smaller than ATen's); whole builds are printed beside them (a stable build verifies
under three torch releases, a classic one under one). Then the matrix each mode needs for a span of
torch releases and CUDA majors: a classic wheel per (torch, CUDA major), a stable one per CUDA major.
"""

from __future__ import annotations
from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.config.stable import parse_target
from wheelci.native.stable_abi import target_define
from wheelci.util.invocation import command

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # this repository (the benches measure its example)
TORCH_SPAN = ("2.11", "2.12", "2.13", "2.14", "2.15")
CUDA_MAJORS = ("cu12", "cu13")


def build(args: list[str], ccache: Path, out: Path) -> tuple[float, float]:
    """Seconds for the whole ci.build, and for its compile step (from its log line)."""
    env = {**os.environ, "CCACHE_DIR": str(ccache), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "wheelci.build", *args, "--engine", "host", "-w", str(out)],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    total = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"{command('bench')} stable: {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    m = re.search(r"compiled in (\d+) s", r.stderr)
    return total, float(m[1]) if m else float("nan")


def source_seconds(include: Path, source: Path, defines: list[str], repeats: int = 2) -> float:
    """Fastest of `repeats` compiles of one op source to an object file (g++ -O2, C++20, no cache): what
    the headers cost, apart from CMake, linking and the classic C++ runner a whole build also compiles."""
    best = float("inf")
    with tempfile.TemporaryDirectory(prefix="bench-stable-src-") as tmp:
        for _ in range(repeats):
            start = time.monotonic()
            subprocess.run(["g++", "-std=c++20", "-O2", "-fPIC", "-c", *defines, "-I", str(include),
                            "-I", str(include / "torch" / "csrc" / "api" / "include"), str(source),
                            "-o", str(Path(tmp) / "op.o")], check=True, capture_output=True)
            best = min(best, time.monotonic() - start)
    return best


def matrix_sizes(torch: tuple[str, ...] = TORCH_SPAN, majors: tuple[str, ...] = CUDA_MAJORS) -> tuple[int, int]:
    """Wheels per platform and Python-independent build: classic (one per torch release and CUDA
    major) and stable (one per CUDA major, serving every release from its target on)."""
    return len(torch) * len(majors), len(majors)


def run(*, target: str = "2.10", skip_build: bool = False) -> int:
    """Both builds and the op's source alone (unless `skip_build`), then the matrix sizes."""
    if not skip_build:
        print(f"{'example (cpu)':<16} {'compile s':>10} {'whole build s':>14}")
        times = {}
        for mode, extra in (("classic", []), ("stable", ["--stable-abi", target])):
            with tempfile.TemporaryDirectory(prefix="bench-stable-") as tmp:
                total, compile_s = build(["--cpu", *extra], Path(tmp) / "ccache", Path(tmp) / "out")
            times[mode] = compile_s
            print(f"{mode:<16} {compile_s:>10.0f} {total:>14.1f}", flush=True)
        if not shutil.which("ccache"):
            print("(no ccache installed: compiles were cold anyway)")
        print(f"compile step classic / stable: {times['classic'] / max(times['stable'], 1):.1f}x "
              "(both compile the classic C++ runner; CMake and linking included)")

        # the headers of PyPI's torch 2.14.1 (its default build, cu130; the CPU sources need no CUDA)
        include = ensure_env(TorchSpec("2.14.1", "13.0", None, True)).site / "torch" / "include"

        define = target_define(parse_target(target))
        classic = source_seconds(include, ROOT / "csrc" / "ops.cpp", [])
        stable = source_seconds(include, ROOT / "csrc" / "stable" / "ops.cpp", [define])
        print(f"\nthe op's source alone (torch 2.14.1 headers): classic csrc/ops.cpp {classic:.1f} s, "
              f"stable csrc/stable/ops.cpp {stable:.1f} s: {classic / stable:.1f}x")
    classic, stable = matrix_sizes()
    print(f"\nwheels for torch {TORCH_SPAN[0]}-{TORCH_SPAN[-1]} x {'/'.join(CUDA_MAJORS)}: classic {classic}, "
          f"stable {stable} ({classic / stable:.0f}x fewer); each new torch release: classic {len(CUDA_MAJORS)}, "
          "stable 0")
    return 0
