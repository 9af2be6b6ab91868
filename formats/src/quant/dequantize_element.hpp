// The arithmetic of one dequantized element (n, k), for every scheme, on DequantArgs: what
// the CUDA kernels (dequantize.cu) run per thread. Written once for host and device (like
// convert_bits.hpp) so that a host build can check it against the CPU decoders element for
// element (tests/formats/quant_device_args_test.cpp) on machines without a GPU.
//
// The same arithmetic as decoders.hpp: the code and zero point as exact int32, the scale as
// f32 through convert_bits.hpp, one round-to-nearest f32 multiply (mul_rn: __fmul_rn on the
// device, never contracted), then the bits:: conversion to bf16 / f16.
#pragma once

#include <cstdint>

#include "../convert_bits.hpp"
#include "dequantize_kernels.hpp"
#include "fp8_bits.hpp"

#if defined(__CUDACC__)
#define QLOAD_DEQUANT_HD __host__ __device__ __forceinline__
#else
#define QLOAD_DEQUANT_HD inline
#endif

namespace qload::formats::detail::element {

QLOAD_DEQUANT_HD float as_float(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  float f;
  __builtin_memcpy(&f, &x, sizeof f);
  return f;
#endif
}
QLOAD_DEQUANT_HD std::uint32_t as_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t x;
  __builtin_memcpy(&x, &f, sizeof x);
  return x;
#endif
}
QLOAD_DEQUANT_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

QLOAD_DEQUANT_HD std::uint32_t mask_of(unsigned b) {
  return b >= 32 ? 0xffffffffu : (1u << b) - 1u;
}

// Field `index` of a b-bit LSB-first bitstream whose word j is words[j * stride].
QLOAD_DEQUANT_HD std::uint32_t field(const std::uint32_t* words, std::uint64_t stride, std::uint64_t index,
                                     unsigned b) {
  const std::uint64_t pos = index * b;
  const std::uint64_t word = pos / 32;
  const unsigned shift = static_cast<unsigned>(pos % 32);
  std::uint32_t v = words[word * stride] >> shift;
  if (shift + b > 32) v |= words[(word + 1) * stride] << (32 - shift);
  return v & mask_of(b);
}

// 32/b fields to a word, high bits unused (compressed-tensors' older layout).
QLOAD_DEQUANT_HD std::uint32_t padded_field(const std::uint32_t* words, std::uint64_t stride, std::uint64_t index,
                                            unsigned b) {
  const unsigned per_word = 32 / b;
  return (words[index / per_word * stride] >> (static_cast<unsigned>(index % per_word) * b)) & mask_of(b);
}

QLOAD_DEQUANT_HD float load_float(const void* p, DeviceFloat type, std::uint64_t i) {
  switch (type) {
    case DeviceFloat::kF32: return static_cast<const float*>(p)[i];
    case DeviceFloat::kF16: return as_float(bits::f16_to_f32(static_cast<const std::uint16_t*>(p)[i]));
    case DeviceFloat::kBF16: return as_float(bits::bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]));
  }
  return 0.0f;
}

QLOAD_DEQUANT_HD std::uint64_t group_of(const DequantArgs& a, std::uint64_t k) {
  if (a.g_idx_type == DeviceIndex::kI32)
    return static_cast<std::uint64_t>(static_cast<const std::int32_t*>(a.g_idx)[k]);
  if (a.g_idx_type == DeviceIndex::kI64)
    return static_cast<std::uint64_t>(static_cast<const std::int64_t*>(a.g_idx)[k]);
  return k / a.group_size;
}

QLOAD_DEQUANT_HD float times(float scale, std::int32_t q_minus_z) {
  return mul_rn(scale, static_cast<float>(q_minus_z));
}

// AWQ GEMM's pack order [0,2,4,6,1,3,5,7]: column 8c + j sits in nibble kNibble[j] of word c.
QLOAD_DEQUANT_HD unsigned awq_nibble(std::uint64_t n) {
  constexpr std::uint32_t kNibbles = 0x73625140u;  // nibble j of this constant is kNibble[j]
  return (kNibbles >> (4 * static_cast<unsigned>(n % 8))) & 15u;
}

