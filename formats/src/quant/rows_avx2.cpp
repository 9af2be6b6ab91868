// The GGML block decoders, and OCP MXFP4's and NVFP4's, written for AVX2 (ggml-quants.c's AVX2
// loops are the model): a block's codes are assembled 32 bytes at a time with byte shuffles and
// masks (rows_x86.inc, shared with rows_avx512.cpp), widened 8 to a vector, scaled, and written
// straight in the output's dtype, so a BF16 or F16 output costs no second pass over an f32 slab.
// The f32 arithmetic is value()'s (ggml_element.hpp): one exact int -> f32 conversion, one
// multiply with the scale first, then the minimum subtracted or added; the narrowing is
// convert_bits.hpp's (round to nearest even, NaN quieted with its top payload bits), F16 through
// F16C, which rounds and quiets the same way. rows_avx2_test compares every covered type and
// output with the portable decoder, bit for bit.
//
// Every function that uses AVX2 carries the target attribute (QLOAD_AVX2) instead of this file
// being built with -mavx2: inline functions from shared headers must not be emitted here with
// AVX2 instructions, where the linker could pick them for a caller on a CPU without AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "decoders.hpp"
#include "dequantize_element.hpp"
#include "row_decoders.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace qload::formats::detail {

#if defined(__x86_64__)
namespace {

using namespace ggml;

#define QLOAD_SIMD_TARGET "avx2,f16c"
#define QLOAD_AVX2 __attribute__((target(QLOAD_SIMD_TARGET), always_inline)) inline

// ---- output: 16 f32 lanes (two vectors, in order) written as F32, BF16 or F16 -------------------

struct F32Out {
  float* p;
  QLOAD_AVX2 void put(__m256 a, __m256 b) {
    _mm256_storeu_ps(p, a);
    _mm256_storeu_ps(p + 8, b);
    p += 16;
  }
};

// bits::f32_to_bf16 on 8 lanes: add just under half of the dropped bits plus the kept part's
// lowest bit, keep the top half. kMayBeNan adds its NaN rule (sign and top payload bits kept, the
// quiet bit set), which doubles the cost: decode_rows picks the plain form for a block whose
// scales are finite, where no element can be NaN.
template <bool kMayBeNan>
QLOAD_AVX2 __m256i bf16_bits(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
  if constexpr (!kMayBeNan) return rounded;
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

template <bool kMayBeNan>
struct Bf16Out {
  static constexpr bool kNaN = kMayBeNan, kSubnormal = true;  // what it narrows right
  std::uint16_t* p;
  QLOAD_AVX2 void put(__m256 a, __m256 b) {
    // Every lane is <= 0xffff, so the saturating pack is exact; it interleaves 128-bit lanes,
    // which the permute puts back in order.
    const __m256i packed = _mm256_packus_epi32(bf16_bits<kMayBeNan>(a), bf16_bits<kMayBeNan>(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
    p += 16;
  }
};

struct F16Out {
  std::uint16_t* p;
  QLOAD_AVX2 void put(__m256 a, __m256 b) {
    constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_set_m128i(_mm256_cvtps_ph(b, kNearest), _mm256_cvtps_ph(a, kNearest)));
    p += 16;
  }
};

// ---- 16 codes (signed bytes) scaled: d * q, d * q - m, d * q + m --------------------------------

QLOAD_AVX2 __m256 widen(__m128i bytes) {  // the low 8 signed bytes, as f32 (exact)
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

template <typename Out>
QLOAD_AVX2 void scaled16(Out& y, __m128i q, __m256 d) {
  y.put(_mm256_mul_ps(d, widen(q)), _mm256_mul_ps(d, widen(_mm_srli_si128(q, 8))));
}
template <typename Out>
QLOAD_AVX2 void scaled16_minus(Out& y, __m128i q, __m256 d, __m256 m) {
  y.put(_mm256_sub_ps(_mm256_mul_ps(d, widen(q)), m), _mm256_sub_ps(_mm256_mul_ps(d, widen(_mm_srli_si128(q, 8))), m));
}
template <typename Out>
QLOAD_AVX2 void scaled16_plus(Out& y, __m128i q, __m256 d, __m256 m) {
  y.put(_mm256_add_ps(_mm256_mul_ps(d, widen(q)), m), _mm256_add_ps(_mm256_mul_ps(d, widen(_mm_srli_si128(q, 8))), m));
}

QLOAD_AVX2 __m256 splat(float x) {
  return _mm256_set1_ps(x);
}

#include "rows_x86.inc"

struct Avx2Groups {
  // OCP MXFP4: 32 elements from 16 bytes of codes, element 2j the low nibble of byte j, each the
  // product of its E2M1 level (doubled) and 2^(e - 128), as element::Mxfp4::value. The sign is code
  // bit 3 applied after the product (exact: the scale is positive and finite, so -(L * s) is
  // (-L) * s, and code 8 gives -0 as the spec's table does).
  template <typename Out>
  QLOAD_AVX2 static void mxfp4(const std::uint8_t* codes, __m256 scale, Out& y) {
    const __m128i q = load16(codes), lo = low_nibbles(q), hi = high_nibbles(q);
    const __m128i magnitudes = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
    const __m128i halves[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};  // codes in element order
    for (const __m128i c : halves) {
      const __m128i mag = _mm_shuffle_epi8(magnitudes, c), sign = _mm_and_si128(c, _mm_set1_epi8(8));
      __m256 v[2];
      for (int i = 0; i < 2; ++i) {
        const __m128i m8 = i == 0 ? mag : _mm_srli_si128(mag, 8), s8 = i == 0 ? sign : _mm_srli_si128(sign, 8);
        const __m256 product = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)), scale);
        v[i] = _mm256_or_ps(product, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(s8), 28)));
      }
      y.put(v[0], v[1]);
    }
  }

  // NVFP4: 16 elements from 8 bytes of codes (element 2j the low nibble of byte j), each
  // mul_rn(level, scale) as element::Nvfp4::value: the signed doubled level (code 8 is -0), halved
  // (exact), times the group's scale, the same two products the portable decoder's table holds.
  template <typename Out>
  QLOAD_AVX2 static void nvfp4(const std::uint8_t* codes, const float* scales, std::uint64_t count, Out& y) {
    for (std::uint64_t j = 0; j < count; ++j) nvfp4_group(codes + j * 8, splat(scales[j]), y);
  }
  template <typename Out>
  QLOAD_AVX2 static void nvfp4_group(const std::uint8_t* codes, __m256 scale, Out& y) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
    const __m128i c = _mm_unpacklo_epi8(low_nibbles(q), high_nibbles(q));  // codes in element order
    const __m128i magnitudes = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
    const __m128i mag = _mm_shuffle_epi8(magnitudes, c), sign = _mm_and_si128(c, _mm_set1_epi8(8));
    __m256 v[2];
    for (int i = 0; i < 2; ++i) {
      const __m128i m8 = i == 0 ? mag : _mm_srli_si128(mag, 8), s8 = i == 0 ? sign : _mm_srli_si128(sign, 8);
      const __m256 doubled = _mm256_or_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8)),
                                          _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(s8), 28)));
      v[i] = _mm256_mul_ps(_mm256_mul_ps(doubled, _mm256_set1_ps(0.5f)), scale);
    }
    y.put(v[0], v[1]);
  }
};

