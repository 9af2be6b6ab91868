// CUDA dequantization: one thread per output element (n, k), computing exactly what the CPU
// decoders compute (decoders.hpp): the integer code and zero point as exact int32, the scale
// as f32 through the same convert_bits.hpp functions, one round-to-nearest f32 multiply
// (__fmul_rn, never contracted), then the same bits:: conversion to bf16 / f16. Every finite
// and infinite output is therefore bit-identical to the CPU's; a NaN output is a NaN on both,
// its payload may differ (GPU arithmetic returns the canonical NaN; docs/formats.md).
//
// Blocks are 32 columns of K by 8 rows of N: a warp writes 32 consecutive output elements
// (one 128-byte line of f32), and the 8 warps of a block read the neighbouring words of the
// packed layouts (which run along N for GPTQ and AWQ GEMM), so those come from L1.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "../convert_bits.hpp"
#include "dequantize_kernels.hpp"
#include "fp8_bits.hpp"

namespace qload::formats::detail {
namespace {

namespace bits = qload::formats::bits;

__device__ __forceinline__ std::uint32_t mask_of(unsigned b) {
  return b >= 32 ? 0xffffffffu : (1u << b) - 1u;
}

// Field `index` of a b-bit LSB-first bitstream whose word j is words[j * stride].
__device__ __forceinline__ std::uint32_t field(const std::uint32_t* words, std::uint64_t stride, std::uint64_t index,
                                               unsigned b) {
  const std::uint64_t pos = index * b;
  const std::uint64_t word = pos / 32;
  const unsigned shift = static_cast<unsigned>(pos % 32);
  std::uint32_t v = words[word * stride] >> shift;
  if (shift + b > 32) v |= words[(word + 1) * stride] << (32 - shift);
  return v & mask_of(b);
}

// 32/b fields to a word, high bits unused (compressed-tensors' older layout).
__device__ __forceinline__ std::uint32_t padded_field(const std::uint32_t* words, std::uint64_t stride,
                                                      std::uint64_t index, unsigned b) {
  const unsigned per_word = 32 / b;
  return (words[index / per_word * stride] >> (static_cast<unsigned>(index % per_word) * b)) & mask_of(b);
}

__device__ __forceinline__ float load_float(const void* p, DeviceFloat type, std::uint64_t i) {
  switch (type) {
    case DeviceFloat::kF32: return static_cast<const float*>(p)[i];
    case DeviceFloat::kF16: return __uint_as_float(bits::f16_to_f32(static_cast<const std::uint16_t*>(p)[i]));
    case DeviceFloat::kBF16: return __uint_as_float(bits::bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]));
  }
  return 0.0f;
}

__device__ __forceinline__ std::uint64_t group_of(const DequantArgs& a, std::uint64_t k) {
  if (a.g_idx_type == DeviceIndex::kI32) return static_cast<std::uint64_t>(static_cast<const std::int32_t*>(a.g_idx)[k]);
  if (a.g_idx_type == DeviceIndex::kI64) return static_cast<std::uint64_t>(static_cast<const std::int64_t*>(a.g_idx)[k]);
  return k / a.group_size;
}

__device__ __forceinline__ float times(float scale, std::int32_t q_minus_z) {
  return __fmul_rn(scale, static_cast<float>(q_minus_z));
}

// AWQ GEMM's pack order [0,2,4,6,1,3,5,7]: column 8c + j sits in nibble kNibble[j] of word c.
__device__ __forceinline__ unsigned awq_nibble(std::uint64_t n) {
  constexpr std::uint32_t kNibbles = 0x73625140u;  // nibble j of this constant is kNibble[j]
  return (kNibbles >> (4 * static_cast<unsigned>(n % 8))) & 15u;
}

struct Gptq {
  __device__ static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const unsigned b = a.bits;
    const std::uint64_t g = group_of(a, k);
    // Column n of qweight is a bitstream along K: word j of it is qweight[j * N + n].
    const auto q = static_cast<std::int32_t>(field(a.weight + n, a.rows, k, b));
    std::uint32_t z = field(a.zeros + g * a.zero_words, 1, n, b);
    if (a.gptq_v1) z = (z + 1) & mask_of(b);
    const float s = load_float(a.scales, a.scale_type, g * a.rows + n);
    return times(s, q - static_cast<std::int32_t>(z));
  }
};

struct AwqGemm {
  __device__ static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t g = k / a.group_size;
    const unsigned shift = 4 * awq_nibble(n);
    const auto q = static_cast<std::int32_t>((a.weight[k * a.weight_words + n / 8] >> shift) & 15u);
    const auto z = static_cast<std::int32_t>((a.zeros[g * a.weight_words + n / 8] >> shift) & 15u);
    const float s = load_float(a.scales, a.scale_type, g * a.rows + n);
    return times(s, q - z);
  }
};

struct AwqGemv {
  __device__ static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t g = k / a.group_size;
    const auto q = static_cast<std::int32_t>(field(a.weight + n * a.weight_words, 1, k, 4));
    const auto z = static_cast<std::int32_t>(field(a.zeros + n * a.zero_words, 1, g, 4));
    const float s = load_float(a.scales, a.scale_type, n * a.scale_stride + g);
    return times(s, q - z);
  }
};

