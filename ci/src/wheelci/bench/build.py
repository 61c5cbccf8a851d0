"""Benchmark rebuilds against a cold build: `python -m ci.bench build`.

For each project and variant (the example and the setuptools fixture, CPU and CUDA 13.0 by default), in
one run and on a copy of the project, four whole `wheelci build --engine host` runs (compile, repair,
check, verify):

- cold: `--fresh` with an empty compiler cache;
- ccache: `--fresh` again, the compiler cache warm (what a CI runner without the build tree gets;
  left out where ccache is not installed);
- rerun: nothing changed, the build tree and step records kept (what a developer's second build gets);
- one file: one C++ source changed by a line, then built incrementally.

Prints each time, its compile step's seconds, and its ratio to the cold build.
"""

from __future__ import annotations
from wheelci.compile.workdir import project_files
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
# each project, and the source a one-line change goes to
PROJECTS = {"example": (ROOT, "csrc/ops.cpp"), "tiny_ext": (ROOT / "tests" / "fixtures" / "tiny_ext", "csrc/tiny.cpp")}
VARIANTS = {"cpu": ["--cpu"], "cu130": ["--cuda", "13.0", "--arch-list", "9.0"]}
CHANGE = "\nint wheelci_bench_one_line_change() { return 1; }\n"


def build(project: Path, variant: list[str], ccache: Path, out: Path, *flags: str) -> tuple[float, float]:
    """Seconds for the whole build, and for its compile step (0 when reused; from its log line)."""
    env = {**os.environ, "CCACHE_DIR": str(ccache), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "wheelci.build", str(project), *variant, "--engine", "host",
                        "-w", str(out), *flags], capture_output=True, text=True, env=env, cwd=ROOT)
    total = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"{command('bench')} build: the build failed:\n{r.stderr[-2000:]}")
    m = re.search(r"compiled in (\d+) s", r.stderr)
    return total, float(m[1]) if m else 0.0


def copy_project(src: Path, dest: Path) -> Path:
    """The project's own files (as a build sees them), so the one-line change never touches the checkout."""

    for rel in project_files(src):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)
    return dest


def measure(name: str, variant: str) -> list[tuple[str, float, float]]:
    import json

    source, changed = PROJECTS[name]
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp_name:
        tmp = Path(tmp_name)
        project, ccache, args = copy_project(source, tmp / name), tmp / "ccache", VARIANTS[variant]
        rows = [("cold", *build(project, args, ccache, tmp / "a", "--fresh"))]
        if shutil.which("ccache"):
            rows.append(("ccache", *build(project, args, ccache, tmp / "b", "--fresh")))
        rows.append(("rerun", *build(project, args, ccache, tmp / "c")))
        with (project / changed).open("a") as f:
            f.write(CHANGE)
        rows.append(("one file", *build(project, args, ccache, tmp / "d")))
        # the kept build tree goes with the project copy
        shutil.rmtree(json.loads((tmp / "d" / "report.json").read_text())["work_dir"], ignore_errors=True)
    return rows


def run(*, projects: list[str] | None = None, variants: list[str] | None = None) -> int:
    """Each project and variant given (default: all), one after the other."""
    if not shutil.which("ccache"):
        print(f"{command('bench')} build: no ccache here (scripts/bootstrap installs it as root): no ccache row",
              file=sys.stderr)
    print(f"{'project':<10} {'variant':<7} {'build':<9} {'seconds':>8} {'compile s':>10} {'of cold':>8}")
    for name in projects or sorted(PROJECTS):
        for variant in variants or sorted(VARIANTS):
            rows = measure(name, variant)
            cold = rows[0][1]
            for kind, total, compiled in rows:
                print(f"{name:<10} {variant:<7} {kind:<9} {total:>8.1f} {compiled:>10.0f} {total / cold:>7.0%}",
                      flush=True)
    return 0
