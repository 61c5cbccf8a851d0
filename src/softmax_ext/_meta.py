"""Fake (meta) kernels for torch.compile/export and the autograd formula, registered in Python.

The C++ library only defines schemas and device kernels; shape propagation and differentiation live
here where they are short and readable.
"""

from __future__ import annotations

import torch

from . import NAMESPACE, _ops


@torch.library.register_fake(f"{NAMESPACE}::scaled_softmax")
def _scaled_softmax_fake(x: torch.Tensor, scale: float) -> torch.Tensor:
    torch._check(x.dim() >= 1, lambda: "x must have at least one dimension")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake(f"{NAMESPACE}::scaled_softmax_backward")
def _scaled_softmax_backward_fake(grad: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    torch._check(grad.shape == y.shape, lambda: "grad and y must have the same shape")
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output) -> None:
    _, scale = inputs
    ctx.save_for_backward(output)
    ctx.scale = scale


def _backward(ctx, grad: torch.Tensor):
    (y,) = ctx.saved_tensors
    return _ops.scaled_softmax_backward(grad, y, ctx.scale), None


def _setup_context_bw(ctx, inputs, output) -> None:
    grad, y, scale = inputs
    ctx.save_for_backward(grad, y)
    ctx.scale = scale


def _backward_bw(ctx, ggrad: torch.Tensor):
    # dx = s*y*(g - <g,y>); differentiate w.r.t. g and y (double backward, for gradgradcheck).
    grad, y = ctx.saved_tensors
    s = ctx.scale
    dot = (grad * y).sum(-1, keepdim=True)
    gg_dot_y = (ggrad * y).sum(-1, keepdim=True)
    d_grad = s * y * (ggrad - gg_dot_y)
    d_y = s * ggrad * (grad - dot) - s * grad * (ggrad * y).sum(-1, keepdim=True)
    return d_grad, d_y, None


torch.library.register_autograd(f"{NAMESPACE}::scaled_softmax", _backward, setup_context=_setup_context)
torch.library.register_autograd(
    f"{NAMESPACE}::scaled_softmax_backward", _backward_bw, setup_context=_setup_context_bw
)
