// Declarations shared by the op registration and the device kernels: the LibTorch stable-ABI build.
//
// Everything here goes through torch/csrc/stable and torch/headeronly, which reach torch only via its
// C shim functions (aoti_torch_*, torch_*). Built with -DTORCH_TARGET_VERSION=0x020a000000000000 the
// headers declare only what torch 2.10 has, so one library loads on every torch from 2.10 on.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>

// STABLE_TORCH_LIBRARY pastes and stringifies its namespace argument, so expand OPS_NAMESPACE (set by
// CMake from the package name) through one more macro level first.
#define OPS_LIBRARY(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define OPS_LIBRARY_IMPL(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)

namespace ops {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;

Tensor scaled_softmax_cpu(const Tensor& x, double scale);
Tensor scaled_softmax_backward_cpu(const Tensor& grad, const Tensor& y, double scale);

#ifdef OPS_WITH_CUDA
Tensor scaled_softmax_cuda(const Tensor& x, double scale);
Tensor scaled_softmax_backward_cuda(const Tensor& grad, const Tensor& y, double scale);
#endif

// Checks shared by every backend: a floating tensor (float32/float64) with at least one dimension.
void check_input(const Tensor& t, const char* name);
// The backward's inputs: both valid, with the same shape and dtype.
void check_backward_inputs(const Tensor& grad, const Tensor& y);

// A contiguous tensor seen as rows x cols: softmax runs over each row (the last dimension).
struct Rows {
  int64_t rows;
  int64_t cols;
};
Rows as_rows(const Tensor& t);

// Calls f with a value of the tensor's element type (float or double): what AT_DISPATCH_FLOATING_TYPES
// does in the classic build. check_input has already refused every other dtype.
template <typename F>
void dispatch_floating(ScalarType type, F&& f) {
  switch (type) {
    case ScalarType::Float:
      f(float{});
      break;
    case ScalarType::Double:
      f(double{});
      break;
    default:
      STD_TORCH_CHECK(false, "expected float32 or float64, got ", torch::headeronly::toString(type));
  }
}

}  // namespace ops
