"""scripts/gpu-check refuses cleanly where it cannot run: no torch, a CPU torch, a CUDA torch without a GPU.

(Its GPU path runs only on a machine with an NVIDIA GPU.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wheelci.util.cache import cache_dir
from tests.conftest import ROOT
from tests import _proc


def gpu_check(python: str) -> subprocess.CompletedProcess:
    return _proc.run([str(ROOT / "scripts" / "gpu-check")], capture_output=True, text=True, cwd=ROOT,
                     env={**os.environ, "PYTHON": python})


@pytest.mark.parametrize("variant, words", [
    ("none", "torch is not importable by this Python"),
    ("cpu", "torch 2.13.0+cpu is a CPU build: gpu-check needs a CUDA build of torch"),
    ("cu130", "no CUDA GPU is visible to torch 2.13.0+cu130 (torch.cuda.is_available() is False)"),
])
@pytest.mark.slow
@pytest.mark.network
def test_refuses_in_one_line_without_a_gpu(request, tmp_path, variant, words):
    if variant == "none":
        _proc.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
        python = str(tmp_path / "venv" / "bin" / "python")
    else:
        request.getfixturevalue("cpu_build" if variant == "cpu" else "cuda_build")  # makes the cached env
        python = str(cache_dir("envs") / f"torch-2.13.0-{variant}-py311" / "bin" / "python")
    r = gpu_check(python)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: error: ") and words in lines[0], r.stderr


def test_the_built_package_imports_and_computes(cpu_build, tmp_path):
    """gpu-check's build, without CUDA, on a CPU torch: the package it assembles imports once and computes.
    (The first GPU run aborted here: the builder's own load and the package's load registered the op twice.)"""
    python = cache_dir("envs") / "torch-2.13.0-cpu-py311" / "bin" / "python"
    code = ("import sys, torch\nfrom pathlib import Path\nsys.path.insert(0, 'example_tests')\n"
            "from gpu_check import build_package\n"
            "sys.path.insert(0, str(build_package(torch, Path(sys.argv[1]), cuda=False)))\n"
            "import softmax_ext\nx = torch.randn(8, 33, dtype=torch.float64)\n"
            "torch.testing.assert_close(softmax_ext.scaled_softmax(x, 0.7), torch.softmax(x * 0.7, dim=-1))\n"
            "print(softmax_ext.LIBRARY)\n")
    r = _proc.run([str(python), "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                  env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str(tmp_path / "softmax_ext" / "lib" / "libsoftmax_ext.so")


def _cuda_torch_python() -> str | None:
    """CI_GPU_PYTHON, else the first of this Python and the machine's python3 that has a CUDA torch."""
    if os.environ.get("CI_GPU_PYTHON"):
        return os.environ["CI_GPU_PYTHON"]
    for python in (sys.executable, "python3"):
        probe = _proc.run([python, "-c", "import torch; assert torch.version.cuda"], capture_output=True)
        if probe.returncode == 0:
            return python
    return None


@pytest.mark.gpu
@pytest.mark.slow
def test_kernels_pass_on_the_gpu():
    """Where a GPU is: the example compiled against that machine's CUDA torch, every correctness row
    passes and the timing table is printed."""
    python = _cuda_torch_python()
    if python is None:
        pytest.skip("a GPU but no CUDA build of torch to compile against: set CI_GPU_PYTHON")
    r = gpu_check(python)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ours ms" in r.stdout and "forward float32" in r.stdout, r.stdout
