"""torch-cluster built for CPU: its nine libraries load (`import torch_cluster` loads each with
torch.ops.load_library), they say they were built without CUDA, and four ops compute what plain torch
computes: grid_cluster (voxel index), fps (greedy farthest points), knn and radius (brute-force distances).
Its sdist's tests would need the package's source tree: these are our own, with reference answers."""

import torch
import torch_cluster
from torch_cluster import fps, grid_cluster, knn, radius

assert torch.ops.torch_cluster.cuda_version() == -1, "a CPU build should carry no CUDA version"

# grid_cluster: voxel (floor((p - min) / size)) numbered x-fastest over the grid spanned by the points
pos = torch.tensor([[0.0, 0.0], [11.0, 9.0], [2.0, 8.0], [2.0, 2.0], [8.0, 3.0]])
size = torch.tensor([5.0, 5.0])
cell = torch.div(pos - pos.min(0).values, size, rounding_mode="floor").long()
cells_x = int(cell[:, 0].max()) + 1
assert grid_cluster(pos, size).tolist() == (cell[:, 0] + cell[:, 1] * cells_x).tolist()

g = torch.Generator().manual_seed(0)
x = torch.rand(40, 3, dtype=torch.float64, generator=g)
batch_x = torch.tensor([0] * 25 + [1] * 15)
y = torch.rand(10, 3, dtype=torch.float64, generator=g)
batch_y = torch.tensor([0] * 6 + [1] * 4)


def greedy_fps(points: torch.Tensor, count: int) -> list[int]:
    chosen = [0]
    nearest = torch.cdist(points, points[:1]).squeeze(1)
    while len(chosen) < count:
        chosen.append(int(nearest.argmax()))
        nearest = torch.minimum(nearest, torch.cdist(points, points[chosen[-1]:chosen[-1] + 1]).squeeze(1))
    return chosen


got = fps(x, batch_x, ratio=0.2, random_start=False).tolist()
assert got == greedy_fps(x[:25], 5) + [25 + i for i in greedy_fps(x[25:], 3)], got


def pairs(edges: torch.Tensor) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in edges.t()}


same_batch = batch_y[:, None] == batch_x[None, :]
dist = torch.cdist(y, x).masked_fill(~same_batch, float("inf"))
nearest3 = dist.topk(3, dim=1, largest=False).indices
assert pairs(knn(x, y, 3, batch_x, batch_y)) == {(i, int(j)) for i in range(len(y)) for j in nearest3[i]}

within = (dist <= 0.35).nonzero()
assert len(within) > len(y), "the radius should find several neighbours per point"
assert pairs(radius(x, y, 0.35, batch_x, batch_y, max_num_neighbors=64)) == pairs(within.t())
print(f"torch_cluster {torch_cluster.__version__}: CPU build; grid_cluster, fps, knn and radius match the references")
