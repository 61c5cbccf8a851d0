"""Benchmark the remote compile cache: `python -m ci.bench compile-cache`.

The example (or the setuptools fixture) built with `wheelci build --engine host --compile-only`, each build
a "machine" of its own (its own copy of the project, HOME, ccache and build tree), against a Redis started on
loopback (Debian's redis-server):

- cold: no cache at all (ccache off);
- first machine: the store empty, sccache filling it;
- second machine: the store warm, every compile a hit;
- fan-out: a fresh store warmed by two compile-only jobs of half the arch list each, then the full list.

Prints each compile step's seconds, its ratio to cold, and what sccache counted (device and host hits).
"""

from __future__ import annotations
from wheelci.util.invocation import command

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
PROJECTS = {"example": ROOT, "tiny_ext": ROOT / "tests" / "fixtures" / "tiny_ext"}


class Store:
    """A Redis on a free loopback port, nothing saved."""

    def __init__(self, work: Path) -> None:
        binary = shutil.which("redis-server", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")
        if binary is None:
            raise SystemExit(f"{command('bench')} compile-cache: needs redis-server (scripts/bootstrap installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        work.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self._listens():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"{command('bench')} compile-cache: redis-server did not start")
            time.sleep(0.1)

    def _listens(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def build(project: Path, tmp: Path, name: str, args: list[str], cache: str | None) -> tuple[float, dict]:
    """One machine's compile-only build: its compile step's seconds and what the cache did."""
    from wheelci.bench.build import copy_project
    from wheelci.util.cache import cache_dir

    root = tmp / name
    (root / "home").mkdir(parents=True)
    copy = copy_project(project, root / "project")
    env = {**os.environ, "HOME": str(root / "home"), "CCACHE_DIR": str(root / "ccache"),
           "WHEELCI_CACHE_DIR": str(cache_dir()), "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "WHEELCI_COMPILE_CACHE": cache or ""}
    if cache is None:
        env["CCACHE_DISABLE"] = "1"
    r = subprocess.run([sys.executable, "-m", "wheelci.build", str(copy), *args, "--engine", "host", "--compile-only",
                        "-w", str(root / "out"), "--work-dir", str(root / "work")], capture_output=True, text=True,
                       env=env, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"{command('bench')} compile-cache: the {name} build failed:\n{r.stderr[-2000:]}")
    m = re.search(r"compiled in (\d+) s", r.stderr)
    report = json.loads((root / "out" / "report.json").read_text())
    return float(m[1]) if m else report["build_seconds"], report.get("compile_cache") or {}


def halves(arch_list: str) -> list[str]:
    from wheelci.workflowmatrix import arch_parts

    return arch_parts(arch_list, 2)


def run(*, project: str = "example", cuda: str = "13.0", arch_list: str | None = None) -> int:
    """The project's compile step cold, on a first and a second machine, and after a fan-out."""
    from wheelci.config import matrix

    arch_list = arch_list or matrix.load().row(cuda).arch_list
    base = ["--cuda", cuda, "--arch-list", arch_list]
    rows: list[tuple[str, float, dict]] = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as tmp_name:
        tmp, project_dir = Path(tmp_name), PROJECTS[project]
        rows.append(("cold", *build(project_dir, tmp, "cold", base, None)))
        store = Store(tmp / "redis")
        try:
            rows.append(("first machine", *build(project_dir, tmp, "first", base, store.url)))
            rows.append(("second machine", *build(project_dir, tmp, "second", base, store.url)))
        finally:
            store.close()
        fan = Store(tmp / "redis-fanout")
        try:
            for i, part in enumerate(halves(arch_list)):
                rows.append((f"fan-out job {i + 1} ({part})", *build(project_dir, tmp, f"part{i}",
                             ["--cuda", cuda, "--arch-list", part], fan.url)))
            rows.append(("full list after fan-out", *build(project_dir, tmp, "full", base, fan.url)))
        finally:
            fan.close()
    cold = rows[0][1] or 1.0
    print(f"{project}, CUDA {cuda}, arch list {arch_list}: compile step (--compile-only)")
    print(f"{'build':<36} {'compile s':>9} {'of cold':>8} {'device hits/misses':>19} {'host hits/misses':>17}")
    for name, seconds, c in rows:
        dev, host = c.get("device") or {}, c.get("host") or {}
        counts = (f"{dev.get('hits', 0)}/{dev.get('misses', 0)}", f"{host.get('hits', 0)}/{host.get('misses', 0)}") \
            if c.get("used") else ("-", "-")
        print(f"{name:<36} {seconds:>9.0f} {seconds / cold:>7.0%} {counts[0]:>19} {counts[1]:>17}", flush=True)
    return 0
