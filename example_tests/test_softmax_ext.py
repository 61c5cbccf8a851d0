"""The example's own tests, run by `ci.build` in the fresh verify venv after the wheel is installed
(its [tool.wheelci] test-command): the ops against torch's softmax, opcheck, gradcheck, TorchScript, and
the Python-free C++ runner when the build made one. CUDA cases run where a GPU is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import softmax_ext

SCALE = 1.7
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


def reference(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.softmax(x * scale, dim=-1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)], ids=["float32", "float64"])
def test_ops_match_torch(device, dtype, tol):
    torch.manual_seed(0)
    x = torch.randn(5, 3, 17, dtype=dtype, device=device, requires_grad=True)
    y = softmax_ext.scaled_softmax(x, SCALE)
    ref = reference(x, SCALE)
    torch.testing.assert_close(y, ref, atol=tol, rtol=tol)
    g = torch.randn_like(y)
    (dx,) = torch.autograd.grad(ref, x, g)
    torch.testing.assert_close(softmax_ext.scaled_softmax_backward(g, y.detach(), SCALE), dx, atol=tol, rtol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_input(device):
    assert softmax_ext.scaled_softmax(torch.empty(0, 4, device=device), SCALE).shape == (0, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    ops = getattr(torch.ops, softmax_ext.NAMESPACE)
    x = torch.randn(4, 9, dtype=torch.float64, device=device, requires_grad=True)
    y = softmax_ext.scaled_softmax(x, SCALE).detach()
    for op, args in ((ops.scaled_softmax.default, (x, SCALE)),
                     (ops.scaled_softmax_backward.default, (torch.randn_like(y), y, SCALE))):
        result = torch.library.opcheck(op, args)
        assert all(v == "SUCCESS" for v in result.values()), (op, result)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck(device):
    x = torch.randn(3, 7, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: softmax_ext.scaled_softmax(t, SCALE), (x,))
    assert torch.autograd.gradgradcheck(lambda t: softmax_ext.scaled_softmax(t, SCALE), (x,))


@pytest.fixture(scope="module")
def scripted_model(tmp_path_factory) -> Path:
    """A TorchScript model calling the op, saved to a file. TorchScript compiles from source and the
    namespace is only known at run time, so the model's source is written with it filled in."""
    workdir = tmp_path_factory.mktemp("model")
    source = workdir / "scripted_model.py"
    source.write_text(
        "import torch\n\n\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        f"        return torch.ops.{softmax_ext.NAMESPACE}.scaled_softmax(x, {SCALE})\n"
    )
    sys.path.insert(0, str(workdir))
    try:
        import scripted_model as mod
    finally:
        sys.path.remove(str(workdir))
    path = workdir / "model.pt"
    torch.jit.script(mod.Model()).save(str(path))
    return path


def test_torchscript_model_loads_in_a_new_process(scripted_model):
    """A deployment loads the op library directly, without importing the package."""
    code = (
        "import sys, torch;"
        "torch.ops.load_library(sys.argv[2]);"
        "m = torch.jit.load(sys.argv[1]);"
        "x = torch.linspace(-3.0, 3.0, 24, dtype=torch.float64).reshape(4, 6);"
        f"torch.testing.assert_close(m(x), torch.softmax(x * {SCALE}, -1));"
        "print('loaded-ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(scripted_model), str(softmax_ext.LIBRARY)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "loaded-ok" in proc.stdout, proc.stderr[-2000:]


def find_runner() -> Path | None:
    """The C++ runner, built by host builds into the build tree that ci.build names in CI_BUILD_DIR."""
    build = os.environ.get("CI_BUILD_DIR")
    if not build:
        return None
    return next((p for p in Path(build).glob("*_runner") if os.access(p, os.X_OK)), None)


def test_cpp_runner(scripted_model):
    """The model run by a C++ program with no Python, its libraries found as a deployment would:
    LD_LIBRARY_PATH naming the op library's, torch's and the CUDA wheels' directories."""
    runner = find_runner()
    if runner is None:
        pytest.skip("no C++ runner was built (CI_BUILD_DIR unset or without one: container builds make none)")
    # The runner is classic LibTorch (TorchScript has no stable API): it runs only on the torch it was
    # built against, while a stable-ABI wheel is verified under every torch from its target on.
    stamp = runner.with_name(runner.name + ".torch-version")
    built = stamp.read_text().strip() if stamp.is_file() else None
    if built is not None and built != torch.__version__:
        pytest.skip(f"the C++ runner was built against torch {built}, this is torch {torch.__version__}")
    torch_lib = Path(torch.__file__).parent / "lib"
    dirs = [softmax_ext.LIBRARY.parent, torch_lib, *sorted(torch_lib.parent.parent.glob("nvidia/*/lib"))]
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(map(str, dirs))}
    proc = subprocess.run([str(runner), str(scripted_model), str(SCALE)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, (proc.stderr or proc.stdout)[-2000:]
