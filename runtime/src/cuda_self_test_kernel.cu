#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "cuda_self_test_kernel.hpp"
#include "qload/runtime/cuda_launch.hpp"

namespace qload::detail {
namespace {

__global__ void fill_pattern(unsigned* out, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 2654435761u;  // Knuth's multiplicative hash: every slot differs
}

int report(cudaError_t err, const char* what, char* message, std::size_t size) {
  std::snprintf(message, size, "%s: %s", what, cudaGetErrorString(err));
  return 1;
}

}  // namespace

int run_cuda_self_test_kernel(int device, char* message, std::size_t message_size) {
  constexpr unsigned kCount = 1u << 20;
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return report(err, "cudaSetDevice", message, message_size);
  unsigned* dev = nullptr;
  err = cudaMalloc(&dev, kCount * sizeof(unsigned));
  if (err != cudaSuccess) return report(err, "cudaMalloc", message, message_size);
  QLOAD_LAUNCH_KERNEL(fill_pattern, (kCount + 255) / 256, 256, nullptr, dev, kCount);
  err = cudaGetLastError();
  std::vector<unsigned> host(kCount);
  if (err == cudaSuccess) err = cudaMemcpy(host.data(), dev, kCount * sizeof(unsigned), cudaMemcpyDeviceToHost);
  cudaFree(dev);
  if (err != cudaSuccess) return report(err, "kernel or copy", message, message_size);
  for (unsigned i = 0; i < kCount; ++i) {
    if (host[i] != i * 2654435761u) {
      std::snprintf(message, message_size, "element %u is %u, expected %u", i, host[i], i * 2654435761u);
      return 1;
    }
  }
  return 0;
}

}  // namespace qload::detail
