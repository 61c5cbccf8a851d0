"""torchsort built for CPU: its extension module loads from the installed package and soft_rank /
soft_sort compute ranks and sorts (its sdist's tests need fast_soft_sort from GitHub: not reachable).

Known answers from the maths, not from a run: with a small regularization strength the soft rank is the
hard rank and the soft sort is the sort; at any strength the soft rank is a point of the permutahedron
(it sums to n(n+1)/2) and keeps the input's order."""

from pathlib import Path

import torch
import torchsort
from torchsort import isotonic_cpu

assert Path(isotonic_cpu.__file__).parent == Path(torchsort.__file__).parent, isotonic_cpu.__file__
x = torch.tensor([[8.0, 0.0, 5.0, 3.0, 2.0, 1.0, 6.0, 7.0, 9.0]])
hard = torch.argsort(torch.argsort(x, dim=1), dim=1).to(x.dtype) + 1  # 1-based ranks

sharp = torchsort.soft_rank(x, regularization_strength=1e-3)
assert sharp.shape == x.shape, sharp.shape
torch.testing.assert_close(sharp, hard)
torch.testing.assert_close(torchsort.soft_sort(x, regularization_strength=1e-3), torch.sort(x, dim=1).values)

g = torch.Generator().manual_seed(0)
batch = torch.randn(3, 7, dtype=torch.float64, generator=g)
for regularization in ("l2", "kl"):
    soft = torchsort.soft_rank(batch, regularization=regularization, regularization_strength=1.0)
    assert soft.shape == batch.shape and soft.dtype == batch.dtype, (soft.shape, soft.dtype)
    torch.testing.assert_close(soft.sum(dim=1), torch.full((3,), 7 * 8 / 2, dtype=batch.dtype))
    ordered = torch.gather(soft, 1, torch.argsort(batch, dim=1))  # ranks in the input's ascending order
    assert bool((ordered[:, 1:] >= ordered[:, :-1] - 1e-9).all()), (regularization, ordered)

v = batch.clone().requires_grad_()
assert torch.autograd.gradcheck(lambda t: torchsort.soft_rank(t, regularization_strength=0.5), (v,))
print("torchsort: isotonic_cpu loaded; soft_rank and soft_sort match the ranks and the sort")
