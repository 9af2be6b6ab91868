// CUDA dequantization: one thread per output element (n, k), each computing
// dequantize_element.hpp's arithmetic, which is the CPU decoders' (decoders.hpp) term for term,
// so every finite and infinite output is bit-identical to the CPU's; a NaN output is a NaN on
// both, its payload may differ (GPU arithmetic returns the canonical NaN; docs/formats.md).
//
// Blocks are 32 columns of K by 8 rows of N: a warp writes 32 consecutive output elements
// (one 128-byte line of f32), and the 8 warps of a block read the neighbouring words of the
// packed layouts (which run along N for GPTQ and AWQ GEMM), so those come from L1.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "dequantize_element.hpp"
#include "qload/runtime/cuda_launch.hpp"

namespace qload::formats::detail {
namespace {

constexpr unsigned kBlockCols = 32;
constexpr unsigned kBlockRows = 8;

// Grid-stride in both dimensions: any [N, K] fits a grid sized to the device.
template <typename Scheme>
__global__ void __launch_bounds__(kBlockCols* kBlockRows) dequantize_kernel(const DequantArgs a) {
  for (std::uint64_t n = a.row_begin + static_cast<std::uint64_t>(blockIdx.y) * blockDim.y + threadIdx.y; n < a.row_end;
       n += static_cast<std::uint64_t>(gridDim.y) * blockDim.y)
    for (std::uint64_t k = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < a.cols;
         k += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
      element::store_element(a, (n - a.row_begin) * a.cols + k, Scheme::value(a, n, k));
}

template <typename Scheme>
cudaError_t launch(const DequantArgs& a, int sm_count, cudaStream_t stream) {
  // Enough blocks to fill every SM many times over, spread over both dimensions.
  const std::uint64_t want_x = (a.cols + kBlockCols - 1) / kBlockCols;
  const std::uint64_t want_y = (a.row_end - a.row_begin + kBlockRows - 1) / kBlockRows;
  const std::uint64_t budget = static_cast<std::uint64_t>(sm_count > 0 ? sm_count : 1) * 32;
  const std::uint64_t x = want_x < budget ? want_x : budget;
  std::uint64_t y = budget / x;
  if (y < 1) y = 1;
  if (y > want_y) y = want_y;
  if (y > 65535) y = 65535;
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>(y));
  QLOAD_LAUNCH_KERNEL(dequantize_kernel<Scheme>, grid, dim3(kBlockCols, kBlockRows), stream, a);
  return cudaGetLastError();
}

cudaError_t enqueue(const DequantArgs& a, int device, cudaStream_t stream) {
  int sm_count = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  switch (a.scheme) {
    case DeviceScheme::kGptq: return launch<element::Gptq>(a, sm_count, stream);
    case DeviceScheme::kAwqGemm: return launch<element::AwqGemm>(a, sm_count, stream);
    case DeviceScheme::kAwqGemv: return launch<element::AwqGemv>(a, sm_count, stream);
    case DeviceScheme::kCtPacked: return launch<element::CtPacked>(a, sm_count, stream);
    case DeviceScheme::kCtInt: return launch<element::CtInt>(a, sm_count, stream);
    case DeviceScheme::kFp8: return launch<element::Fp8>(a, sm_count, stream);
    case DeviceScheme::kMxfp4: return launch<element::Mxfp4>(a, sm_count, stream);
    case DeviceScheme::kNvfp4: return launch<element::Nvfp4>(a, sm_count, stream);
    case DeviceScheme::kBnb4: return launch<element::Bnb4>(a, sm_count, stream);
    case DeviceScheme::kBnb8: return launch<element::Bnb8>(a, sm_count, stream);
    case DeviceScheme::kGgml: {
      cudaError_t launched = cudaErrorInvalidValue;  // a type with no decoder (the host checked)
      ggml::with_block_type(a.ggml_type,
                            [&](auto block) { launched = launch<ggml::Scheme<decltype(block)>>(a, sm_count, stream); });
      return launched;
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int launch_dequantize(const DequantArgs& args, int device, void* stream, char* message, std::size_t message_size) {
  if (args.row_begin >= args.row_end || args.cols == 0) return 0;
  // The thread stays on `device` afterwards (see launch_convert).
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = enqueue(args, device, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    std::snprintf(message, message_size, "dequantize kernel launch: %s (%s)", cudaGetErrorString(err),
                  cudaGetErrorName(err));
    return 1;
  }
  return 0;
}

}  // namespace qload::formats::detail
