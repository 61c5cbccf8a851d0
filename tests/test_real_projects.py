"""Real third-party extension projects through `ci.build`, from their sdists on the package index, one
per layout the generic path once failed on; and a project with a git submodule.

- spatial-correlation-sampler 0.5.0: a root-level extension module (`spatial_correlation_sampler_backend`,
  as flash-attn's `flash_attn_2_cuda` or apex's `amp_C`), a setup.py whose pyproject.toml has only
  `[build-system]`, CUDA always (no CPU build), `-fopenmp -lgomp`, `install_requires` torch>=1.1 and
  numpy. No tests in the sdist: `real_projects/check_spatial_correlation.py` checks its kernel.
- torch-linear-assignment 0.0.6: builds its CUDA backend only when `torch.cuda.is_available()` or
  `FORCE_CUDA=1`: the plan sets the switch it reads, so `--cuda` alone makes a CUDA wheel; turned off
  (`--env FORCE_CUDA=0`), the CPU-only wheel is a finding.
- torch-spline-conv 1.2.2, a PyG-family project (as torch-scatter, torch-sparse, torch-cluster): with
  `FORCE_CUDA=1` (read from its setup.py by the plan) each op is two libraries, `_basis_cpu` and
  `_basis_cuda`, that register the same operators; the package loads only the one that fits. Verify loads
  the package as it loads itself and every other library in a process of its own: loading both into one
  process aborts ("Tried to register an operator ... multiple times").

Each sdist is fetched by its pinned sha256 (a different file is refused), cached.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests._wheels import run_stage
from tests import _proc, _sdists

pytestmark = [pytest.mark.slow, pytest.mark.network]

HERE = Path(__file__).resolve().parent
CHECKS = HERE / "real_projects"
TINY = HERE / "fixtures" / "tiny_ext"
LINEAR_ASSIGNMENT = ("--cuda", "13.0", "--arch-list", "9.0")


def sdist(project: str) -> Path:
    """The project's pinned sdist (tests._sdists: fetched by the tool's own requirement fetch, cached)."""
    return _sdists.sdist(project)


def build(tmp: Path, source: Path, *args: str, timeout: float | None = None) -> tuple[subprocess.CompletedProcess, dict, list[Path]]:
    out = tmp / "out"
    r = run_stage("ci.build", source, "--engine", "host", "-w", out, "--work-dir", tmp / "work", *args,
                  **({"timeout": timeout} if timeout else {}))
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
    return r, report, sorted(out.glob("*.whl"))


def test_root_level_cuda_only_module_with_a_pep518_only_pyproject(tmp_path):
    """Built and verified once per key (the sdist, the plan, the compiler, the tool's files that go into
    the wheel: test_real_projects_cpu.py's cache), then its report read back."""
    from tests.test_real_projects_cpu import verified_build

    wheel, report, _ = verified_build("spatial-correlation-sampler", tmp_path, CHECKS / "check_spatial_correlation.py",
                                      ("--cuda", "13.0", "--arch-list", "9.0"))
    assert wheel.name.startswith("spatial_correlation_sampler-0.5.0+pt2.13.0.cu130-cp311-cp311-manylinux_"), wheel.name
    checks = report["verify"]
    assert checks["import spatial_correlation_sampler_backend"] == "ok", checks  # the root-level module
    assert checks["import spatial_correlation_sampler"] == "ok"
    assert checks["test_command"].startswith("ok"), checks
    (built,) = report["wheels"]
    assert "libgomp.so.1" in built["excluded"] and "libcudart.so.13" in built["excluded"], built
    assert "torch==2.13.0" in built["requires"] and "torch>=1.1" not in built["requires"], built["requires"]


def test_cuda_only_when_forced_is_planned_forced_and_a_finding_when_turned_off(tmp_path):
    """torch-linear-assignment asks `torch.cuda.is_available()`, False here, or FORCE_CUDA: the plan reads
    its setup.py and sets FORCE_CUDA=1, so a plain --cuda build makes a CUDA wheel; turned off by the
    user, the CPU-only wheel must not pass as +cu130 (a CPU compile: the CUDA one is the extended test
    below, torch-spline-conv's forced CUDA build keeps that path in CI)."""
    source = sdist("torch-linear-assignment")
    dry = run_stage("ci.build", source, "--engine", "host", *LINEAR_ASSIGNMENT, "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["switches"] == {"FORCE_CUDA": "1"}, dry.stderr[-2000:]
    r, _, wheels = build(tmp_path / "off", source, *LINEAR_ASSIGNMENT, "--env", "FORCE_CUDA=0")
    assert r.returncode == 1 and not wheels, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "no device code" in last and "FORCE_CUDA=1" in last, last


# extended: a second PyG-style CUDA compile (about 12 min of a core cold) of the same kind as
# torch-spline-conv's below, which proves the forced switch builds and verifies in CI's budget
@pytest.mark.extended
def test_cuda_only_when_forced_builds_and_verifies(tmp_path):
    from tests.test_real_projects_cpu import verified_build  # the CUDA build: once per key, as above

    wheel, report, _ = verified_build("torch-linear-assignment", tmp_path / "forced", CHECKS / "check_linear_assignment.py",
                                      LINEAR_ASSIGNMENT)
    assert "+pt2.13.0.cu130-" in wheel.name
    checks = report["verify"]
    assert checks["import torch_linear_assignment"] == "ok" and checks["test_command"].startswith("ok"), checks
    assert "libcudart.so.13" in report["wheels"][0]["excluded"]


@pytest.mark.timeout(3600)  # cold: twelve files, one at a time (use_ninja=False), on a busy 2-core machine
def test_a_pyg_family_cuda_wheel_with_alternative_libraries_verifies(tmp_path):
    """torch-spline-conv's CUDA wheel from its sdist (host engine, one arch): six libraries, each op's CPU
    and CUDA alternatives side by side; verified as its package loads them, then its report read back."""
    from tests.test_real_projects_cpu import verified_build

    args = ("--cuda", "13.0", "--arch-list", "9.0")
    dry = run_stage("ci.build", sdist("torch-spline-conv"), "--engine", "host", *args, "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["switches"] == {"FORCE_CUDA": "1"}, dry.stderr[-2000:]
    wheel, report, built = verified_build("torch-spline-conv", tmp_path, CHECKS / "check_spline_conv.py", args,
                                          timeout=3300)
    print(f"torch-spline-conv: {'built and cached' if built else 'reused the cached'} {wheel.name}, "
          f"build {report.get('build_seconds')} s")
    assert wheel.name.startswith("torch_spline_conv-1.2.2+pt2.13.0.cu130-cp311-cp311-manylinux_"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        libraries = sorted(n.rsplit("/", 1)[-1].split(".")[0] for n in z.namelist() if n.endswith(".so"))
    assert libraries == sorted(f"_{op}_{kind}" for op in ("basis", "version", "weighting") for kind in ("cpu", "cuda"))
    checks = report["verify"]
    assert checks["import torch_spline_conv"] == "ok" and checks["test_command"].startswith("ok"), checks
    # each library the package did not load was loaded in a process of its own, and loads
    alone = {k: v for k, v in checks.items() if k.startswith("load ")}
    assert alone and all(v == "ok" for v in alone.values()), checks
    assert "libcudart.so.13" in report["wheels"][0]["excluded"]


def _git(*args: str, cwd: Path) -> None:
    _proc.run(["git", "-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t", *args],
              cwd=cwd, check=True, capture_output=True)


# extended: about 9 min of compile on two cores cold (540 s in a fresh CI run), whenever its cache key changes;
# in CI's budget the narrowing is proven on real nvcc calls (tests/test_nvcc_targets.py: cpp_extension's and
# CMake's), the requirement fetch by tests/test_fetch.py, and causal-conv1d's plan by tests/test_corpus.py
@pytest.mark.extended
def test_causal_conv1d_from_its_requirement_holds_only_the_asked_target(tmp_path):
    """`wheelci build causal-conv1d==1.7.0 --cuda 13.0 --arch-list 9.0`: the sdist fetched by its requirement,
    its nine hard-coded -gencode targets replaced by the one asked (resources/nvcc_targets.py), verified.
    About 9 minutes of compile on two cores (nine targets: estimated 40); cached by the sdist, the plan and
    the tool's files that reach the wheel or the device targets (test_real_projects_cpu.build_key)."""
    from tests.test_real_projects_cpu import build_key, cache_dir_for, cached_report, cached_wheel, store

    args = ("--cuda", "13.0", "--arch-list", "9.0")
    key = {**build_key(sdist("causal-conv1d"), args), "narrowing": _narrowing_digest()}
    entry = cache_dir_for("causal-conv1d-requirement", key)
    wheel = cached_wheel(entry, key)
    if wheel is None:
        out = tmp_path / "out"
        r = run_stage("ci.build", "causal-conv1d==1.7.0", *args, "--engine", "host", "-w", out, timeout=3600)
        assert r.returncode == 0, r.stderr[-3000:]
        (built,) = out.glob("*.whl")
        store(entry, built, key, json.loads((out / "report.json").read_text()))
        wheel = cached_wheel(entry, key)
        assert wheel is not None
    report = cached_report(entry)
    assert report["plan"]["fetched"]["sha256"] == _sdists.PINNED["causal-conv1d==1.7.0"]
    assert report["plan"]["narrowed"] is True
    (lib,) = report["wheels"][0]["device_code"].values()
    assert lib == ["sm_90"], report["wheels"][0]["device_code"]  # not the nine the project names
    assert report["passed"] and wheel.name.startswith("causal_conv1d-1.7.0+pt2.13.0.cu130-cp311-cp311-manylinux")


def _narrowing_digest() -> str:
    """The files that decide the device targets of a narrowed build."""
    import hashlib

    import wheelci

    root = Path(wheelci.__file__).resolve().parent
    h = hashlib.sha256()
    for rel in ("resources/nvcc_targets.py", "compile/launch.py"):
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def test_a_project_whose_sources_include_a_git_submodule(tmp_path):
    """tiny_ext with the addend in a cutlass-style submodule (`third_party/addend/addend.h`, included by
    the C++ source): it compiles only when the submodule's files are staged, and the wheel's own tests
    check the value it came with."""
    sub = tmp_path / "addend"
    sub.mkdir()
    (sub / "addend.h").write_text("#define TINY_ADDEND 1\n")
    _git("init", "-q", cwd=sub)
    _git("add", ".", cwd=sub)
    _git("commit", "-qm", "addend", cwd=sub)
    project = tmp_path / "tiny_ext"
    shutil.copytree(TINY, project, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    cpp = project / "csrc" / "tiny.cpp"
    cpp.write_text(cpp.read_text().replace("#include <torch/extension.h>", '#include <torch/extension.h>\n#include "addend.h"')
                   .replace("return x + 1;", "return x + TINY_ADDEND;"))
    setup = project / "setup.py"
    # absolute, as cpp_extension's ninja build resolves include directories from its own build directory
    setup.write_text(setup.read_text().replace('CppExtension("tiny_ext._C", ["csrc/tiny.cpp"])', (
        'CppExtension("tiny_ext._C", ["csrc/tiny.cpp"], '
        'include_dirs=[__import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), '
        '"third_party", "addend")])')))
    assert "TINY_ADDEND" in cpp.read_text() and '"third_party", "addend"' in setup.read_text()
    _git("init", "-q", cwd=project)
    _git("add", ".", cwd=project)
    _git("submodule", "add", "-q", str(sub), "third_party/addend", cwd=project)
    _git("commit", "-qm", "project", cwd=project)
    r, report, wheels = build(tmp_path, project, "--cpu")
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(wheels) == 1 and report["verify"]["test test_tiny::test_add_one_cpu"] == "ok", report["verify"]
