// Op schemas and CPU kernels, LibTorch stable-ABI build: the same ops as csrc/ops.cpp, reaching torch
// only through its C shims, so the library imports no C++ symbol of torch and one binary serves every
// torch from the target version (TORCH_TARGET_VERSION) on. Autograd and fake kernels are registered in
// Python (_meta.py), as in the classic build.
#include "ops.h"

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <cmath>

namespace ops {

void check_input(const Tensor& t, const char* name) {
  STD_TORCH_CHECK(t.dim() >= 1, name, " must have at least one dimension");
  const ScalarType type = t.scalar_type();
  STD_TORCH_CHECK(type == ScalarType::Float || type == ScalarType::Double,
                  name, " must be float32 or float64, got ", torch::headeronly::toString(type));
}

void check_backward_inputs(const Tensor& grad, const Tensor& y) {
  check_input(grad, "grad");
  check_input(y, "y");
  STD_TORCH_CHECK(grad.sizes() == y.sizes(), "grad and y must have the same shape");
  STD_TORCH_CHECK(grad.scalar_type() == y.scalar_type(), "grad and y must have the same dtype");
}

Rows as_rows(const Tensor& t) {
  const int64_t cols = t.size(-1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

namespace {

// Rows are independent: softmax runs over the last dimension of a contiguous tensor. parallel_for is
// torch's own (at::parallel_for behind the torch_parallel_for shim, torch >= 2.10).
template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, T scale) {
  torch::stable::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      T max = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) max = std::max(max, xr[c] * scale);
      T sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += (yr[c] = std::exp(xr[c] * scale - max));
      for (int64_t c = 0; c < cols; ++c) yr[c] /= sum;
    }
  });
}

// d/dx softmax(scale*x) . g = scale * y * (g - sum(g*y)).
template <typename T>
void softmax_backward_rows(const T* g, const T* y, T* dx, int64_t rows, int64_t cols, T scale) {
  torch::stable::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* gr = g + r * cols;
      const T* yr = y + r * cols;
      T dot = 0;
      for (int64_t c = 0; c < cols; ++c) dot += gr[c] * yr[c];
      for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = scale * yr[c] * (gr[c] - dot);
    }
  });
}

}  // namespace

Tensor scaled_softmax_cpu(const Tensor& x, double scale) {
  check_input(x, "x");
  STD_TORCH_CHECK(x.is_cpu(), "x must be a CPU tensor");
  const Tensor xc = torch::stable::contiguous(x);
  Tensor y = torch::stable::empty_like(xc);
  const Rows shape = as_rows(xc);
  dispatch_floating(xc.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    softmax_rows<T>(xc.const_data_ptr<T>(), y.mutable_data_ptr<T>(), shape.rows, shape.cols,
                    static_cast<T>(scale));
  });
  return y;
}

Tensor scaled_softmax_backward_cpu(const Tensor& grad, const Tensor& y, double scale) {
  check_backward_inputs(grad, y);
  STD_TORCH_CHECK(grad.is_cpu() && y.is_cpu(), "grad and y must be CPU tensors");
  const Tensor gc = torch::stable::contiguous(grad);
  const Tensor yc = torch::stable::contiguous(y);
  Tensor dx = torch::stable::empty_like(yc);
  const Rows shape = as_rows(yc);
  dispatch_floating(yc.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    softmax_backward_rows<T>(gc.const_data_ptr<T>(), yc.const_data_ptr<T>(), dx.mutable_data_ptr<T>(),
                             shape.rows, shape.cols, static_cast<T>(scale));
  });
  return dx;
}

}  // namespace ops

OPS_LIBRARY(OPS_NAMESPACE, m) {
  m.def("scaled_softmax(Tensor x, float scale) -> Tensor");
  m.def("scaled_softmax_backward(Tensor grad, Tensor y, float scale) -> Tensor");
}

OPS_LIBRARY_IMPL(OPS_NAMESPACE, CPU, m) {
  m.impl("scaled_softmax", TORCH_BOX(&ops::scaled_softmax_cpu));
  m.impl("scaled_softmax_backward", TORCH_BOX(&ops::scaled_softmax_backward_cpu));
}

#ifdef OPS_WITH_CUDA
OPS_LIBRARY_IMPL(OPS_NAMESPACE, CUDA, m) {
  m.impl("scaled_softmax", TORCH_BOX(&ops::scaled_softmax_cuda));
  m.impl("scaled_softmax_backward", TORCH_BOX(&ops::scaled_softmax_backward_cuda));
}
#endif
