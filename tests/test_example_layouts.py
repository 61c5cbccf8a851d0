"""The example wheel where users put it: one directory per package (Bazel rules_python, PEX,
pip --target per package), and a private index it was uploaded to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._elfbuild import NVIDIA_WHEELS, TORCH, TORCH_PURE_DEPS, cached_install, cached_wheel
from tests import _proc

OP_CHECK = """
import json, sys, torch
import {pkg} as m
x = torch.randn(4, 6, dtype=torch.float64)
err = (m.scaled_softmax(x, 1.5) - torch.softmax(x * 1.5, -1)).abs().max().item()
cudnn = sorted({{l.split()[-1] for l in open("/proc/self/maps") if "libcudnn.so" in l}})
print(json.dumps({{"err": err, "file": m.__file__, "torch": torch.__version__, "cudnn": cudnn}}))
"""


def run_isolated(code: str, paths: list[Path]) -> subprocess.CompletedProcess:
    """Python with only `paths` (plus the stdlib) importable: no site-packages, no user site."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, paths))
    return _proc.run([sys.executable, "-S", "-s", "-c", code], capture_output=True, text=True,
                     env=env, cwd="/")


def install_alone(wheel: Path, dest: Path) -> Path:
    _proc.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
               "--disable-pip-version-check", "--target", str(dest), str(wheel)], check=True)
    return dest


@pytest.fixture(scope="module")
def torch_per_package() -> list[Path]:
    """torch 2.13.0+cu130, each nvidia-* wheel and each pure-python dependency in its own directory."""
    dists = [TORCH, *NVIDIA_WHEELS.items(), *TORCH_PURE_DEPS.items()]
    return [cached_install(cached_wheel(d, v)) for d, v in dists]


def test_cuda_example_wheel_imports_per_package(cuda_build, torch_per_package, tmp_path):
    """Our wheel in its own directory, beside torch and each CUDA wheel in theirs: the op library's
    RUNPATH ($ORIGIN/../../nvidia/cudnn/lib) points nowhere, the generated preload finds cuDNN."""
    pkg = cuda_build.wheel.name.split("-")[0]
    ours = install_alone(cuda_build.wheel, tmp_path / "ours")
    proc = run_isolated(OP_CHECK.format(pkg=pkg), [ours, *torch_per_package])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["err"] < 1e-12
    assert out["file"].startswith(str(ours)) and out["torch"] == "2.13.0+cu130"
    assert len(out["cudnn"]) == 1 and "/nvidia/cudnn/lib/libcudnn.so.9" in out["cudnn"][0]


def test_op_library_loads_per_package_only_with_the_preload(cuda_build, torch_per_package, tmp_path):
    """The control, at the dynamic-linker level (no `import torch`, whose own hand-written preload
    happens to cover cuDNN for torch 2.13.0): the op library alone fails per package, since its
    RUNPATH ($ORIGIN/../../torch/lib, .../nvidia/cudnn/lib) points nowhere; after the wheel's
    generated preload it loads."""
    pkg = cuda_build.wheel.name.split("-")[0]
    ours = install_alone(cuda_build.wheel, tmp_path / "ours")
    lib = next((ours / pkg / "lib").glob("lib*.so"))
    paths = [ours, *torch_per_package]
    naive = run_isolated(f"import ctypes; ctypes.CDLL({str(lib)!r})", paths)
    assert naive.returncode != 0 and "cannot open shared object file" in naive.stderr
    preload = ours / pkg / "_preload.py"
    code = ("import ctypes, importlib.util as u\n"
            f"s = u.spec_from_file_location('p', {str(preload)!r}); m = u.module_from_spec(s)\n"
            "s.loader.exec_module(m); m.preload()\n"
            f"ctypes.CDLL({str(lib)!r}); print('loaded')")
    ok = run_isolated(code, paths)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip() == "loaded"
