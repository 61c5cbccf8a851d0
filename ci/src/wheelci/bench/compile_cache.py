"""Benchmark the remote compile cache and the developer's loop: `python -m ci.bench compile-cache`.

The example (or the setuptools fixture), each build a "machine" of its own: its own HOME, ccache and
output, the project checked out and built at the one path every machine uses (a CI runner's workspace is
the same path on every runner, and sccache's hits need it: docs/building.md), the previous machine's tree
gone first. The store is a Redis started on loopback (Debian's redis-server). Compile-only builds
(`wheelci build --engine host --compile-only`):

- cold: no cache at all (ccache off), twice, the faster one kept (the first of a run also reads torch's
  headers from the disk, which every later build finds in memory);
- first machine: the store empty, sccache filling it;
- second machine: the store warm, every compile a hit;
- fan-out: a fresh store warmed by two compile-only jobs of half the arch list each (`--warm-for` the
  whole list, as the workflow's arch-jobs run them), then the full list.

Then the developer's loop, whole builds (compile, repair, check, verify) on one machine with ccache: the
first build, then one C++ source changed by a line and built again into a verified wheel.

Prints each compile step's seconds, its ratio to cold, and what sccache counted (device and host hits).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wheelci.bench.build import copy_project
from wheelci.config import matrix
from wheelci.util.cache import cache_dir
from wheelci.util.invocation import command
from wheelci.workflowmatrix import arch_parts

ROOT = Path(__file__).resolve().parents[4]
# each project, and the source the loop's one-line change goes to
PROJECTS = {"example": (ROOT, "csrc/ops.cpp"), "tiny_ext": (ROOT / "tests" / "fixtures" / "tiny_ext", "csrc/tiny.cpp")}
CHANGE = "\nint wheelci_bench_one_line_change() { return 1; }\n"
# the example's own files (what its build and its tests read), not this repository's tooling
EXAMPLE = ("CMakeLists.txt", "pyproject.toml", "README.md", "csrc", "src", "example_tests")


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
                self.close()
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
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Machines:
    """Builds on fresh machines that share one checkout path and work directory (and nothing else)."""

    def __init__(self, tmp: Path, project: Path) -> None:
        self.tmp, self.project = tmp, project
        self.checkout = tmp / "runner" / "checkout" / project.name
        self.work = tmp / "runner" / "work"

    def build(self, name: str, args: list[str], cache: str | None, *, compile_only: bool = True,
              ccache: bool = False, fresh_tree: bool = True) -> tuple[float, float, dict[str, Any]]:
        """One build: its wall seconds, its compile step's seconds, and its report.json."""

        own = self.tmp / name
        if fresh_tree:  # the last machine's checkout and tree are gone: only the store carries over
            shutil.rmtree(self.tmp / "runner", ignore_errors=True)
            if self.project == ROOT:
                for entry in EXAMPLE:
                    copy = shutil.copytree if (ROOT / entry).is_dir() else shutil.copy2
                    self.checkout.mkdir(parents=True, exist_ok=True)
                    copy(ROOT / entry, self.checkout / entry)
            else:
                copy_project(self.project, self.checkout)
        (own / "home").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HOME": str(own / "home"), "CCACHE_DIR": str(own / "ccache"),
               "WHEELCI_CACHE_DIR": str(cache_dir()), "WHEELCI_CACHE_MAX_SIZE": "none",
               "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        env.pop("WHEELCI_COMPILE_CACHE", None)
        if cache is not None:
            env["WHEELCI_COMPILE_CACHE"] = cache
        elif not ccache:
            env["CCACHE_DISABLE"] = "1"
        out = own / "out"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "wheelci.build", str(self.checkout), *args, "--engine", "host",
               "-w", str(out), "--work-dir", str(self.work), *(["--compile-only"] if compile_only else [])]
        start = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        wall = time.monotonic() - start
        if r.returncode != 0:
            raise SystemExit(f"{command('bench')} compile-cache: the {name} build failed:\n{r.stderr[-2000:]}")
        report = json.loads((out / "report.json").read_text())
        step = {s["name"]: s.get("seconds") or 0.0 for s in report.get("steps", [])}
        return wall, float(step.get("compile", 0.0)), report


def halves(arch_list: str) -> list[str]:
    return arch_parts(arch_list, 2)


def _counts(report: dict[str, Any]) -> tuple[str, str]:
    c = report.get("compile_cache") or {}
    if not c.get("used"):
        return "-", "-"
    dev, host = c.get("device") or {}, c.get("host") or {}
    return f"{dev.get('hits', 0)}/{dev.get('misses', 0)}", f"{host.get('hits', 0)}/{host.get('misses', 0)}"


def run(*, project: str = "example", cuda: str = "13.0", arch_list: str | None = None) -> int:
    """The project's compile step cold, on a first and a second machine, and after a fan-out; then the
    developer's loop."""

    arch_list = arch_list or matrix.load().row(cuda).arch_list
    base = ["--cuda", cuda, "--arch-list", arch_list]
    source, changed = PROJECTS[project]
    rows: list[tuple[str, float, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-cache-") as tmp_name:
        machines = Machines(Path(tmp_name), source)
        colds = [machines.build("cold", base, None) for _ in range(2)]
        _, seconds, report = min(colds, key=lambda c: c[1])
        rows.append((f"cold (best of {' s, '.join(f'{c[1]:.1f}' for c in colds)} s)", seconds, report))
        store = Store(Path(tmp_name) / "redis")
        try:
            for name in ("first machine", "second machine"):
                _, seconds, report = machines.build(name.split()[0], base, store.url)
                rows.append((name, seconds, report))
        finally:
            store.close()
        fan = Store(Path(tmp_name) / "redis-fanout")
        try:
            for i, part in enumerate(halves(arch_list)):
                part_args = ["--cuda", cuda, "--arch-list", part, "--warm-for", arch_list]
                _, seconds, report = machines.build(f"part{i}", part_args, fan.url)
                rows.append((f"fan-out job {i + 1} ({part})", seconds, report))
            _, seconds, report = machines.build("full", base, fan.url)
            rows.append(("full list after fan-out", seconds, report))
        finally:
            fan.close()
        # the developer's loop: a whole build, then one source changed by a line, in the same tree
        first, _, _ = machines.build("dev", base, None, compile_only=False, ccache=True)
        with (machines.checkout / changed).open("a") as f:
            f.write(CHANGE)
        again, _, report = machines.build("dev", base, None, compile_only=False, ccache=True, fresh_tree=False)
        verified = report.get("passed") is True
    cold = rows[0][1] or 1.0
    print(f"{project}, CUDA {cuda}, arch list {arch_list}: compile step (--compile-only)")
    print(f"{'build':<36} {'compile s':>9} {'of cold':>8} {'device hits/misses':>19} {'host hits/misses':>17}")
    for name, seconds, report in rows:
        device, host = _counts(report)
        print(f"{name:<36} {seconds:>9.1f} {seconds / cold:>7.0%} {device:>19} {host:>17}", flush=True)
    print("\nthe developer's loop, whole builds to a verified wheel (ccache, the tree kept):")
    print(f"{'first build':<36} {first:>9.1f} {'100%':>8}")
    print(f"{'one C++ file changed (' + changed + ')':<36} {again:>9.1f} {again / first:>7.0%}"
          f"{'' if verified else '  (verify did not pass)'}", flush=True)
    return 0
