// Declarations shared by the op registration and the device kernels.
#pragma once

#include <ATen/core/Tensor.h>

// TORCH_LIBRARY stringifies its namespace argument, so expand OPS_NAMESPACE (set by CMake from the
// package name) through one more macro level first.
#define OPS_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define OPS_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace ops {

at::Tensor scaled_softmax_cpu(const at::Tensor& x, double scale);
at::Tensor scaled_softmax_backward_cpu(const at::Tensor& grad, const at::Tensor& y, double scale);

#ifdef OPS_WITH_CUDA
at::Tensor scaled_softmax_cuda(const at::Tensor& x, double scale);
at::Tensor scaled_softmax_backward_cuda(const at::Tensor& grad, const at::Tensor& y, double scale);
#endif

// Checks shared by every backend: a floating tensor (float32/float64) with at least one dimension.
void check_input(const at::Tensor& t, const char* name);
// The backward's inputs: both valid, with the same shape and dtype.
void check_backward_inputs(const at::Tensor& grad, const at::Tensor& y);

// A contiguous tensor seen as rows x cols: softmax runs over each row (the last dimension).
struct Rows {
  int64_t rows;
  int64_t cols;
};
Rows as_rows(const at::Tensor& t);

}  // namespace ops
