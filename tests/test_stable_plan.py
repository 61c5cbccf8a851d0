"""Stable-ABI plans: one wheel per variant, built with the major's lowest CUDA against its newest torch,
TORCH_TARGET_VERSION reaching every compiler (as cibuildwheel itself reads the environment), the repair
requiring torch>= and the CUDA runtime and cuDNN of the major, and the torch range shown by --dry-run."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from wheelci import plan as pl
from wheelci.config import matrix as mx
from wheelci.config.stable import plan_stable, requirements
from wheelci.errors import CiError
from tests._wheels import run_stage
from tests.test_settings import project_with

ROOT = Path(__file__).resolve().parent.parent
TARGET = "-DTORCH_TARGET_VERSION=0x020a000000000000"


def test_a_cuda_major_builds_with_its_lowest_cuda_against_its_newest_torch():
    plan = pl.make_plan(pl.Request(cuda="13", engine="docker", stable_abi="2.10"), project_dir=ROOT)
    assert (plan.cuda, plan.torch, plan.stable.variant) == ("13.0", "2.14.1", "cu13")
    assert plan.torch_requirement == "torch>=2.10"
    # compiled against the oldest cuDNN any torch of the range pins (9.y runs code built for 9.z <= y)
    assert plan.cudnn_requirement == "nvidia-cudnn-cu13==9.19.0.56"
    assert "nvidia-cudnn-cu13==9.19.0.56" in plan.environment["CIBW_BEFORE_BUILD_LINUX"]
    # the range's oldest, a middle and its newest, on whichever CUDA 13 each is built (2.15.0: 13.2)
    assert plan.stable.verify == (("2.11.0", "13.0"), ("2.14.1", "13.0"), ("2.15.0", "13.2"))
    cu12 = pl.make_plan(pl.Request(cuda="12", engine="docker", stable_abi="2.10"), project_dir=ROOT)
    assert (cu12.cuda, cu12.torch, cu12.stable.variant) == ("12.6", "2.10.0", "cu12")


def test_the_flags_reach_the_container_as_cibuildwheel_reads_them():
    from cibuildwheel.environment import parse_environment

    plan = pl.make_plan(pl.Request(cuda="13", engine="docker", stable_abi="2.10"), project_dir=ROOT)
    env = parse_environment(plan.environment["CIBW_ENVIRONMENT_LINUX"]).as_dictionary(
        {"PATH": "/usr/bin", "CFLAGS": "-O2"})
    assert env["CI_STABLE_ABI"] == "2.10"
    assert env["CFLAGS"].split() == ["-O2", TARGET, "-DUSE_CUDA"]  # the image's own flags kept
    assert env["CXXFLAGS"].split() == [TARGET, "-DUSE_CUDA"]
    assert env["CUDAFLAGS"].split() == [*plan.nvcc_flags, TARGET, "-DUSE_CUDA"]
    assert env["NVCC_APPEND_FLAGS"].split() == [TARGET, "-DUSE_CUDA"]
    from cibuildwheel.util.helpers import prepare_command

    argv = shlex.split(prepare_command(plan.environment["CIBW_REPAIR_WHEEL_COMMAND_LINUX"], wheel="/w.whl",
                                       dest_dir="/out"))
    assert argv[argv.index("--stable-abi") + 1] == "2.10"


def test_a_cpu_variant_serves_any_torch_and_is_verified_across_the_range():
    plan = pl.make_plan(pl.Request(cuda=None, engine="host", stable_abi="2.10"), project_dir=ROOT)
    assert plan.torch == mx.load().default_torch and plan.stable.variant == "cpu"
    assert plan.stable.verify == (("2.10.0", "12.8"), ("2.13.0", None), ("2.15.0", "13.2"))
    assert "-DUSE_CUDA" not in plan.environment["CIBW_ENVIRONMENT_LINUX"]


@pytest.mark.parametrize("args, words", [
    (["--stable-abi", "2.9"], "stable-abi 2.9: LibTorch's stable ABI starts at torch 2.10"),
    (["--stable-abi", "2.14"], "stable-abi 2.14 is above the build's torch 2.13.0"),
    (["--stable-abi", "two"], "bad stable-abi 'two'"),
    (["--stable-abi", "2.10", "--cuda", "14"], "no CUDA 14.x row of the matrix has a torch >= 2.10"),
    (["--stable-abi", "2.10", "--cuda", "13.x"], "unsupported CUDA version '13.x'"),
])
def test_bad_stable_requests_are_one_line(args, words):
    cpu = [] if "--cuda" in args else ["--cpu"]
    r = run_stage("ci.build", *cpu, *args, "--engine", "docker", "--dry-run")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and words in line, r.stderr


def test_stable_abi_from_tool_ci_and_dry_run_shows_the_range(tmp_path):
    project = project_with(tmp_path, 'stable-abi = "2.10"')
    r = run_stage("ci.build", project, "--cuda", "13", "--engine", "docker", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^stable abi +2\.10: cu13 wheel, torch >= 2\.10 with CUDA 13; PyPI has 2\.11\.0 to 2\.15\.0",
                     r.stdout, re.M), r.stdout
    r = run_stage("ci.build", project, "--cpu", "--engine", "docker", "--dry-run", "--json")
    assert json.loads(r.stdout)["stable"]["variant"] == "cpu"
    # a TOML number 2.10 is 2.1: refused with why
    r = run_stage("ci.build", project_with(tmp_path / "n", "stable-abi = 2.10"), "--cpu", "--dry-run")
    assert r.returncode == 2 and "a TOML number 2.10 reads as 2.1" in r.stderr, r.stderr


def test_classic_plans_are_unchanged():
    plan = pl.make_plan(pl.Request(cuda="13.0", engine="docker"), project_dir=ROOT)
    assert plan.stable is None and plan.torch_requirement == f"torch=={plan.torch}"
    assert "CI_STABLE_ABI" not in plan.environment["CIBW_ENVIRONMENT_LINUX"]
    assert "--stable-abi" not in plan.environment["CIBW_REPAIR_WHEEL_COMMAND_LINUX"]


def test_requirements_follow_what_the_libraries_link():
    floor = plan_stable(mx.load(), "2.10", "13.0", "2.14.1").cudnn_floor
    assert requirements({"libcudart.so.13", "libcudnn.so.9", "libc10.so"}, "2.10", 13, floor) == [
        "torch>=2.10", "nvidia-cuda-runtime>=13,<14", "nvidia-cudnn-cu13>=9.19.0.56,<10"]
    assert requirements({"libcudart.so.12"}, "2.10", 12, None) == ["torch>=2.10", "nvidia-cuda-runtime-cu12>=12,<13"]
    assert requirements({"libtorch_cpu.so"}, "2.11", None, None) == ["torch>=2.11"]
    with pytest.raises(CiError):
        requirements({"libcudnn.so.9"}, "2.10", None, None)


def test_an_exact_cuda_without_a_torch_of_the_target_is_one_error():
    """--cuda 11.8 --stable-abi 2.10: no torch of that row reaches 2.10; said, not a ValueError from max()."""
    with pytest.raises(CiError, match=r"CUDA 11\.8 has no torch >= 2\.10 in the matrix \(its newest: 2\.7\.1\)"):
        pl.make_plan(pl.Request(cuda="11.8", engine="docker", stable_abi="2.10"), project_dir=ROOT)


def _self_stable(tmp_path: Path, setup: str, requires: str = '"setuptools", "torch"') -> Path:
    project = tmp_path / "own"
    project.mkdir(parents=True)
    (project / "setup.py").write_text(setup)
    (project / "pyproject.toml").write_text(f'[build-system]\nrequires = [{requires}]\n'
                                            'build-backend = "setuptools.build_meta"\n')
    return project


XFORMERS_STYLE = f'extra = ["-DTORCH_STABLE_ONLY", "{TARGET}"]\n'


def test_a_project_defining_its_own_target_is_planned_stable_within_its_torch_bound(tmp_path):
    """xformers' CUDA build defines TORCH_TARGET_VERSION itself: one cu13 wheel, against the newest torch
    of the row from the target on that the project's own bound allows (torch<2.12: 2.11.0)."""
    plan = pl.make_plan(pl.Request(cuda="13.0", engine="host"), project_dir=_self_stable(tmp_path, XFORMERS_STYLE))
    assert plan.stable is not None and plan.stable.target == "2.10" and plan.stable_from_project
    assert plan.torch == "2.14.1" and plan.label == "cu13"
    bounded = pl.make_plan(pl.Request(cuda="13.0", engine="host"),
                           project_dir=_self_stable(tmp_path / "b", XFORMERS_STYLE, '"setuptools", "torch<2.12"'))
    assert bounded.stable is not None and bounded.torch == "2.11.0", bounded.notes
    pinned = pl.make_plan(pl.Request(cuda="13.0", engine="host", torch="2.13.0"),
                          project_dir=_self_stable(tmp_path / "p", XFORMERS_STYLE))
    assert pinned.stable is None and pinned.label == "pt2.13.0.cu130"
    assert any("--torch 2.13.0 asks for a wheel pinned to it; --stable-abi 2.10" in n for n in pinned.notes)


