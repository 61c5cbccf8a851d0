// CUDA kernels: scale on the device, then cuDNN's softmax (accurate, instance mode) on torch's
// current stream. Only libcudnn.so.9 is linked: it is the dispatcher that dlopens the rest.
#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <unordered_map>

#define CUDNN_CHECK(expr)                                                              \
  do {                                                                                 \
    cudnnStatus_t status_ = (expr);                                                    \
    TORCH_CHECK(status_ == CUDNN_STATUS_SUCCESS, #expr ": ", cudnnGetErrorString(status_)); \
  } while (0)

namespace ops {
namespace {

// One cuDNN handle per device and thread: handles are not thread-safe, and a handle is tied to the
// device that was current when it was created.
class HandleCache {
 public:
  ~HandleCache() {
    for (auto& [device, handle] : handles_) cudnnDestroy(handle);
  }
  cudnnHandle_t get(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cudnnHandle_t handle;
    CUDNN_CHECK(cudnnCreate(&handle));
    handles_.emplace(device, handle);
    return handle;
  }

 private:
  std::unordered_map<int, cudnnHandle_t> handles_;
};

cudnnHandle_t current_handle() {
  thread_local HandleCache cache;
  cudnnHandle_t handle = cache.get(c10::cuda::current_device());
  CUDNN_CHECK(cudnnSetStream(handle, at::cuda::getCurrentCUDAStream()));
  return handle;
}

class TensorDesc {
 public:
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(desc_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // rows x cols as N x C x 1 x 1: instance mode normalizes over C for every n.
  void set(cudnnDataType_t type, int rows, int cols) {
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, type, rows, cols, 1, 1));
  }
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_;
};

template <typename T>
__global__ void scale_kernel(const T* in, T* out, T scale, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = in[i] * scale;
  }
}

template <typename T>
void launch_scale(const T* in, T* out, T scale, int64_t n) {
  if (n == 0) return;
  constexpr int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  scale_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(in, out, scale, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
cudnnDataType_t cudnn_type();
template <>
cudnnDataType_t cudnn_type<float>() { return CUDNN_DATA_FLOAT; }
template <>
cudnnDataType_t cudnn_type<double>() { return CUDNN_DATA_DOUBLE; }

// cuDNN takes int dimensions and int element counts: the row length must fit in an int, and rows
// are processed in chunks whose element count fits in an int. Calls f(desc, offset) per chunk, desc
// describing its rows x cols (what instance mode normalizes per row), offset its first element.
template <typename T, typename F>
void for_each_row_chunk(const Rows& shape, F&& f) {
  TORCH_CHECK(shape.cols <= INT_MAX, "the last dimension (", shape.cols, ") exceeds cuDNN's int limit");
  const int64_t chunk = std::max<int64_t>(1, INT_MAX / std::max<int64_t>(shape.cols, 1));
  TensorDesc desc;
  for (int64_t start = 0; start < shape.rows; start += chunk) {
    desc.set(cudnn_type<T>(), static_cast<int>(std::min(chunk, shape.rows - start)), static_cast<int>(shape.cols));
    f(desc.get(), start * shape.cols);
  }
}

void check_cuda(const at::Tensor& t, const char* name) {
  check_input(t, name);
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
}

}  // namespace

at::Tensor scaled_softmax_cuda(const at::Tensor& x, double scale) {
  check_cuda(x, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto scaled = at::empty_like(xc);
  auto y = at::empty_like(xc);
  const Rows shape = as_rows(xc);
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "scaled_softmax_cuda", [&] {
    launch_scale<scalar_t>(xc.const_data_ptr<scalar_t>(), scaled.mutable_data_ptr<scalar_t>(),
                           static_cast<scalar_t>(scale), xc.numel());
    cudnnHandle_t handle = current_handle();
    const scalar_t one = 1, zero = 0;
    for_each_row_chunk<scalar_t>(shape, [&](cudnnTensorDescriptor_t desc, int64_t off) {
      CUDNN_CHECK(cudnnSoftmaxForward(handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                      scaled.const_data_ptr<scalar_t>() + off, &zero, desc,
                                      y.mutable_data_ptr<scalar_t>() + off));
    });
  });
  return y;
}

at::Tensor scaled_softmax_backward_cuda(const at::Tensor& grad, const at::Tensor& y, double scale) {
  check_backward_inputs(grad, y);
  TORCH_CHECK(grad.is_cuda() && y.is_cuda(), "grad and y must be CUDA tensors");
  const c10::cuda::CUDAGuard guard(y.device());
  auto gc = grad.contiguous();
  auto yc = y.contiguous();
  auto dx = at::empty_like(yc);
  const Rows shape = as_rows(yc);
  AT_DISPATCH_FLOATING_TYPES(yc.scalar_type(), "scaled_softmax_backward_cuda", [&] {
    cudnnHandle_t handle = current_handle();
    const scalar_t one = 1, zero = 0;
    for_each_row_chunk<scalar_t>(shape, [&](cudnnTensorDescriptor_t desc, int64_t off) {
      CUDNN_CHECK(cudnnSoftmaxBackward(handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                       yc.const_data_ptr<scalar_t>() + off, desc,
                                       gc.const_data_ptr<scalar_t>() + off, &zero, desc,
                                       dx.mutable_data_ptr<scalar_t>() + off));
    });
    // cuDNN differentiates softmax(z) at z = scale * x; the chain rule adds the factor scale.
    launch_scale<scalar_t>(dx.const_data_ptr<scalar_t>(), dx.mutable_data_ptr<scalar_t>(),
                           static_cast<scalar_t>(scale), dx.numel());
  });
  return dx;
}

}  // namespace ops
