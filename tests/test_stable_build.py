"""Stable-ABI wheels end to end: the example (CMake) and an extension_cpp_stable-style fixture
(setuptools, py_limited_api) built once per variant through `ci.build --stable-abi 2.10` on the host,
ABI-checked, and verified under three real torch releases (PyPI's CUDA builds import without a GPU);
the CUDA variant refuses, at import, a torch of another CUDA major with the variant to install.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from wheelci.compile.hostenv import TorchSpec, ensure_env
from wheelci.verifyenv import fresh_venv, pip_install
from wheelci.wheel.metadata import get_headers
from wheelci.wheel.zipread import WheelArchive
from tests._wheels import run_stage
from tests import _proc

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "stable_ext"

pytestmark = pytest.mark.real_torch


def build(tmp: Path, *args: str) -> tuple[dict, list[Path]]:
    out = tmp / "out"
    r = run_stage("ci.build", *args, "--engine", "host", "-w", out, "--json")
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout), sorted(out.glob("*.whl"))


def rows(report: dict) -> dict[str, dict[str, object]]:
    """torch version -> that torch's verify checks."""
    out: dict[str, dict[str, object]] = {}
    for key, value in report["verify"].items():
        if key.startswith("torch "):
            version, _, check = key[len("torch "):].partition(": ")
            out.setdefault(version, {})[check] = value
    return out


def requires(wheel: Path) -> list[str]:
    with WheelArchive.open(wheel) as wa:
        return get_headers(wa.metadata, "Requires-Dist")


@pytest.fixture(scope="module")
def example_cpu(tmp_path_factory):
    return build(tmp_path_factory.mktemp("example-cpu"), "--cpu", "--stable-abi", "2.10")


@pytest.fixture(scope="module")
def example_cu13(tmp_path_factory):
    return build(tmp_path_factory.mktemp("example-cu13"), "--cuda", "13", "--arch-list", "9.0", "--stable-abi", "2.10")


@pytest.fixture(scope="module")
def fixture_cpu(tmp_path_factory):
    return build(tmp_path_factory.mktemp("fixture-cpu"), str(FIXTURE), "--cpu")  # stable-abi from [tool.wheelci]


@pytest.fixture(scope="module")
def fixture_cu13(tmp_path_factory):
    return build(tmp_path_factory.mktemp("fixture-cu13"), str(FIXTURE), "--cuda", "13", "--arch-list", "9.0")


def test_example_stable_cpu_wheel_passes_its_tests_under_three_torch_releases(example_cpu):
    report, wheels = example_cpu
    (wheel,) = wheels
    assert wheel.name.startswith("softmax_ext-0.1.0+cpu-py3-none-manylinux_2_27_x86_64.manylinux_2_28"), wheel.name
    assert requires(wheel) == ["torch>=2.10"]
    by_torch = rows(report)
    assert [v.split("+")[0] for v in by_torch] == ["2.10.0", "2.13.0", "2.15.0"], list(by_torch)
    for version, checks in by_torch.items():
        assert checks["install"] == "ok" and str(checks["test_command"]).startswith("ok"), (version, checks)
        assert any(k.startswith("test ") for k in checks), checks  # its pytest tests ran, one by one
    assert report["passed"] and any(v == "ok (stable, torch>=2.10)" for v in report["verify"].values())


def test_example_stable_cu13_wheel_links_cudnn_and_passes_under_three_cu13_torch_releases(example_cu13):
    """One binary (CUDA 13.0, torch 2.14.1's headers, target 2.10) for torch 2.11 to 2.15 (2.15 on CUDA 13.2,
    whose CUDA wheels leave out curand: a library of a distribution the torch does not install is not
    preloaded): cuDNN required from the oldest pin of the range on, never pinned."""
    report, wheels = example_cu13
    (wheel,) = wheels
    assert "+cu13-py3-none-" in wheel.name, wheel.name
    assert requires(wheel) == ["torch>=2.10", "nvidia-cuda-runtime>=13,<14", "nvidia-cudnn-cu13>=9.19.0.56,<10"]
    by_torch = rows(report)
    assert list(by_torch) == ["2.11.0+cu130", "2.14.1+cu130", "2.15.0+cu132"], list(by_torch)
    for version, checks in by_torch.items():
        assert str(checks["test_command"]).startswith("ok"), (version, checks)
        assert checks["load softmax_ext/lib/libsoftmax_ext.so"] == "ok", checks


