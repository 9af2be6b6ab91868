// One element of a GGML block (llama.cpp's quantized tensor types, as GGUF stores them): the
// arithmetic of ggml-quants.c's dequantize_row_* and of gguf-py's quants.py, written once for
// the CPU decoder (ggml.cpp) and the CUDA kernel (dequantize.cu).
//
// Every type is a struct with kId (ggml_type), kElems and kBytes (one block), and
// value(block, i): element i of the block at `block`. The f32 operations are those of the
// references in the same order (scale products first, then one multiply, and an add or
// subtract of the minimum for the "_1" and K types), each rounded to nearest (mul_rn/add_rn,
// never contracted into an FMA), so the CPU, the GPU and gguf-py agree bit for bit.
// Layouts: ggml-common.h; the element order within a block is gguf-py's.
//
// Part of dequantize_element.hpp, which includes it after the helpers it uses: include that.
#pragma once

#include <cstdint>

namespace qload::formats::detail::ggml {

using element::add_rn;
using element::as_float;
using element::mul_rn;
QLOAD_DEQUANT_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

QLOAD_DEQUANT_HD float half_at(const std::uint8_t* p) {
  return as_float(bits::f16_to_f32(static_cast<std::uint16_t>(p[0] | (p[1] << 8))));
}
QLOAD_DEQUANT_HD std::uint32_t u32_at(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
QLOAD_DEQUANT_HD float f32_of(std::int32_t q) {
  return static_cast<float>(q);  // |q| < 2^24: exact
}
// The low (i < half) or high nibble of byte i % half: the "_0"/"_1" and IQ4 order.
QLOAD_DEQUANT_HD std::int32_t nibble(const std::uint8_t* qs, unsigned i, unsigned half) {
  return (qs[i % half] >> (i < half ? 0 : 4)) & 0xF;
}
// 2-bit field of the Q2_K / Q3_K / TQ2_0 layout: 128 elements per 32 bytes, 4 shifts.
QLOAD_DEQUANT_HD std::int32_t crumb(const std::uint8_t* qs, unsigned i) {
  const unsigned r = i % 128;
  return (qs[(i / 128) * 32 + r % 32] >> (2 * (r / 32))) & 3;
}

// IQ4_NL's non-linear levels; MXFP4's and NVFP4's E2M1 levels times two (the scale is halved).
QLOAD_DEQUANT_HD std::int32_t iq4_level(std::int32_t q) {
  constexpr std::int8_t kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return kLevels[q];
}
QLOAD_DEQUANT_HD std::int32_t e2m1_level(std::int32_t q) {
  constexpr std::int8_t kLevels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return kLevels[q];
}

// K-quants' 6-bit scale (j < 8) and minimum (j >= 8 reads minimum j - 8) of sub-block j,
// packed into 12 bytes (ggml's get_scale_min_k4).
QLOAD_DEQUANT_HD std::int32_t k4_scale(const std::uint8_t* q, unsigned j) {
  return j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
}
QLOAD_DEQUANT_HD std::int32_t k4_min(const std::uint8_t* q, unsigned j) {
  return j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
}

struct Q4_0 {  // d f16, 16 bytes of nibbles; x = d * (q - 8)
  static constexpr std::uint32_t kId = 2, kElems = 32, kBytes = 18;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(half_at(b), f32_of(nibble(b + 2, i, 16) - 8));
  }
};
struct Q4_1 {  // d, m f16, nibbles; x = d * q + m
  static constexpr std::uint32_t kId = 3, kElems = 32, kBytes = 20;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return add_rn(mul_rn(half_at(b), f32_of(nibble(b + 4, i, 16))), half_at(b + 2));
  }
};
QLOAD_DEQUANT_HD std::int32_t q5(const std::uint8_t* qh, const std::uint8_t* qs, unsigned i) {
  return nibble(qs, i, 16) | static_cast<std::int32_t>(((u32_at(qh) >> i) & 1u) << 4);
}
struct Q5_0 {  // d f16, 32 high bits, nibbles; x = d * (q - 16)
  static constexpr std::uint32_t kId = 6, kElems = 32, kBytes = 22;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(half_at(b), f32_of(q5(b + 2, b + 6, i) - 16));
  }
};
struct Q5_1 {  // d, m f16, 32 high bits, nibbles; x = d * q + m
  static constexpr std::uint32_t kId = 7, kElems = 32, kBytes = 24;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return add_rn(mul_rn(half_at(b), f32_of(q5(b + 4, b + 8, i))), half_at(b + 2));
  }
};
struct Q8_0 {  // d f16, 32 int8; x = d * q
  static constexpr std::uint32_t kId = 8, kElems = 32, kBytes = 34;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(half_at(b), f32_of(static_cast<std::int8_t>(b[2 + i])));
  }
};
struct Q8_1 {  // d, s (= d * sum q) f16, 32 int8; x = d * q
  static constexpr std::uint32_t kId = 9, kElems = 32, kBytes = 36;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(half_at(b), f32_of(static_cast<std::int8_t>(b[4 + i])));
  }
};
// The K-quants (and IQ4_XS) scale each sub-block of kSub elements by products of the block's
// f16 scale and the sub-block's small integer scale: scale(b, j) computes sub-block j's once,
// value(scale, b, i) an element of it, and value(b, i) both (what the kernel runs per element;
// the CPU decoder calls scale() once per sub-block). The same f32 operations either way.
struct Q2_K {  // 16 scale|min nibbles, 64 bytes of 2-bit q, d, dmin f16; x = (d*sc) * q - dmin*m
  static constexpr std::uint32_t kId = 10, kElems = 256, kBytes = 84, kSub = 16;
  struct Scale {
    float dl, ml;
  };
  QLOAD_DEQUANT_HD static Scale scale(const std::uint8_t* b, unsigned j) {
    const std::uint8_t sc = b[j];
    return {mul_rn(half_at(b + 80), f32_of(sc & 0xF)), mul_rn(half_at(b + 82), f32_of(sc >> 4))};
  }
  QLOAD_DEQUANT_HD static float value(const Scale& s, const std::uint8_t* b, unsigned i) {
    return sub_rn(mul_rn(s.dl, f32_of(crumb(b + 16, i))), s.ml);
  }
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) { return value(scale(b, i / kSub), b, i); }
};
struct Q3_K {  // 32 bytes high-bit mask, 64 bytes 2-bit q, 12 bytes 6-bit scales, d f16
  static constexpr std::uint32_t kId = 11, kElems = 256, kBytes = 110, kSub = 16;
  struct Scale {
    float dl;
  };
  // Sub-block j's signed 6-bit scale (low nibbles in bytes 96..103, high crumbs in 104..107).
  QLOAD_DEQUANT_HD static std::int32_t scale_code(const std::uint8_t* b, unsigned j) {
    const std::uint8_t* scales = b + 96;
    const std::int32_t low = (scales[j % 8] >> (j < 8 ? 0 : 4)) & 0xF;
    const std::int32_t high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
  }
  QLOAD_DEQUANT_HD static Scale scale(const std::uint8_t* b, unsigned j) {
    return {mul_rn(half_at(b + 108), f32_of(scale_code(b, j)))};
  }
  QLOAD_DEQUANT_HD static float value(const Scale& s, const std::uint8_t* b, unsigned i) {
    // The high bit subtracts 4 when it is clear.
    const std::int32_t h = (b[i % 32] >> (i / 32)) & 1;
    return mul_rn(s.dl, f32_of(crumb(b + 32, i) - ((h ^ 1) << 2)));
  }
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) { return value(scale(b, i / kSub), b, i); }
};
// Q4_K/Q5_K's low 4 bits: 64 elements per 32 bytes, low nibbles first.
QLOAD_DEQUANT_HD std::int32_t k_nibble(const std::uint8_t* qs, unsigned i) {
  return (qs[(i / 64) * 32 + i % 32] >> (((i / 32) % 2) * 4)) & 0xF;
}
struct K4Scale {  // Q4_K/Q5_K sub-block j: d * sc_j and dmin * m_j
  float d, dm;
};
// d and dmin: the block's two f16 scales, widened.
QLOAD_DEQUANT_HD K4Scale k4_scale_of(const std::uint8_t* b, unsigned j, float d, float dmin) {
  return {mul_rn(d, f32_of(k4_scale(b + 4, j))), mul_rn(dmin, f32_of(k4_min(b + 4, j)))};
}
QLOAD_DEQUANT_HD K4Scale k4_scale_of(const std::uint8_t* b, unsigned j) {
  return k4_scale_of(b, j, half_at(b), half_at(b + 2));
}
struct Q4_K {  // d, dmin f16, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
  static constexpr std::uint32_t kId = 12, kElems = 256, kBytes = 144, kSub = 32;
  using Scale = K4Scale;
  QLOAD_DEQUANT_HD static Scale scale(const std::uint8_t* b, unsigned j) { return k4_scale_of(b, j); }
  QLOAD_DEQUANT_HD static float value(const Scale& s, const std::uint8_t* b, unsigned i) {
    return sub_rn(mul_rn(s.d, f32_of(k_nibble(b + 16, i))), s.dm);
  }
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) { return value(scale(b, i / kSub), b, i); }
};
struct Q5_K {  // as Q4_K, with 32 bytes of fifth bits before the nibbles
  static constexpr std::uint32_t kId = 13, kElems = 256, kBytes = 176, kSub = 32;
  using Scale = K4Scale;
  QLOAD_DEQUANT_HD static Scale scale(const std::uint8_t* b, unsigned j) { return k4_scale_of(b, j); }
  QLOAD_DEQUANT_HD static float value(const Scale& s, const std::uint8_t* b, unsigned i) {
    const std::int32_t h = (b[16 + i % 32] >> (i / 32)) & 1;
    return sub_rn(mul_rn(s.d, f32_of(k_nibble(b + 48, i) | (h << 4))), s.dm);
  }
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) { return value(scale(b, i / kSub), b, i); }
};
struct Q6_K {  // 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, d f16
  static constexpr std::uint32_t kId = 14, kElems = 256, kBytes = 210, kSub = 16;
  struct Scale {
    float d;
  };
  QLOAD_DEQUANT_HD static Scale scale(const std::uint8_t* b, unsigned j) {
    return {mul_rn(half_at(b + 208), f32_of(static_cast<std::int8_t>(b[192 + j])))};
  }
  QLOAD_DEQUANT_HD static float value(const Scale& s, const std::uint8_t* b, unsigned i) {
    const unsigned half = i / 128, r = i % 128;
    const std::int32_t low = (b[half * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
    const std::int32_t high = crumb(b + 128, i);
    return mul_rn(s.d, f32_of((low | (high << 4)) - 32));
  }
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) { return value(scale(b, i / kSub), b, i); }
};
struct Q8_K {  // d f32, 256 int8, 16 int16 block sums; x = d * q
  static constexpr std::uint32_t kId = 15, kElems = 256, kBytes = 292;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(as_float(u32_at(b)), f32_of(static_cast<std::int8_t>(b[4 + i])));
  }
};
struct IQ4_NL {  // d f16, nibbles indexing iq4_level
  static constexpr std::uint32_t kId = 20, kElems = 32, kBytes = 18;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(half_at(b), f32_of(iq4_level(nibble(b + 2, i, 16))));
  }
};
struct IQ4_XS {  // d f16, u16 high scale bits, 4 bytes low scale nibbles, 128 bytes of nibbles
  static constexpr std::uint32_t kId = 23, kElems = 256, kBytes = 136, kSub = 32;
  struct Scale {
    float dl;
  };
  QLOAD_DEQUANT_HD static std::int32_t scale_code(const std::uint8_t* b, unsigned j) {
    const std::int32_t low = (b[4 + j / 2] >> (4 * (j % 2))) & 0xF;
    const std::int32_t high = ((b[2] | (b[3] << 8)) >> (2 * j)) & 3;
    return (low | (high << 4)) - 32;
  }
  QLOAD_DEQUANT_HD static Scale scale(const std::uint8_t* b, unsigned j) {
    return {mul_rn(half_at(b), f32_of(scale_code(b, j)))};
  }
  QLOAD_DEQUANT_HD static float value(const Scale& s, const std::uint8_t* b, unsigned i) {
    return mul_rn(s.dl, f32_of(iq4_level(nibble(b + 8 + (i / 32) * 16, i % 32, 16))));
  }
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) { return value(scale(b, i / kSub), b, i); }
};
struct TQ1_0 {  // 48 + 4 bytes of base-3 digits (5 and 4 a byte, fixed point), d f16
  static constexpr std::uint32_t kId = 34, kElems = 256, kBytes = 54;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    constexpr std::uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    unsigned byte, digit;
    if (i < 160) {
      byte = i % 32, digit = i / 32;
    } else if (i < 240) {
      byte = 32 + (i - 160) % 16, digit = (i - 160) / 16;
    } else {
      byte = 48 + (i - 240) % 4, digit = (i - 240) / 4;
    }
    const unsigned x = static_cast<std::uint8_t>(b[byte] * kPow3[digit]);  // wraps: the digit moves to the top
    return mul_rn(half_at(b + 52), f32_of(static_cast<std::int32_t>((x * 3) >> 8) - 1));
  }
};
struct TQ2_0 {  // 64 bytes of 2-bit codes (q - 1 is -1, 0 or 1), d f16
  static constexpr std::uint32_t kId = 35, kElems = 256, kBytes = 66;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    return mul_rn(half_at(b + 64), f32_of(crumb(b, i) - 1));
  }
};
struct MXFP4 {  // E8M0 shared exponent, 16 bytes of E2M1 nibbles (OCP MX)
  static constexpr std::uint32_t kId = 39, kElems = 32, kBytes = 17;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    // 2^(e - 127) halved (the levels are doubled), as ggml_e8m0_to_fp32_half: e < 2 is subnormal.
    const std::uint32_t e = b[0];
    const float d = as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    return mul_rn(d, f32_of(e2m1_level(nibble(b + 1, i, 16))));
  }
};
struct NVFP4 {  // 4 unsigned E4M3 scales (one per 16), 32 bytes of E2M1 nibbles
  static constexpr std::uint32_t kId = 40, kElems = 64, kBytes = 36;
  QLOAD_DEQUANT_HD static float value(const std::uint8_t* b, unsigned i) {
    const unsigned s = i / 16, r = i % 16;
    const std::uint32_t x = b[s];
    const std::uint32_t exp = (x >> 3) & 0xF, man = x & 7;
    // UE4M3 halved, exactly: m * 2^-10 (subnormal) or (8 + m) * 2^(exp - 11); 0x7F (NaN) is 0.
    float d = exp == 0 ? mul_rn(f32_of(static_cast<std::int32_t>(man)), as_float(117u << 23))
                       : mul_rn(f32_of(static_cast<std::int32_t>(8 + man)), as_float((exp + 116u) << 23));
    if (x == 0x7F) d = 0.0f;
    const std::uint8_t q = b[4 + s * 8 + r % 8];
    return mul_rn(d, f32_of(e2m1_level(r < 8 ? q & 0xF : q >> 4)));
  }
};

