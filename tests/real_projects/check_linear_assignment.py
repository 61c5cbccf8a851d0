"""torch-linear-assignment built with its CUDA backend (FORCE_CUDA=1 on a GPU-less builder): the backend
says so, and the CPU path solves assignments optimally (its sdist ships no tests)."""

import itertools

import torch
import torch_linear_assignment as tla
from torch_linear_assignment import _backend

assert _backend.has_cuda(), "built without its CUDA backend"
g = torch.Generator().manual_seed(0)
cost = torch.rand(3, 4, 4, generator=g)
matching = tla.batch_linear_assignment(cost)
for b in range(cost.shape[0]):
    best = min(sum(cost[b, w, t].item() for w, t in enumerate(p)) for p in itertools.permutations(range(4)))
    got = sum(cost[b, w, matching[b, w]].item() for w in range(4))
    assert abs(got - best) < 1e-6, (b, got, best)
print("torch_linear_assignment: CUDA backend built, assignments optimal")
