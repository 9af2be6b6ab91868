// CUDA side of the float conversions: one grid-stride kernel per pair, each element through
// the same convert_bits.hpp functions the CPU loops use, so both give the same bits.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "convert_bits.hpp"
#include "convert_kernels.hpp"
#include "qload/runtime/cuda_launch.hpp"

namespace qload::formats::detail {
namespace {

struct F32ToBF16 {
  using In = std::uint32_t;
  using Out = std::uint16_t;
  __device__ static Out apply(In x) { return bits::f32_to_bf16(x); }
};
struct F32ToF16 {
  using In = std::uint32_t;
  using Out = std::uint16_t;
  __device__ static Out apply(In x) { return bits::f32_to_f16(x); }
};
struct BF16ToF32 {
  using In = std::uint16_t;
  using Out = std::uint32_t;
  __device__ static Out apply(In x) { return bits::bf16_to_f32(x); }
};
struct F16ToF32 {
  using In = std::uint16_t;
  using Out = std::uint32_t;
  __device__ static Out apply(In x) { return bits::f16_to_f32(x); }
};
// bf16 <-> f16 go through f32, which holds both exactly: still one rounding.
struct F16ToBF16 {
  using In = std::uint16_t;
  using Out = std::uint16_t;
  __device__ static Out apply(In x) { return bits::f32_to_bf16(bits::f16_to_f32(x)); }
};
struct BF16ToF16 {
  using In = std::uint16_t;
  using Out = std::uint16_t;
  __device__ static Out apply(In x) { return bits::f32_to_f16(bits::bf16_to_f32(x)); }
};

// Grid-stride: a grid sized to the device (not to the tensor) covers any count, and
// consecutive threads touch consecutive elements, so a warp's loads and stores coalesce.
template <typename Op>
__global__ void convert_kernel(const typename Op::In* __restrict__ in, typename Op::Out* __restrict__ out,
                               std::uint64_t count) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = Op::apply(in[i]);
}

constexpr unsigned kThreads = 256;

int report(cudaError_t err, const char* what, char* message, std::size_t size) {
  std::snprintf(message, size, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
  return 1;
}

template <typename Op>
cudaError_t launch(const void* in, void* out, std::uint64_t count, int sm_count, cudaStream_t stream) {
  // Enough blocks to fill every SM several times over; more only adds scheduling.
  const std::uint64_t wanted = (count + kThreads - 1) / kThreads;
  const std::uint64_t cap = static_cast<std::uint64_t>(sm_count > 0 ? sm_count : 1) * 16;
  const unsigned blocks = static_cast<unsigned>(wanted < cap ? wanted : cap);
  QLOAD_LAUNCH_KERNEL(convert_kernel<Op>, blocks, kThreads, stream, static_cast<const typename Op::In*>(in),
                      static_cast<typename Op::Out*>(out), count);
  return cudaGetLastError();
}

cudaError_t enqueue(ConvertPair pair, const void* in, void* out, std::uint64_t count, std::size_t element_bytes,
                    int device, cudaStream_t stream) {
  if (pair == ConvertPair::kIdentity)
    return cudaMemcpyAsync(out, in, count * element_bytes, cudaMemcpyDeviceToDevice, stream);
  int sm_count = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  switch (pair) {
    case ConvertPair::kF32ToBF16: return launch<F32ToBF16>(in, out, count, sm_count, stream);
    case ConvertPair::kF32ToF16: return launch<F32ToF16>(in, out, count, sm_count, stream);
    case ConvertPair::kBF16ToF32: return launch<BF16ToF32>(in, out, count, sm_count, stream);
    case ConvertPair::kF16ToF32: return launch<F16ToF32>(in, out, count, sm_count, stream);
    case ConvertPair::kF16ToBF16: return launch<F16ToBF16>(in, out, count, sm_count, stream);
    case ConvertPair::kBF16ToF16: return launch<BF16ToF16>(in, out, count, sm_count, stream);
    case ConvertPair::kIdentity: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int launch_convert(ConvertPair pair, const void* in, void* out, std::uint64_t count, std::size_t element_bytes,
                   int device, void* stream, char* message, std::size_t message_size) {
  // A launch goes to the current device, and a stream only accepts work from its own device.
  // The thread stays on `device` afterwards, as after every CUDA wrapper of qload's: putting
  // "back" a thread that never chose a device would make a context on GPU 0 (cudaGetDevice
  // says 0 there), hundreds of MiB in every process of a multi-GPU server.
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return report(err, "cudaSetDevice", message, message_size);
  err = enqueue(pair, in, out, count, element_bytes, device, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess)
    return report(err, pair == ConvertPair::kIdentity ? "cudaMemcpyAsync" : "conversion kernel launch", message,
                  message_size);
  return 0;
}

}  // namespace qload::formats::detail
