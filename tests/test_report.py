"""report.md is for people: small whatever the build read, no Python reprs, real times on failure; what is
long stays whole in report.json. Fed through the real step driver, so the outputs are what a build records.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wheelci import report
from wheelci.compile.hostenv import BuildEnv
from wheelci.errors import Finding
from wheelci.steps import Step, run_steps

MD_BOUND = 16 * 1024
REPR = re.compile(r"\b[A-Z]\w*\(\w+=|PosixPath\(|\{'|\['")
PLAN = {"project": "tiny-ext", "project_dir": "/src/tiny", "cuda": "13.0", "torch": "2.15.0", "engine": "host",
        "arch_list": "8.0;9.0", "python": ["3.12"], "stable": None, "variants": False,
        "cpu_view": {"cmake_defines": ["X=ON"]}, "environment": {"CIBW_ARCHS_LINUX": "x86_64"}}


@dataclass
class State:
    root: Path
    env: BuildEnv | None = None
    compiled: list[Path] = field(default_factory=list)
    deps: list[Path] = field(default_factory=list)


def _env(s: State) -> None:
    s.env = BuildEnv(s.root / "envs" / "torch-2.15.0-cu132-py312", s.root / "bin" / "python", s.root / "site",
                     "2.15.0+cu132", "13.2", ["nvidia-cublas==13.1.0.3"])


def _compile(s: State) -> None:
    s.compiled = [s.root / "tiny_ext-0.1.0-cp312-cp312-linux_x86_64.whl"]
    include = s.root / "site" / "torch" / "include"
    s.deps = [include / f"ATen/ops/op_{i:04d}_native.h" for i in range(5200)]  # what torch 2.15's headers come to


def _fail(s: State) -> None:
    raise Finding("compile failed (exit 1): tiny.cpp:2: error: expected ';' (full log: /w/compile.log)")


def recorded(tmp_path: Path, *steps: Step) -> report.BuildReport:
    r = report.BuildReport(plan=PLAN, work_dir=str(tmp_path / "work"))
    try:
        run_steps(steps, State(tmp_path), lambda o: r.steps.append(asdict(o)))
    except Finding:
        r.failed_step, r.passed = r.steps[-1]["name"], False
    return r


def test_a_build_that_read_thousands_of_headers_has_a_small_report(tmp_path):
    """The compile row listed every header it read (~5,000 names, 120 KB) and the env row was a repr."""
    r = recorded(tmp_path, Step("env", _env, writes=("env",)), Step("compile", _compile, writes=("compiled", "deps")))
    r.wheels = [report.WheelReport("tiny_ext-0.1.0+pt2.15.0.cu132-cp312-cp312-manylinux_2_28_x86_64.whl", "cp312",
                                   123456, {f"tiny_ext/_C{i}.so": ["libc10.so", "libtorch_cuda.so"] for i in range(30)},
                                   ["libc10.so"], ["torch==2.15.0"])]
    r.verify = {"install": "ok", **{f"test test_tiny::test_case[{i}]": "ok" for i in range(400)},
                "test test_tiny::test_bad": "FAILED: AssertionError: 1 | 2 != 3"}
    json_path, md_path = report.write(r, tmp_path / "out")
    md = md_path.read_text()
    assert len(md.encode()) <= MD_BOUND, len(md.encode())
    assert not REPR.search(md), REPR.search(md)
    assert "torch 2.15.0+cu132 in " in md  # the environment as a person reads it
    assert "5,198 more (report.json)" in md and "| 362 more checks | in report.json |" in md
    assert "test_bad | FAILED: AssertionError: 1 \\| 2 != 3 |" in md  # a failure is always shown, one cell
    assert "22 more libraries" in md
    assert f"Wheels and this report in `{tmp_path / 'out'}`" in md
    assert ("To build it again: `python -m ci.build /src/tiny --cuda 13.0 --torch 2.15.0 --engine host "
            f"--arch-list \"8.0;9.0\" -w {tmp_path / 'out'}`") in md
    data = json.loads(json_path.read_text())
    (compile_step,) = [s for s in data["steps"] if s["name"] == "compile"]
    assert len(compile_step["outputs"]) == 5201 and len(data["verify"]) == 402  # everything, for machines


def test_a_failed_build_reports_its_real_times(tmp_path):
    """It said "Build 0 s": the compile time was set only when the compile succeeded."""
    r = recorded(tmp_path, Step("env", _env, writes=("env",)), Step("compile", _fail))
    r.steps[-1]["seconds"] = 95.3  # the driver's own timing of a long compile
    md = report.to_markdown(r)
    assert "Build 0 s" not in md and "compile 95 s" in md
    assert "**Stopped at step compile** (failed after 95 s;" in md and "expected ';'" in md


def test_a_gpu_less_verify_says_what_did_not_run(tmp_path):
    r = recorded(tmp_path, Step("verify", lambda s: None))
    r.verify = {"install": "ok", "gpu": "skipped: no GPU: CUDA tests skipped, kernels not run"}
    assert "Verify **passed (no GPU: CUDA tests skipped, kernels not run)**" in report.to_markdown(r)
    r.verify["gpu"] = "ok (NVIDIA H100 80GB HBM3)"
    assert "Verify **passed**;" in report.to_markdown(r)


def test_report_md_stays_bounded_whatever_the_report_holds():
    """Hundreds of failed tests, long notes, many wheels and libraries: report.md stays within its bound,
    failures first, and says that the rest is in report.json."""
    from wheelci import report

    r = report.BuildReport(plan={"project": "p", "torch": "2.13.0", "engine": "host", "cuda": None})
    r.verify = {f"test t::case_{i}": f"FAILED: {'x' * 300}" for i in range(300)}
    r.verify["import p"] = "ok"
    r.notes = ["n" * 900 for _ in range(40)]
    r.wheels = [report.WheelReport(f"p_{i}-1.0-py3-none-any.whl", "py3-none-any", 10, {f"lib{i}_{j}.so": ["libc.so.6"] * 50
                                   for j in range(8)}, [], [], "companion") for i in range(30)]
    text = report.to_markdown(r)
    assert len(text.encode()) <= report.MAX_BYTES
    assert "test t::case_0" in text and "report.json" in text
    assert "To build it again" in text  # the command survives the cut


def test_a_fifo_or_link_in_place_of_the_report_is_no_report_and_never_blocks(tmp_path):
    import os

    import pytest

    from wheelci import report
    from wheelci.errors import CiError

    os.mkfifo(tmp_path / "report.json")  # read as a file, it would block until a writer came
    with pytest.raises(CiError, match="which no wheelci build wrote"):
        report.refuse_foreign_reports(tmp_path)
    (tmp_path / "report.json").unlink()
    (tmp_path / "elsewhere.json").write_text('{"wheels": [{"name": "x-1.0-py3-none-any.whl"}]}')
    (tmp_path / "report.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(CiError, match="which no wheelci build wrote"):
        report.refuse_foreign_reports(tmp_path)