struct Gptq {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const unsigned b = a.bits;
    const std::uint64_t g = group_of(a, k);
    // Column n of qweight is a bitstream along K: word j of it is qweight[j * N + n].
    const auto q = static_cast<std::int32_t>(field(a.weight + n, a.rows, k, b));
    std::uint32_t z;
    if (a.gptq_v1_word_offset != 0) {  // whole words: b divides 32
      z = ((a.zeros[g * a.zero_words + n * b / 32] + a.gptq_v1_word_offset) >> (n * b % 32)) & mask_of(b);
    } else {
      z = field(a.zeros + g * a.zero_words, 1, n, b);
      if (a.gptq_v1) z = (z + 1) & mask_of(b);
    }
    const float s = load_float(a.scales, a.scale_type, g * a.rows + n);
    return times(s, q - static_cast<std::int32_t>(z));
  }
};

struct AwqGemm {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t g = k / a.group_size;
    const unsigned shift = 4 * awq_nibble(n);
    const auto q = static_cast<std::int32_t>((a.weight[k * a.weight_words + n / 8] >> shift) & 15u);
    const auto z = static_cast<std::int32_t>((a.zeros[g * a.weight_words + n / 8] >> shift) & 15u);
    const float s = load_float(a.scales, a.scale_type, g * a.rows + n);
    return times(s, q - z);
  }
};

struct AwqGemv {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t g = k / a.group_size;
    const auto q = static_cast<std::int32_t>(field(a.weight + n * a.weight_words, 1, k, 4));
    const auto z = static_cast<std::int32_t>(field(a.zeros + n * a.zero_words, 1, g, 4));
    const float s = load_float(a.scales, a.scale_type, n * a.scale_stride + g);
    return times(s, q - z);
  }
};

QLOAD_DEQUANT_HD std::uint64_t ct_scale_index(const DequantArgs& a, std::uint64_t n, std::uint64_t g) {
  switch (a.scale_index) {
    case DeviceScaleIndex::kTensor: return 0;
    case DeviceScaleIndex::kRow: return n;
    default: return n * a.groups + g;
  }
}

struct CtPacked {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
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
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t g = group_of(a, k);
    const std::uint64_t i = ct_scale_index(a, n, g);
    const std::int32_t q = static_cast<std::int8_t>(a.codes[n * a.cols + k]);
    std::int32_t z = 0;
    if (a.int_zeros != nullptr)
      z = a.int_zeros_i8 ? static_cast<const std::int8_t*>(a.int_zeros)[i]
                         : static_cast<const std::int32_t*>(a.int_zeros)[i];
    return times(load_float(a.scales, a.scale_type, i), q - z);
  }
};

QLOAD_DEQUANT_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// E2M1 (FP4) pairs [N, K/2], as gpt-oss's MXFP4 blocks and compressed-tensors' weight_packed
// store them: element k of row n is nibble (k % 2) of byte n * K/2 + k/2, low nibble first.
QLOAD_DEQUANT_HD unsigned e2m1_code(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
  const std::uint8_t pair = a.codes[n * (a.cols / 2) + k / 2];
  return (k % 2) == 0 ? pair & 0xFu : pair >> 4u;
}
// Code c's value times 2 (0, 1, 2, 3, 4, 6, 8, 12: exact small integers); bit 3 is the sign,
// so code 8 is -0 (the OCP spec, transformers' and compressed-tensors' tables).
QLOAD_DEQUANT_HD float e2m1_doubled(unsigned code) {
  constexpr std::uint8_t kMagnitudes[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return as_float(bits::exact_float_bits(kMagnitudes[code & 7u]) | ((code & 8u) << 28));
}

// OCP MXFP4 (gpt-oss; compressed-tensors' mxfp4-pack-quantized): block g = k / 32 of row n has
// exponent scale_codes[n * groups + g]. The value is e2m1 * 2^(e - 127), computed as ggml's
// MXFP4 is (the doubled level times 2^(e - 128)): one rounding of the exact product, as ldexp.
// (ggml's GGUF MXFP4 has +0 at code 8: ggml_element.hpp.)
struct Mxfp4 {
  QLOAD_DEQUANT_HD static float scale(const DequantArgs& a, std::uint64_t n, std::uint64_t g) {
    const std::uint32_t e = a.scale_codes[n * a.groups + g];
    return as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);  // 2^(e - 128), subnormal below e = 2
  }
  QLOAD_DEQUANT_HD static float level(unsigned code) { return e2m1_doubled(code); }
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    return mul_rn(level(e2m1_code(a, n, k)), scale(a, n, k / 32));
  }
};