// BF16 outputs: any elements (the NaN rule), and the cheaper narrowing for blocks whose scales
// are finite. MXFP4's elements are never NaN; with the global scale not NaN, every NaN an NVFP4
// element can be is a quiet NaN with no payload (an E4M3 NaN code's, or 0 x Inf's), which the
// plain narrowing keeps a NaN: both take it, NVFP4 through its table where scales are finite.
struct Avx2Outputs {
  using Bf16 = Bf16Out<true>;
  using Bf16Fast = Bf16Out<false>;
  using Fp4Bf16 = Bf16Out<false>;
  using Fp4Bf16Fast = Bf16Out<false>;
  static constexpr bool kNvfp4Table = true;
};

bool cpu_has_avx2() noexcept {
  // (clang's __builtin_cpu_supports does not know "f16c": CPUID leaf 1, ECX bit 29, read once.)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}

}  // namespace

bool ggml_avx2_decodes(std::uint32_t type) noexcept {
  bool covered = false;
  ggml::with_block_type(type, [&](auto t) { covered = Covered<decltype(t)>; });
  return covered && cpu_has_avx2();
}

bool decode_block_rows_avx2(std::uint32_t type, const std::uint8_t* base, std::uint64_t row_bytes, std::uint64_t cols,
                            std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out) {
  return ggml_avx2_decodes(type) &&
         block_rows<Avx2Outputs>(type, base, row_bytes, cols, row_begin, row_end, dtype, out);
}

bool decode_mxfp4_rows_avx2(const std::uint8_t* codes, const std::uint8_t* exponents, std::uint64_t cols,
                            std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out) {
  return cpu_has_avx2() && cols % 32 == 0 &&
         mxfp4_rows<Avx2Groups, Avx2Outputs>(codes, exponents, cols, row_begin, row_end, dtype, out);
}

bool decode_nvfp4_rows_avx2(const DequantArgs& a, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                            std::byte* out) {
  return cpu_has_avx2() && nvfp4_rows_fit(a) && nvfp4_rows<Avx2Groups, Avx2Outputs>(a, row_begin, row_end, dtype, out);
}

#else  // not x86-64: the portable decoders only

bool ggml_avx2_decodes(std::uint32_t) noexcept {
  return false;
}
bool decode_block_rows_avx2(std::uint32_t, const std::uint8_t*, std::uint64_t, std::uint64_t, std::uint64_t,
                            std::uint64_t, DType, std::byte*) {
  return false;
}
bool decode_mxfp4_rows_avx2(const std::uint8_t*, const std::uint8_t*, std::uint64_t, std::uint64_t, std::uint64_t,
                            DType, std::byte*) {
  return false;
}
bool decode_nvfp4_rows_avx2(const DequantArgs&, std::uint64_t, std::uint64_t, DType, std::byte*) {
  return false;
}

#endif

#undef QLOAD_SIMD_LOOP
#undef QLOAD_SIMD
#undef QLOAD_AVX2
#undef QLOAD_SIMD_TARGET

}  // namespace qload::formats::detail