@pytest.mark.parametrize("setup, why", [
    (f'# old: extra = ["{TARGET}"]  (we compile classic now)\n', None),
    ('extra = ["-DTORCH_TARGET_VERSION=0x0209000000000000"]\n', None),  # below the stable ABI's first torch
    ('extra = ["-DTORCH_TARGET_VERSION=0xffff000000000000"]\n', "has no torch from 255.255"),
])
def test_a_commented_low_or_unbuildable_target_keeps_the_classic_plan(tmp_path, setup, why):
    plan = pl.make_plan(pl.Request(cuda="13.0", engine="host"), project_dir=_self_stable(tmp_path, setup))
    assert plan.stable is None and plan.torch == "2.13.0"
    assert any(why in n for n in plan.notes) if why else not any("TORCH_TARGET_VERSION" in n for n in plan.notes)


def test_a_stable_plan_from_the_text_is_refused_when_the_extensions_compile_classic(tmp_path):
    """The define under a condition the build does not meet: the probe sees classic flags, and the build
    stops before its compile instead of failing the ABI check after it."""
    from wheelci.compile import probe

    plan = pl.make_plan(pl.Request(cuda="13.0", engine="host"), project_dir=_self_stable(tmp_path, XFORMERS_STYLE))
    classic = probe.parse({"setup": {"ext_modules": [{"name": "k._C", "kind": "CUDAExtension", "sources": 2,
                                                        "cuda_sources": 1, "extra_compile_args": {"cxx": ["-O3"]}}]}})
    verdict = probe.judge(classic, plan)
    assert verdict.refusal and "compile without it (a classic build): --torch X" in verdict.refusal
    stable = probe.parse({"setup": {"ext_modules": [{"name": "k._C", "kind": "CUDAExtension", "sources": 2,
                                                       "cuda_sources": 1, "extra_compile_args": {"cxx": [TARGET]}}]}})
    assert probe.judge(stable, plan).refusal is None
