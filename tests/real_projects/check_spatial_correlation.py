"""spatial-correlation-sampler's CPU kernel against a plain torch correlation (its sdist ships no tests).

Run in the verify venv: its root-level extension module computes what the package says."""

import torch
import torch.nn.functional as F
from spatial_correlation_sampler import SpatialCorrelationSampler, spatial_correlation_sample

import spatial_correlation_sampler_backend  # the root-level extension module itself


def reference(a: torch.Tensor, b: torch.Tensor, patch: int) -> torch.Tensor:
    """out[n, i, j, h, w] = sum_c a[n, c, h, w] * b[n, c, h + i - patch//2, w + j - patch//2]."""
    n, c, h, w = a.shape
    r = patch // 2
    padded = F.pad(b, (r, r, r, r))
    out = torch.empty(n, patch, patch, h, w, dtype=a.dtype)
    for i in range(patch):
        for j in range(patch):
            out[:, i, j] = (a * padded[:, :, i:i + h, j:j + w]).sum(1)
    return out


g = torch.Generator().manual_seed(0)
a = torch.randn(2, 4, 9, 11, dtype=torch.float64, generator=g)
b = torch.randn(2, 4, 9, 11, dtype=torch.float64, generator=g)
out = spatial_correlation_sample(a, b, kernel_size=1, patch_size=5, stride=1, padding=0, dilation_patch=1)
torch.testing.assert_close(out, reference(a, b, 5))
x = torch.randn(1, 2, 5, 6, dtype=torch.float64, generator=g, requires_grad=True)
y = torch.randn(1, 2, 5, 6, dtype=torch.float64, generator=g, requires_grad=True)
assert torch.autograd.gradcheck(SpatialCorrelationSampler(kernel_size=1, patch_size=3), (x, y))
assert hasattr(spatial_correlation_sampler_backend, "forward")
print("spatial_correlation_sampler: forward matches the reference, gradcheck passed")