__device__ __forceinline__ std::uint64_t ct_scale_index(const DequantArgs& a, std::uint64_t n, std::uint64_t g) {
  switch (a.scale_index) {
    case DeviceScaleIndex::kTensor: return 0;
    case DeviceScaleIndex::kRow: return n;
    default: return n * a.groups + g;
  }
}

struct CtPacked {
  __device__ static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const unsigned b = a.bits;
    const std::uint64_t g = group_of(a, k);
    const std::uint32_t* row = a.weight + n * a.weight_words;
    const auto q = static_cast<std::int32_t>(a.dense ? field(row, 1, k, b) : padded_field(row, 1, k, b));
    // Both codes are offset binary: without stored zero points the zero is the offset.
    std::int32_t z = static_cast<std::int32_t>(1u << (b - 1));
    if (a.zeros != nullptr) {
      const std::uint32_t* column = a.zeros + g;  // column g of [zrows, groups], along N
      z = static_cast<std::int32_t>(a.dense ? field(column, a.groups, n, b) : padded_field(column, a.groups, n, b));
    }
    return times(load_float(a.scales, a.scale_type, ct_scale_index(a, n, g)), q - z);
  }
};

struct CtInt {
  __device__ static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t g = group_of(a, k);
    const std::uint64_t i = ct_scale_index(a, n, g);
    const std::int32_t q = static_cast<std::int8_t>(a.codes[n * a.cols + k]);
    std::int32_t z = 0;
    if (a.int_zeros != nullptr)
      z = a.int_zeros_i8 ? static_cast<const std::int8_t*>(a.int_zeros)[i] : static_cast<const std::int32_t*>(a.int_zeros)[i];
    return times(load_float(a.scales, a.scale_type, i), q - z);
  }
};

struct Fp8 {
  __device__ static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint8_t c = a.codes[n * a.cols + k];
    const float x = __uint_as_float(a.code == DeviceCode::kE5M2 ? bits::e5m2_to_f32(c) : bits::e4m3_to_f32(c));
    const float s = load_float(a.scales, a.scale_type, (n / a.rows_per_scale) * a.scale_cols + k / a.cols_per_scale);
    return __fmul_rn(x, s);
  }
};

__device__ __forceinline__ void store(const DequantArgs& a, std::uint64_t i, float v) {
  const std::uint32_t x = __float_as_uint(v);
  switch (a.out_type) {
    case DeviceFloat::kF32: static_cast<std::uint32_t*>(a.out)[i] = x; break;
    case DeviceFloat::kBF16: static_cast<std::uint16_t*>(a.out)[i] = bits::f32_to_bf16(x); break;
    case DeviceFloat::kF16: static_cast<std::uint16_t*>(a.out)[i] = bits::f32_to_f16(x); break;
  }
}

constexpr unsigned kBlockCols = 32;
constexpr unsigned kBlockRows = 8;

// Grid-stride in both dimensions: any [N, K] fits a grid sized to the device.
template <typename Scheme>
__global__ void __launch_bounds__(kBlockCols* kBlockRows) dequantize_kernel(const DequantArgs a) {
  for (std::uint64_t n = a.row_begin + static_cast<std::uint64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
       n < a.row_end; n += static_cast<std::uint64_t>(gridDim.y) * blockDim.y)
    for (std::uint64_t k = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < a.cols;
         k += static_cast<std::uint64_t>(gridDim.x) * blockDim.x)
      store(a, (n - a.row_begin) * a.cols + k, Scheme::value(a, n, k));
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
  dequantize_kernel<Scheme><<<grid, dim3(kBlockCols, kBlockRows), 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t enqueue(const DequantArgs& a, int device, cudaStream_t stream) {
  int sm_count = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  switch (a.scheme) {
    case DeviceScheme::kGptq: return launch<Gptq>(a, sm_count, stream);
    case DeviceScheme::kAwqGemm: return launch<AwqGemm>(a, sm_count, stream);
    case DeviceScheme::kAwqGemv: return launch<AwqGemv>(a, sm_count, stream);
    case DeviceScheme::kCtPacked: return launch<CtPacked>(a, sm_count, stream);
    case DeviceScheme::kCtInt: return launch<CtInt>(a, sm_count, stream);
    case DeviceScheme::kFp8: return launch<Fp8>(a, sm_count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int launch_dequantize(const DequantArgs& args, int device, void* stream, char* message, std::size_t message_size) {
  if (args.row_begin >= args.row_end || args.cols == 0) return 0;
  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err == cudaSuccess && previous != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = enqueue(args, device, static_cast<cudaStream_t>(stream));
  if (previous != device) (void)cudaSetDevice(previous);
  if (err != cudaSuccess) {
    std::snprintf(message, message_size, "dequantize kernel launch: %s (%s)", cudaGetErrorString(err),
                  cudaGetErrorName(err));
    return 1;
  }
  return 0;
}

}  // namespace qload::formats::detail
