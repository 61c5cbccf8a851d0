"""torch-spline-conv built with CUDA (its PyG layout: `_basis_cpu` and `_basis_cuda` register the same
operators, and `import torch_spline_conv` loads only the one that fits): the CUDA libraries loaded,
they carry the CUDA version torch has, and on CPU tensors spline_basis and spline_weighting compute what
plain torch computes for a linear B-spline of degree 1 (no GPU needed: the CUDA libraries hold the CPU
kernels too). Its sdist has no tests: these are our own, with reference answers."""

import torch
import torch_spline_conv
from torch_spline_conv import spline_basis, spline_weighting

major = int(torch.version.cuda.split(".")[0])
assert torch.ops.torch_spline_conv.cuda_version() // 1000 == major, "built for another CUDA than torch's"
loaded = {p.rsplit("/", 1)[-1].split(".")[0] for p in torch.ops.loaded_libraries}
assert {"_basis_cuda", "_weighting_cuda"} <= loaded and not loaded & {"_basis_cpu", "_weighting_cpu"}, loaded

# one dimension, kernel size 5, open spline, degree 1: pseudo p in [0, 1] sits at v = p * (5 - 1)
pseudo = torch.tensor([[0.0], [0.3], [0.55], [1.0]], dtype=torch.float64)
kernel_size, is_open = torch.tensor([5]), torch.tensor([1], dtype=torch.uint8)
basis, index = spline_basis(pseudo, kernel_size, is_open, 1)
v = pseudo[:, 0] * 4
frac = v - v.floor()
assert torch.allclose(basis, torch.stack([1 - frac, frac], dim=1)), basis
assert index.tolist() == [[int(f), (int(f) + 1) % 5] for f in v.floor()], index

# weighting: out[e] = sum_s basis[e, s] * x[e] @ weight[index[e, s]]
x = torch.rand(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
weight = torch.rand(5, 3, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
want = torch.stack([sum(basis[e, s] * x[e] @ weight[index[e, s]] for s in range(2)) for e in range(4)])
assert torch.allclose(spline_weighting(x, weight, basis, index), want)
print(torch_spline_conv.__name__, "ok")
