"""Run the example's CUDA kernels on a real GPU, against the torch that is installed there.

    scripts/gpu-check [--repeats N]        (PYTHON=... picks the interpreter that has torch)

Made for a machine with an NVIDIA GPU and a CUDA torch but no network: the op is compiled with torch's
own extension builder (nvcc and ninja from that machine; cuDNN from torch's nvidia-cudnn wheel), then
checked against `torch.softmax(x * scale)` (float32 and float64; rows longer than 65535, more rows
than a grid's y dimension, non-contiguous input), with opcheck and gradcheck on the device, and timed
(CUDA events, median) forward and backward against the same torch expression. Without a GPU it stops
with one line, exit 2. It is the example's own check, not part of the pipeline: it imports nothing of ci.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


class Refusal(Exception):
    """Why gpu-check cannot run here: one line, exit 2."""
SHAPES = [(8, 33), (1024, 1000), (2, 70_000), (70_000, 16)]
BENCH_SHAPES = [(4096, 4096), (64, 65_536)]
SCALE = 0.7


def require_gpu():
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: harmless here
    try:
        import torch
    except ImportError:
        raise Refusal("torch is not importable by this Python: install a CUDA build of torch") from None
    if torch.version.cuda is None:
        raise Refusal(f"torch {torch.__version__} is a CPU build: gpu-check needs a CUDA build of torch")
    if not torch.cuda.is_available():
        raise Refusal(f"no CUDA GPU is visible to torch {torch.__version__} (torch.cuda.is_available() is False)")
    return torch


def cudnn_paths() -> tuple[list[str], list[str]]:
    """Include and library directories of the nvidia-cudnn wheel that torch uses."""
    try:
        import nvidia.cudnn as cudnn
    except ImportError:
        raise Refusal("cuDNN's headers are missing: install torch's nvidia-cudnn wheel (it ships them)") from None
    base = Path(next(iter(cudnn.__path__)))
    return [str(base / "include")], [str(base / "lib")]


def compile_op(work: str, cuda: bool) -> None:
    """Compile the op library into work/softmax_ext.so with torch's extension builder. Runs in a child
    process: the builder loads what it built, and a second copy of the library loaded into the same
    process (the one the package imports) would register the op namespace twice and abort."""
    from torch.utils import cpp_extension

    flags = ["-O3", "-DOPS_NAMESPACE=softmax_ext"] + (["-DOPS_WITH_CUDA"] if cuda else [])
    sources = [str(ROOT / "csrc" / "ops.cpp")] + ([str(ROOT / "csrc" / "cuda.cu")] if cuda else [])
    include, ldflags = [], []
    if cuda:
        include, libdirs = cudnn_paths()
        ldflags = [f"-L{d}" for d in libdirs] + ["-l:libcudnn.so.9"]
    cpp_extension.load(name="softmax_ext", sources=sources, extra_cflags=flags, extra_cuda_cflags=flags,
                       extra_include_paths=include, extra_ldflags=ldflags, with_cuda=cuda,
                       build_directory=work, is_python_module=False, verbose=False)


def build_package(torch, work: Path, cuda: bool = True) -> Path:
    """The example package in work/, with its op library compiled (for this GPU when cuda); returns work."""
    pkg = work / "softmax_ext"
    shutil.copytree(ROOT / "src" / "softmax_ext", pkg)
    (pkg / "lib").mkdir()
    env = dict(os.environ)
    if cuda:
        major, minor = torch.cuda.get_device_capability()
        env.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    # the builder runs `ninja`: the one pip installed beside this interpreter counts too
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); from gpu_check import compile_op; "
            f"compile_op({str(work)!r}, {cuda!r})")
    if subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env).returncode != 0:
        raise Refusal("compiling the example op failed (the compiler's output is above)")
    shutil.copy2(work / "softmax_ext.so", pkg / "lib" / "libsoftmax_ext.so")
    return work


def correctness(torch, ops) -> list[tuple[str, str]]:
    rows = []
    for dtype in (torch.float32, torch.float64):
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        for shape in SHAPES:
            x = torch.randn(*shape, device="cuda", dtype=dtype)
            got, want = ops.scaled_softmax(x, SCALE), torch.softmax(x * SCALE, dim=-1)
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            rows.append((f"forward {str(dtype)[6:]} {shape}", "ok"))
        x = torch.randn(257, 130, device="cuda", dtype=dtype).t()  # non-contiguous
        torch.testing.assert_close(ops.scaled_softmax(x, SCALE), torch.softmax(x * SCALE, dim=-1), rtol=tol, atol=tol)
        rows.append((f"forward {str(dtype)[6:]} non-contiguous {tuple(x.shape)}", "ok"))
    x = torch.randn(16, 40, device="cuda", dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.softmax_ext.scaled_softmax.default, (x, SCALE))
    rows.append(("opcheck scaled_softmax (cuda)", "ok"))
    assert torch.autograd.gradcheck(lambda t: ops.scaled_softmax(t, SCALE), (x,))
    rows.append(("gradcheck float64 (cuda)", "ok"))
    return rows


def median_ms(torch, fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def timings(torch, ops, repeats: int) -> list[tuple[str, float, float]]:
    out = []
    for shape in BENCH_SHAPES:
        x = torch.randn(*shape, device="cuda")
        y = ops.scaled_softmax(x, SCALE)
        g = torch.randn_like(x)
        xr = x.clone().requires_grad_()
        yr = torch.softmax(xr * SCALE, dim=-1)
        out.append((f"forward {shape}", median_ms(torch, lambda: ops.scaled_softmax(x, SCALE), repeats),
                    median_ms(torch, lambda: torch.softmax(x * SCALE, dim=-1), repeats)))
        out.append((f"backward {shape}", median_ms(torch, lambda: ops.scaled_softmax_backward(g, y, SCALE), repeats),
                    median_ms(torch, lambda: torch.autograd.grad(yr, xr, g, retain_graph=True), repeats)))
    return out


def main(args) -> int:
    torch = require_gpu()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}) "
              f"on {torch.cuda.get_device_name()}; building the example op...", file=sys.stderr)
        sys.path.insert(0, str(build_package(torch, Path(tmp))))
        import softmax_ext as ops

        checks = correctness(torch, ops)
        times = timings(torch, ops, args.repeats)
    width = max(len(n) for n, _ in checks)
    print("\n".join(f"{n:<{width}}  {r}" for n, r in checks))
    print(f"\n{'op':<24} {'ours ms':>9} {'torch ms':>9} {'speedup':>8}")
    for name, ours, ref in times:
        print(f"{name:<24} {ours:>9.3f} {ref:>9.3f} {ref / ours:>7.2f}x")
    return 0


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(prog="gpu-check", description="Build the example op against this machine's "
                                "torch and run its CUDA kernels on the GPU.")
    p.add_argument("--repeats", type=int, default=50, help="timed runs per measurement (median reported)")
    try:
        sys.exit(main(p.parse_args()))
    except Refusal as e:
        print(f"gpu-check: error: {e}", file=sys.stderr)
        sys.exit(2)
