// Op schemas and CPU kernels. No Python.h: one library serves Python (torch.ops.load_library)
// and C++ programs (linked with --no-as-needed).
#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

namespace ops {

void check_input(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() >= 1, name, " must have at least one dimension");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
              name, " must be float32 or float64, got ", t.scalar_type());
}

void check_backward_inputs(const at::Tensor& grad, const at::Tensor& y) {
  check_input(grad, "grad");
  check_input(y, "y");
  TORCH_CHECK(grad.sizes() == y.sizes(), "grad and y must have the same shape");
  TORCH_CHECK(grad.scalar_type() == y.scalar_type(), "grad and y must have the same dtype");
}

Rows as_rows(const at::Tensor& t) {
  const int64_t cols = t.size(-1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

namespace {

// Rows are independent: softmax runs over the last dimension of a contiguous tensor.
template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, T scale) {
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
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
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
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

at::Tensor scaled_softmax_cpu(const at::Tensor& x, double scale) {
  check_input(x, "x");
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  auto xc = x.contiguous();
  auto y = at::empty_like(xc);
  const Rows shape = as_rows(xc);
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "scaled_softmax_cpu", [&] {
    softmax_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(), shape.rows,
                           shape.cols, static_cast<scalar_t>(scale));
  });
  return y;
}

at::Tensor scaled_softmax_backward_cpu(const at::Tensor& grad, const at::Tensor& y, double scale) {
  check_backward_inputs(grad, y);
  TORCH_CHECK(grad.device().is_cpu() && y.device().is_cpu(), "grad and y must be CPU tensors");
  auto gc = grad.contiguous();
  auto yc = y.contiguous();
  auto dx = at::empty_like(yc);
  const Rows shape = as_rows(yc);
  AT_DISPATCH_FLOATING_TYPES(yc.scalar_type(), "scaled_softmax_backward_cpu", [&] {
    softmax_backward_rows<scalar_t>(gc.const_data_ptr<scalar_t>(), yc.const_data_ptr<scalar_t>(),
                                    dx.mutable_data_ptr<scalar_t>(), shape.rows, shape.cols,
                                    static_cast<scalar_t>(scale));
  });
  return dx;
}

}  // namespace ops

OPS_LIBRARY(OPS_NAMESPACE, m) {
  m.def("scaled_softmax(Tensor x, float scale) -> Tensor");
  m.def("scaled_softmax_backward(Tensor grad, Tensor y, float scale) -> Tensor");
}

OPS_LIBRARY_IMPL(OPS_NAMESPACE, CPU, m) {
  m.impl("scaled_softmax", &ops::scaled_softmax_cpu);
  m.impl("scaled_softmax_backward", &ops::scaled_softmax_backward_cpu);
}

#ifdef OPS_WITH_CUDA
OPS_LIBRARY_IMPL(OPS_NAMESPACE, CUDA, m) {
  m.impl("scaled_softmax", &ops::scaled_softmax_cuda);
  m.impl("scaled_softmax_backward", &ops::scaled_softmax_backward_cuda);
}
#endif