// Calls f(T{}) with the block type of `id` and returns true, or returns false for a type with
// no decoder here (the IQ1/IQ2/IQ3 grids, Q1_0, and the plain types). Host only: kernels are
// instantiated per type.
template <typename F>
bool with_block_type(std::uint32_t id, F&& f) {
  switch (id) {
    case Q4_0::kId: f(Q4_0{}); return true;
    case Q4_1::kId: f(Q4_1{}); return true;
    case Q5_0::kId: f(Q5_0{}); return true;
    case Q5_1::kId: f(Q5_1{}); return true;
    case Q8_0::kId: f(Q8_0{}); return true;
    case Q8_1::kId: f(Q8_1{}); return true;
    case Q2_K::kId: f(Q2_K{}); return true;
    case Q3_K::kId: f(Q3_K{}); return true;
    case Q4_K::kId: f(Q4_K{}); return true;
    case Q5_K::kId: f(Q5_K{}); return true;
    case Q6_K::kId: f(Q6_K{}); return true;
    case Q8_K::kId: f(Q8_K{}); return true;
    case IQ4_NL::kId: f(IQ4_NL{}); return true;
    case IQ4_XS::kId: f(IQ4_XS{}); return true;
    case TQ1_0::kId: f(TQ1_0{}); return true;
    case TQ2_0::kId: f(TQ2_0{}); return true;
    case MXFP4::kId: f(MXFP4{}); return true;
    case NVFP4::kId: f(NVFP4{}); return true;
    default: return false;
  }
}

// The kernel's scheme (dequantize_element.hpp's interface): element (n, k) of a weight whose
// rows are `row_bytes` bytes of blocks.
template <typename T>
struct Scheme {
  QLOAD_DEQUANT_HD static float value(const DequantArgs& a, std::uint64_t n, std::uint64_t k) {
    const std::uint8_t* block = a.codes + n * a.row_bytes + (k / T::kElems) * T::kBytes;
    return T::value(block, static_cast<unsigned>(k % T::kElems));
  }
};

}  // namespace qload::formats::detail::ggml
