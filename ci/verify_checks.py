"""The checks verify runs inside the fresh venv: `python verify_checks.py PACKAGE WORKDIR`.

Standalone on purpose (torch and the package under test only; ci/ is not installed there). Prints
one JSON object on its last line: each check's outcome, and the paths of the scripted model.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import traceback
from pathlib import Path

SCALE = 1.7


def reference(x, scale):
    import torch

    return torch.softmax(x * scale, dim=-1)


def check_ops(pkg, device: str) -> str:
    """Both ops against torch's softmax and its autograd, float32 and float64."""
    import torch

    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        x = torch.randn(5, 3, 17, dtype=dtype, device=device, requires_grad=True)
        y = pkg.scaled_softmax(x, SCALE)
        ref = reference(x, SCALE)
        torch.testing.assert_close(y, ref, atol=tol, rtol=tol)
        g = torch.randn_like(y)
        (dx,) = torch.autograd.grad(ref, x, g)
        torch.testing.assert_close(pkg.scaled_softmax_backward(g, y.detach(), SCALE), dx, atol=tol, rtol=tol)
    empty = pkg.scaled_softmax(torch.empty(0, 4, device=device), SCALE)
    assert empty.shape == (0, 4)
    return "ok"


def check_opcheck(pkg, device: str) -> str:
    import torch

    ops = getattr(torch.ops, pkg.NAMESPACE)
    x = torch.randn(4, 9, dtype=torch.float64, device=device, requires_grad=True)
    y = pkg.scaled_softmax(x, SCALE).detach()
    for op, args in ((ops.scaled_softmax.default, (x, SCALE)),
                     (ops.scaled_softmax_backward.default, (torch.randn_like(y), y, SCALE))):
        result = torch.library.opcheck(op, args)
        bad = {k: v for k, v in result.items() if v != "SUCCESS"}
        assert not bad, f"opcheck {op}: {bad}"
    return "ok"


def check_gradcheck(pkg, device: str) -> str:
    import torch

    x = torch.randn(3, 7, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: pkg.scaled_softmax(t, SCALE), (x,))
    assert torch.autograd.gradgradcheck(lambda t: pkg.scaled_softmax(t, SCALE), (x,))
    return "ok"


def script_model(pkg, workdir: Path) -> str:
    """Script and save a model calling the op; load and run it in a new process (no package import
    there: the op library is loaded directly, as a deployment would)."""
    import torch

    # TorchScript compiles from source, and the namespace is only known at run time: write the
    # model's source with the namespace filled in, import it, and script it.
    source = workdir / "scripted_model.py"
    source.write_text(
        "import torch\n\n\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        f"        return torch.ops.{pkg.NAMESPACE}.scaled_softmax(x, {SCALE})\n"
    )
    spec = importlib.util.spec_from_file_location("scripted_model", source)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    module = torch.jit.script(mod.Model())
    path = workdir / "model.pt"
    module.save(str(path))
    code = (
        "import sys, torch;"
        f"torch.ops.load_library({str(pkg.LIBRARY)!r});"
        "m = torch.jit.load(sys.argv[1]);"
        "x = torch.linspace(-3.0, 3.0, 24, dtype=torch.float64).reshape(4, 6);"
        f"torch.testing.assert_close(m(x), torch.softmax(x * {SCALE}, -1));"
        "print('loaded-ok')"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert out.returncode == 0 and "loaded-ok" in out.stdout, out.stderr.strip().splitlines()[-1:]
    return "ok"


def main() -> int:
    package, workdir = sys.argv[1], Path(sys.argv[2])
    results: dict[str, object] = {}
    try:
        pkg = importlib.import_module(package)
        import torch

        results["import"] = "ok"
        results["torch"] = torch.__version__
        results["library"] = str(pkg.LIBRARY)
        results["torch_lib"] = str(Path(torch.__file__).parent / "lib")
    except Exception:
        results["import"] = traceback.format_exc().strip().splitlines()[-1]
        print(json.dumps(results))
        return 1
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results["cuda_available"] = torch.cuda.is_available()
    checks = {"ops": check_ops, "opcheck": check_opcheck, "gradcheck": check_gradcheck}
    for device in devices:
        for name, fn in checks.items():
            try:
                results[f"{name}_{device}"] = fn(pkg, device)
            except Exception as e:  # a failed check is a result, not a crash
                results[f"{name}_{device}"] = f"FAILED: {type(e).__name__}: {e}".splitlines()[0]
    try:
        results["torchscript"] = script_model(pkg, workdir)
        results["model"] = str(workdir / "model.pt")
    except Exception as e:
        results["torchscript"] = f"FAILED: {type(e).__name__}: {e}".splitlines()[0]
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
