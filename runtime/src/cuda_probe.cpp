// Built when CUDA is compiled in. Host-side only: talks to cudart, no device code.
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "cuda_self_test_kernel.hpp"
#include "qload/runtime/cuda.hpp"

namespace qload {

CudaInfo probe_cuda() {
  CudaInfo info;
  info.compiled = true;
  info.runtime_version = CUDART_VERSION;
  (void)cudaDriverGetVersion(&info.driver_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    info.unavailable_reason =
        fmt::format("no usable CUDA device: {} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
    (void)cudaGetLastError();  // clear it so later CUDA calls start clean
    return info;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    info.devices.push_back(CudaDevice{i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  if (info.devices.empty()) info.unavailable_reason = "the CUDA driver reports no devices";
  return info;
}

Status cuda_self_test(int device) {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) return fail(Errc::kUnsupported, info.unavailable_reason);
  char message[256] = {};
  if (detail::run_cuda_self_test_kernel(device, message, sizeof message) != 0)
    return fail(Errc::kDevice, fmt::format("cuda:{} self-test: {}", device, message));
  return {};
}

}  // namespace qload