def test_fixture_stable_cpu_wheel_is_abi3_and_passes_under_three_torch_releases(fixture_cpu):
    report, wheels = fixture_cpu
    (wheel,) = wheels
    assert wheel.name.startswith("stable_ext-0.1.0+cpu-cp39-abi3-manylinux_"), wheel.name
    assert requires(wheel) == ["torch>=2.10"]
    by_torch = rows(report)
    assert len(by_torch) == 3
    for version, checks in by_torch.items():
        assert str(checks["test_command"]).startswith("ok"), (version, checks)


def test_fixture_cu13_wheel_requires_its_major_and_passes_under_three_cu13_torch_releases(fixture_cu13):
    report, wheels = fixture_cu13
    (wheel,) = wheels
    assert "+cu13-cp39-abi3-" in wheel.name, wheel.name
    reqs = requires(wheel)
    assert reqs[0] == "torch>=2.10" and "nvidia-cuda-runtime>=13,<14" in reqs, reqs
    assert [v for v in rows(report)] == ["2.11.0+cu130", "2.14.1+cu130", "2.15.0+cu132"], list(rows(report))
    assert report["plan"]["cuda"] == "13.0" and report["plan"]["torch"] == "2.14.1"


def test_cu13_wheel_names_the_right_variant_under_another_torch(fixture_cu13, tmp_path):
    """Under torch 2.10 (CUDA 12.8) the cu13 build says which build to install, not `libcudart.so.13:
    cannot open shared object file`."""
    _, (wheel,) = fixture_cu13
    site = ensure_env(TorchSpec("2.10.0", "12.8", None, True)).site
    python = fresh_venv(tmp_path / "venv", site)
    assert pip_install(python, "--no-deps", "--no-index", str(wheel)).returncode == 0
    r = _proc.run([str(python), "-c", "import stable_ext"], capture_output=True, text=True)
    assert r.returncode != 0 and "VariantError" in r.stderr, r.stderr[-2000:]
    assert "is the cu13 build (CUDA 13), but torch 2.10.0+cu128 has CUDA 12.8: install the cu12 build" in r.stderr


def test_classic_sources_in_a_stable_build_say_why(tmp_path):
    r = run_stage("ci.build", ROOT / "tests" / "fixtures" / "tiny_ext", "--cpu", "--stable-abi", "2.10",
                  "--engine", "host", "-w", tmp_path / "out", "--work-dir", tmp_path / "work")
    assert r.returncode == 1 and "classic LibTorch headers (torch/extension.h)" in r.stderr.splitlines()[-1]
    assert not any((tmp_path / "out").glob("*.whl"))


def test_a_projects_narrower_torch_range_is_kept_and_verified_inside_it(tmp_path):
    """The fixture declaring `torch>=2.12,<3` (say it needs a 2.12 behaviour): the wheel keeps that range
    instead of the target's `torch>=2.10`, and verify skips the 2.10 release the wheel rules out."""
    import shutil

    project = tmp_path / "stable_ext"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace('    python_requires=">=3.9",',
                                               '    python_requires=">=3.9",\n    install_requires=["torch>=2.12,<3"],'))
    r = run_stage("ci.build", project, "--cpu", "--engine", "host", "-w", tmp_path / "out", "--json")
    assert r.returncode == 0, r.stderr[-4000:]
    report = json.loads(r.stdout)
    (wheel,) = sorted((tmp_path / "out").glob("*.whl"))
    assert [q for q in requires(wheel) if q.startswith("torch")] == ["torch<3,>=2.12"]
    assert [v.split("+")[0] for v in rows(report)] == ["2.13.0", "2.15.0"]
    assert "note: not verifying under torch 2.10.0: the wheel requires torch<3,>=2.12" in r.stderr
    assert report["passed"]
