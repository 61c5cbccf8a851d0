// CUDA kernels, LibTorch stable-ABI build: scale on the device, then cuDNN's softmax (accurate,
// instance mode) on torch's current stream, as csrc/cuda.cu does. The stable ABI has no cuDNN handle
// of torch's, so we keep our own (one per device and thread); the current device and stream come from
// torch's C shims. Only libcudnn.so.9 is linked: it is the dispatcher that dlopens the rest.
#ifndef USE_CUDA
#error "the stable-ABI CUDA kernels need USE_CUDA (torch's CUDA shims are declared under it)"
#endif

#include "ops.h"

#include <torch/csrc/inductor/aoti_torch/c/shim.h>  // aoti_torch_get_current_cuda_stream (USE_CUDA)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/macros.h>  // STD_CUDA_KERNEL_LAUNCH_CHECK (torch >= 2.10, USE_CUDA)
#include <torch/csrc/stable/ops.h>

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <unordered_map>

#define CUDNN_CHECK(expr)                                                                     \
  do {                                                                                        \
    cudnnStatus_t status_ = (expr);                                                           \
    STD_TORCH_CHECK(status_ == CUDNN_STATUS_SUCCESS, #expr ": ", cudnnGetErrorString(status_)); \
  } while (0)

namespace ops {
namespace {

using torch::stable::accelerator::DeviceIndex;

// One cuDNN handle per device and thread: handles are not thread-safe, and a handle is tied to the
// device that was current when it was created.
class HandleCache {
 public:
  ~HandleCache() {
    for (auto& [device, handle] : handles_) cudnnDestroy(handle);
  }
  cudnnHandle_t get(DeviceIndex device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cudnnHandle_t handle;
    CUDNN_CHECK(cudnnCreate(&handle));
    handles_.emplace(device, handle);
    return handle;
  }

 private:
  std::unordered_map<DeviceIndex, cudnnHandle_t> handles_;
};

// torch's current CUDA stream on a device (a borrowed cudaStream_t).
cudaStream_t current_stream(DeviceIndex device) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  return static_cast<cudaStream_t>(stream);
}

// Where work goes on the current device (callers hold a DeviceGuard): torch's current stream there,
// and this thread's cuDNN handle for the device, bound to that stream.
struct Context {
  cudnnHandle_t handle;
  cudaStream_t stream;
};

Context current_context() {
  thread_local HandleCache cache;
  const DeviceIndex device = torch::stable::accelerator::getCurrentDeviceIndex();
  const cudaStream_t stream = current_stream(device);
  cudnnHandle_t handle = cache.get(device);
  CUDNN_CHECK(cudnnSetStream(handle, stream));
  return {handle, stream};
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
void launch_scale(const T* in, T* out, T scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  scale_kernel<T><<<blocks, threads, 0, stream>>>(in, out, scale, n);
  STD_CUDA_KERNEL_LAUNCH_CHECK();
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
  STD_TORCH_CHECK(shape.cols <= INT_MAX, "the last dimension (", shape.cols, ") exceeds cuDNN's int limit");
  const int64_t chunk = std::max<int64_t>(1, INT_MAX / std::max<int64_t>(shape.cols, 1));
  TensorDesc desc;
  for (int64_t start = 0; start < shape.rows; start += chunk) {
    desc.set(cudnn_type<T>(), static_cast<int>(std::min(chunk, shape.rows - start)), static_cast<int>(shape.cols));
    f(desc.get(), start * shape.cols);
  }
}

void check_cuda(const Tensor& t, const char* name) {
  check_input(t, name);
  STD_TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
}

}  // namespace

Tensor scaled_softmax_cuda(const Tensor& x, double scale) {
  check_cuda(x, "x");
  const torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
  const Tensor xc = torch::stable::contiguous(x);
  Tensor scaled = torch::stable::empty_like(xc);
  Tensor y = torch::stable::empty_like(xc);
  const Rows shape = as_rows(xc);
  dispatch_floating(xc.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const Context ctx = current_context();
    launch_scale<T>(xc.const_data_ptr<T>(), scaled.mutable_data_ptr<T>(), static_cast<T>(scale), xc.numel(),
                    ctx.stream);
    const T one = 1, nil = 0;
    for_each_row_chunk<T>(shape, [&](cudnnTensorDescriptor_t desc, int64_t off) {
      CUDNN_CHECK(cudnnSoftmaxForward(ctx.handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                      scaled.const_data_ptr<T>() + off, &nil, desc, y.mutable_data_ptr<T>() + off));
    });
  });
  return y;
}

Tensor scaled_softmax_backward_cuda(const Tensor& grad, const Tensor& y, double scale) {
  check_backward_inputs(grad, y);
  STD_TORCH_CHECK(grad.is_cuda() && y.is_cuda(), "grad and y must be CUDA tensors");
  STD_TORCH_CHECK(grad.get_device_index() == y.get_device_index(), "grad and y must be on the same device");
  const torch::stable::accelerator::DeviceGuard guard(y.get_device_index());
  const Tensor gc = torch::stable::contiguous(grad);
  const Tensor yc = torch::stable::contiguous(y);
  Tensor dx = torch::stable::empty_like(yc);
  const Rows shape = as_rows(yc);
  dispatch_floating(yc.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const Context ctx = current_context();
    const T one = 1, nil = 0;
    for_each_row_chunk<T>(shape, [&](cudnnTensorDescriptor_t desc, int64_t off) {
      CUDNN_CHECK(cudnnSoftmaxBackward(ctx.handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                       yc.const_data_ptr<T>() + off, desc, gc.const_data_ptr<T>() + off, &nil, desc,
                                       dx.mutable_data_ptr<T>() + off));
    });
    // cuDNN differentiates softmax(z) at z = scale * x; the chain rule adds the factor scale.
    launch_scale<T>(dx.const_data_ptr<T>(), dx.mutable_data_ptr<T>(), static_cast<T>(scale), dx.numel(),
                    ctx.stream);
  });
  return dx;
}

}  // namespace ops