// compressed-tensors NVFP4: the group's E4M3 scale divided by the global scale, then times the
// E2M1 value, each rounded to f32: compressed-tensors' order (scale / global_scale, then
// x_q * that, in f32).
struct Nvfp4 {
  QLOAD_DEQUANT_HD static float scale(const DequantArgs& a, std::uint64_t n, std::uint64_t g) {
    const float s = as_float(bits::e4m3_to_f32(a.scale_codes[n * a.groups + g]));
    return a.global_multiplies ? mul_rn(s, a.global_scale) : div_rn(s, a.global_scale);
  }
  QLOAD_DEQUANT_HD static float level(unsigned code) { return mul_rn(e2m1_doubled(code), 0.5f); }  // exact
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    return mul_rn(level(e2m1_code(a, n, k)), scale(a, n, k / 16));
  }
};

QLOAD_DEQUANT_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// bitsandbytes 4-bit: blocks run over the flattened [N, K] weight (a block may span rows);
// element i is the high nibble of byte i / 2 when i is even. The double-quantized absmax is
// nested_map[code] * nested_absmax + offset, then the code's value times it, each rounded to f32:
// bitsandbytes' CPU dequantize_4bit, which qload equals bit for bit (python.clients).
struct Bnb4 {
  QLOAD_DEQUANT_HD static float block_absmax(const DequantArgs& a, std::uint64_t block) {
    if (a.nested_block == 0) return a.absmax[block];
    return add_rn(mul_rn(a.nested_map[a.scale_codes[block]], a.nested_absmax[block / a.nested_block]), a.nested_offset);
  }
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint64_t i = n * a.cols + k;
    const std::uint8_t pair = a.codes[i / 2];
    const unsigned code = (i % 2) == 0 ? pair >> 4u : pair & 0xFu;
    return mul_rn(a.code_map[code], block_absmax(a, i / a.group_size));
  }
};

// bitsandbytes 8-bit: (q * SCB[n]) * f32(7.874015718698502e-3), each rounded to f32, in
// int8_vectorwise_dequant's order (its constant is 1/127 as a Python float, applied in f32).
struct Bnb8 {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const auto q = static_cast<float>(static_cast<std::int8_t>(a.codes[n * a.cols + k]));
    return mul_rn(mul_rn(q, a.absmax[n]), static_cast<float>(7.874015718698502e-3));
  }
};

struct Fp8 {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint8_t c = a.codes[n * a.cols + k];
    const float x = as_float(a.code == DeviceCode::kE5M2 ? bits::e5m2_to_f32(c) : bits::e4m3_to_f32(c));
    const float s = load_float(a.scales, a.scale_type, (n / a.rows_per_scale) * a.scale_cols + k / a.cols_per_scale);
    return mul_rn(x, s);
  }
};

QLOAD_DEQUANT_HD void store_element(const DequantArgs& a, std::uint64_t i, float v) {
  const std::uint32_t x = as_bits(v);
  switch (a.out_type) {
    case DeviceFloat::kF32: static_cast<std::uint32_t*>(a.out)[i] = x; break;
    case DeviceFloat::kBF16: static_cast<std::uint16_t*>(a.out)[i] = bits::f32_to_bf16(x); break;
    case DeviceFloat::kF16: static_cast<std::uint16_t*>(a.out)[i] = bits::f32_to_f16(x); break;
  }
}

}  // namespace qload::formats::detail::element

#include "ggml_element.hpp"

namespace qload::formats::detail::element {

// The element by scheme (the kernels dispatch once per launch instead).
inline float dequantize_element(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
  switch (a.scheme) {
    case DeviceScheme::kGptq: return Gptq::value(a, n, k);
    case DeviceScheme::kAwqGemm: return AwqGemm::value(a, n, k);
    case DeviceScheme::kAwqGemv: return AwqGemv::value(a, n, k);
    case DeviceScheme::kCtPacked: return CtPacked::value(a, n, k);
    case DeviceScheme::kCtInt: return CtInt::value(a, n, k);
    case DeviceScheme::kFp8: return Fp8::value(a, n, k);
    case DeviceScheme::kMxfp4: return Mxfp4::value(a, n, k);
    case DeviceScheme::kNvfp4: return Nvfp4::value(a, n, k);
    case DeviceScheme::kBnb4: return Bnb4::value(a, n, k);
    case DeviceScheme::kBnb8: return Bnb8::value(a, n, k);
    case DeviceScheme::kGgml: {
      float v = 0.0f;
      ggml::with_block_type(a.ggml_type, [&](auto block) { v = ggml::Scheme<decltype(block)>::value(a, n, k); });
      return v;
    }
  }
  return 0.0f;
}

}  // namespace qload::formats::detail::element
