"""Benchmark an unchanged rebuild through ccache against a cold build: `python -m ci.bench build`.

For each project and variant (the example and the setuptools fixture, CPU and CUDA 13.0 by default), in
one run: `python -m ci.build --engine host` with an empty compiler cache (cold), then the same command
again with that cache (rebuild, nothing changed). Both are whole user-visible builds (compile, repair,
check, verify); the compile step's own seconds are printed beside them, since that is what ccache
changes. Prints seconds and the ratio cold / rebuild.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # this repository (the benches measure its example)
PROJECTS = {"example": ROOT, "tiny_ext": ROOT / "tests" / "fixtures" / "tiny_ext"}
VARIANTS = {"cpu": ["--cpu"], "cu130": ["--cuda", "13.0", "--arch-list", "9.0"]}


def build(project: Path, variant: list[str], ccache: Path, out: Path) -> tuple[float, float]:
    """Seconds for the whole ci.build, and for its compile step (from its log line)."""
    env = {**os.environ, "CCACHE_DIR": str(ccache), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "wheelci.build", str(project), *variant, "--engine", "host",
                        "-w", str(out)], capture_output=True, text=True, env=env, cwd=ROOT)
    total = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"ci.bench build: the build failed:\n{r.stderr[-2000:]}")
    m = re.search(r"compiled in (\d+) s", r.stderr)
    return total, float(m[1]) if m else float("nan")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.bench build", description=__doc__.splitlines()[0])
    p.add_argument("--project", choices=sorted(PROJECTS), action="append", help="default: all")
    p.add_argument("--variant", choices=sorted(VARIANTS), action="append", help="default: all")
    args = p.parse_args(argv)
    if not shutil.which("ccache"):
        print("ci.bench build: ccache is not installed (scripts/bootstrap installs it as root)", file=sys.stderr)
        return 2
    print(f"{'project':<10} {'variant':<7} {'cold s':>8} {'rebuild s':>10} {'ratio':>7}   (compile only: cold / rebuild)")
    for name in args.project or sorted(PROJECTS):
        for variant in args.variant or sorted(VARIANTS):
            with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
                tmp = Path(tmp)
                cold, cold_c = build(PROJECTS[name], VARIANTS[variant], tmp / "ccache", tmp / "a")
                warm, warm_c = build(PROJECTS[name], VARIANTS[variant], tmp / "ccache", tmp / "b")
            print(f"{name:<10} {variant:<7} {cold:>8.1f} {warm:>10.1f} {cold / warm:>6.1f}x   "
                  f"({cold_c:.0f} s / {warm_c:.0f} s)", flush=True)
    return 0
