// The GGML block decoders, and OCP MXFP4's and NVFP4's, written for AVX2 (ggml-quants.c's AVX2
// loops are the model): a block's codes are assembled 32 bytes at a time with byte shuffles and
// masks, widened 8 to a vector, scaled, and written straight in the output's dtype, so a BF16 or
// F16 output costs no second pass over an f32 slab. The f32 arithmetic is value()'s
// (ggml_element.hpp): one exact int -> f32 conversion, one multiply with the scale first, then
// the minimum subtracted or added; the narrowing is convert_bits.hpp's (round to nearest even,
// NaN quieted with its top payload bits), F16 through F16C, which rounds and quiets the same way.
// rows_avx2_test compares every covered type and output with the portable decoder, bit for bit.
//
// Every function that uses AVX2 carries the target attribute (QLOAD_AVX2) instead of this file
// being built with -mavx2: inline functions from shared headers must not be emitted here with
// AVX2 instructions, where the linker could pick them for a caller on a CPU without AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>
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

#define QLOAD_AVX2 __attribute__((target("avx2,f16c"), always_inline)) inline

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

// ---- code assembly -------------------------------------------------------------------------------

QLOAD_AVX2 __m128i load16(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
QLOAD_AVX2 __m256i load32(const std::uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
QLOAD_AVX2 __m128i low_nibbles(__m128i q) {
  return _mm_and_si128(q, _mm_set1_epi8(0x0F));
}
QLOAD_AVX2 __m128i high_nibbles(__m128i q) {
  return _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
}
QLOAD_AVX2 __m256i low_nibbles(__m256i q) {
  return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}
QLOAD_AVX2 __m256i high_nibbles(__m256i q) {
  return _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
}
QLOAD_AVX2 __m128i low_half(__m256i v) {
  return _mm256_castsi256_si128(v);
}
QLOAD_AVX2 __m128i high_half(__m256i v) {
  return _mm256_extracti128_si256(v, 1);
}

// 0x10 in byte i where bit i of the 32 bits at p is set (Q5_0/Q5_1's fifth bits; ggml's
// bytes_from_bits_32).
QLOAD_AVX2 __m256i fifth_bits(const std::uint8_t* p) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(u32_at(p))),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i own_bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, own_bit), own_bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// `value` in each byte whose `bit` is set (is_set) or clear in the bytes of `mask`.
QLOAD_AVX2 __m256i where_bit(__m256i mask, unsigned bit, bool is_set, char value) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(1u << bit));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(mask, b), is_set ? b : _mm256_setzero_si256());
  return _mm256_and_si256(set, _mm256_set1_epi8(value));
}

QLOAD_AVX2 __m256 splat(float x) {
  return _mm256_set1_ps(x);
}

// ---- the blocks: each writes T::kElems elements through y, in value()'s order --------------------

template <typename Out>
QLOAD_AVX2 void block(Q4_0, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(half_at(b));
  const __m128i qs = load16(b + 2), eight = _mm_set1_epi8(8);
  scaled16(y, _mm_sub_epi8(low_nibbles(qs), eight), d);
  scaled16(y, _mm_sub_epi8(high_nibbles(qs), eight), d);
}
template <typename Out>
QLOAD_AVX2 void block(Q4_1, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(half_at(b)), m = splat(half_at(b + 2));
  const __m128i qs = load16(b + 4);
  scaled16_plus(y, low_nibbles(qs), d, m);
  scaled16_plus(y, high_nibbles(qs), d, m);
}
template <typename Out>
QLOAD_AVX2 void block(Q5_0, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(half_at(b));
  const __m256i high = fifth_bits(b + 2);
  const __m128i qs = load16(b + 6), sixteen = _mm_set1_epi8(16);
  scaled16(y, _mm_sub_epi8(_mm_or_si128(low_nibbles(qs), low_half(high)), sixteen), d);
  scaled16(y, _mm_sub_epi8(_mm_or_si128(high_nibbles(qs), high_half(high)), sixteen), d);
}
template <typename Out>
QLOAD_AVX2 void block(Q5_1, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(half_at(b)), m = splat(half_at(b + 2));
  const __m256i high = fifth_bits(b + 4);
  const __m128i qs = load16(b + 8);
  scaled16_plus(y, _mm_or_si128(low_nibbles(qs), low_half(high)), d, m);
  scaled16_plus(y, _mm_or_si128(high_nibbles(qs), high_half(high)), d, m);
}
template <typename Out>
QLOAD_AVX2 void block(Q8_0, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(half_at(b));
  scaled16(y, load16(b + 2), d);
  scaled16(y, load16(b + 18), d);
}
template <typename Out>
QLOAD_AVX2 void block(Q8_1, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(half_at(b));
  scaled16(y, load16(b + 4), d);
  scaled16(y, load16(b + 20), d);
}
template <typename Out>
QLOAD_AVX2 void block(Q8_K, const std::uint8_t* b, Out& y) {
  const __m256 d = splat(as_float(u32_at(b)));
  for (unsigned i = 0; i < 256; i += 16) scaled16(y, load16(b + 4 + i), d);
}
template <typename Out>
QLOAD_AVX2 void block(Q2_K, const std::uint8_t* b, Out& y) {
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  float dl[16], ml[16];  // sub-block j's scale and minimum, j = 16-element run in order
  for (unsigned j = 0; j < 16; ++j) {
    dl[j] = mul_rn(d, f32_of(b[j] & 0xF));
    ml[j] = mul_rn(dmin, f32_of(b[j] >> 4));
  }
  for (unsigned half = 0; half < 2; ++half) {  // 128 elements from 32 bytes of 2-bit codes
    const __m256i q = load32(b + 16 + half * 32);
    for (unsigned shift = 0; shift < 8; shift += 2) {  // bytes 0-15, then 16-31: two sub-blocks
      const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, static_cast<int>(shift)), _mm256_set1_epi8(3));
      const unsigned j = half * 8 + shift;
      scaled16_minus(y, low_half(codes), splat(dl[j]), splat(ml[j]));
      scaled16_minus(y, high_half(codes), splat(dl[j + 1]), splat(ml[j + 1]));
    }
  }
}
template <typename Out>
QLOAD_AVX2 void block(Q3_K, const std::uint8_t* b, Out& y) {
  const float d = half_at(b + 108);
  const __m256i hmask = load32(b);
  for (unsigned half = 0; half < 2; ++half) {
    const __m256i q = load32(b + 32 + half * 32);
    for (unsigned shift = 0; shift < 8; shift += 2) {
      // 2-bit code minus 4 where the high-mask bit for these 32 elements is clear.
      const __m256i crumbs = _mm256_and_si256(_mm256_srli_epi16(q, static_cast<int>(shift)), _mm256_set1_epi8(3));
      const __m256i codes = _mm256_sub_epi8(crumbs, where_bit(hmask, half * 4 + shift / 2, false, 4));
      const unsigned j = half * 8 + shift;
      scaled16(y, low_half(codes), splat(mul_rn(d, f32_of(Q3_K::scale_code(b, j)))));
      scaled16(y, high_half(codes), splat(mul_rn(d, f32_of(Q3_K::scale_code(b, j + 1)))));
    }
  }
}
template <typename Out>
QLOAD_AVX2 void k4_pair(Out& y, __m256i lo, __m256i hi, const K4Scale& a, const K4Scale& c) {
  const __m256 ad = splat(a.d), am = splat(a.dm), cd = splat(c.d), cm = splat(c.dm);
  scaled16_minus(y, low_half(lo), ad, am);
  scaled16_minus(y, high_half(lo), ad, am);
  scaled16_minus(y, low_half(hi), cd, cm);
  scaled16_minus(y, high_half(hi), cd, cm);
}
template <typename Out>
QLOAD_AVX2 void block(Q4_K, const std::uint8_t* b, Out& y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  for (unsigned j = 0; j < 8; j += 2) {  // 64 elements from 32 bytes: low nibbles, then high
    const __m256i q = load32(b + 16 + j * 16);
    k4_pair(y, low_nibbles(q), high_nibbles(q), k4_scale_of(b, j, d, dmin), k4_scale_of(b, j + 1, d, dmin));
  }
}
template <typename Out>
QLOAD_AVX2 void block(Q5_K, const std::uint8_t* b, Out& y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const __m256i qh = load32(b + 16);
  for (unsigned j = 0; j < 8; j += 2) {
    const __m256i q = load32(b + 48 + j * 16);
    const __m256i lo = _mm256_or_si256(low_nibbles(q), where_bit(qh, j, true, 0x10));
    const __m256i hi = _mm256_or_si256(high_nibbles(q), where_bit(qh, j + 1, true, 0x10));
    k4_pair(y, lo, hi, k4_scale_of(b, j, d, dmin), k4_scale_of(b, j + 1, d, dmin));
  }
}
template <typename Out>
QLOAD_AVX2 void block(Q6_K, const std::uint8_t* b, Out& y) {
  const float d = half_at(b + 208);
  const __m256i nibble = _mm256_set1_epi8(0x0F), thirty_two = _mm256_set1_epi8(32);
  for (unsigned half = 0; half < 2; ++half) {
    const __m256i ql0 = load32(b + half * 64), ql1 = load32(b + half * 64 + 32), qh = load32(b + 128 + half * 32);
    // The half's four runs of 32: the low nibbles of ql0 and ql1, then their high nibbles, each
    // with the next crumb of qh as bits 4-5; then minus 32.
    const __m256i codes[4] = {
        _mm256_or_si256(_mm256_and_si256(ql0, nibble),
                        _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4)),
        _mm256_or_si256(_mm256_and_si256(ql1, nibble),
                        _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2)),
        _mm256_or_si256(high_nibbles(ql0), _mm256_and_si256(qh, _mm256_set1_epi8(0x30))),
        _mm256_or_si256(high_nibbles(ql1), _mm256_and_si256(_mm256_srli_epi16(qh, 2), _mm256_set1_epi8(0x30))),
    };
    const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192 + half * 8);  // one per 16 elements
    for (unsigned r = 0; r < 4; ++r) {
      const __m256i c = _mm256_sub_epi8(codes[r], thirty_two);
      scaled16(y, low_half(c), splat(mul_rn(d, f32_of(scales[2 * r]))));
      scaled16(y, high_half(c), splat(mul_rn(d, f32_of(scales[2 * r + 1]))));
    }
  }
}

// 16 bytes of nibbles through a table of 16 signed levels: low nibbles' 16 elements, then high.
template <typename Out>
QLOAD_AVX2 void levels32(Out& y, __m128i levels, const std::uint8_t* qs, __m256 d) {
  const __m128i q = load16(qs);
  scaled16(y, _mm_shuffle_epi8(levels, low_nibbles(q)), d);
  scaled16(y, _mm_shuffle_epi8(levels, high_nibbles(q)), d);
}
QLOAD_AVX2 __m128i iq4_levels() {
  return _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}
template <typename Out>
QLOAD_AVX2 void block(IQ4_NL, const std::uint8_t* b, Out& y) {
  levels32(y, iq4_levels(), b + 2, splat(half_at(b)));
}
template <typename Out>
QLOAD_AVX2 void block(IQ4_XS, const std::uint8_t* b, Out& y) {
  const float d = half_at(b);
  const __m128i levels = iq4_levels();
  for (unsigned j = 0; j < 8; ++j)
    levels32(y, levels, b + 8 + j * 16, splat(mul_rn(d, f32_of(IQ4_XS::scale_code(b, j)))));
}
template <typename Out>
QLOAD_AVX2 void block(MXFP4, const std::uint8_t* b, Out& y) {
  const std::uint32_t e = b[0];
  const float d = as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);  // as MXFP4::value
  levels32(y, _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12), b + 1, splat(d));
}

template <typename T>
concept Covered = requires(const std::uint8_t* b, F32Out& y) {
  block(T{}, b, y);
};

// Whether a block's scales are finite, so that none of its elements is NaN: products of finite
// f16 scales and small codes stay finite in f32, and finite minimums subtract no Inf from Inf.
// (Q8_K's f32 scale may overflow to Inf, never to NaN. MXFP4's E8M0 scale is always finite.)
inline bool finite_half(const std::uint8_t* p) {
  return (p[1] & 0x7C) != 0x7C;
}
template <typename T>
bool scales_finite(const std::uint8_t* b) {
  if constexpr (std::is_same_v<T, MXFP4>)
    return true;
  else if constexpr (std::is_same_v<T, Q8_K>)
    return (u32_at(b) & 0x7f800000u) != 0x7f800000u;
  else if constexpr (std::is_same_v<T, Q2_K>)
    return finite_half(b + 80) && finite_half(b + 82);
  else if constexpr (std::is_same_v<T, Q3_K>)
    return finite_half(b + 108);
  else if constexpr (std::is_same_v<T, Q6_K>)
    return finite_half(b + 208);
  else if constexpr (std::is_same_v<T, Q4_1> || std::is_same_v<T, Q5_1> || std::is_same_v<T, Q4_K> ||
                     std::is_same_v<T, Q5_K>)
    return finite_half(b) && finite_half(b + 2);
  else
    return finite_half(b);  // the types with one f16 scale first
}

template <typename T, typename Out, typename Elem>
__attribute__((target("avx2,f16c"))) void decode_rows(const std::uint8_t* base, std::uint64_t row_bytes,
                                                      std::uint64_t cols, std::uint64_t row_begin,
                                                      std::uint64_t row_end, Elem* out) {
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* b = base + n * row_bytes;
    for (std::uint64_t k = 0; k < cols; k += T::kElems, b += T::kBytes, out += T::kElems) {
      if constexpr (std::is_same_v<Out, Bf16Out<true>>) {
        if (scales_finite<T>(b)) {
          Bf16Out<false> y{out};
          block(T{}, b, y);
          continue;
        }
      }
      Out y{out};
      block(T{}, b, y);
    }
  }
}

// OCP MXFP4: 32 elements from 16 bytes of codes, element 2j the low nibble of byte j, each the
// product of its E2M1 level (doubled) and 2^(e - 128), as element::Mxfp4::value. The sign is code
// bit 3 applied after the product (exact: the scale is positive and finite, so -(L * s) is
// (-L) * s, and code 8 gives -0 as the spec's table does).
template <typename Out>
QLOAD_AVX2 void ocp_mxfp4_group(const std::uint8_t* codes, __m256 scale, Out& y) {
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

template <typename Out, typename Elem>
__attribute__((target("avx2,f16c"))) void decode_mxfp4(const std::uint8_t* codes, const std::uint8_t* exponents,
                                                       std::uint64_t cols, std::uint64_t row_begin,
                                                       std::uint64_t row_end, Elem* out) {
  const std::uint64_t groups = cols / 32;
  for (std::uint64_t n = row_begin; n < row_end; ++n)
    for (std::uint64_t g = 0; g < groups; ++g, out += 32) {
      const std::uint32_t e = exponents[n * groups + g];
      Out y{out};
      ocp_mxfp4_group(codes + (n * groups + g) * 16, splat(as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23)), y);
    }
}

// NVFP4: 16 elements from 8 bytes of codes (element 2j the low nibble of byte j), each
// mul_rn(level, scale) as element::Nvfp4::value: the signed doubled level (code 8 is -0), halved
// (exact), times the group's scale, the same two products the portable decoder's table holds.
template <typename Out>
QLOAD_AVX2 void nvfp4_group(const std::uint8_t* codes, __m256 scale, Out& y) {
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

// bits::e4m3_to_f32 on 8 codes: the same selections, lane by lane.
QLOAD_AVX2 __m256 e4m3_to_f32(__m128i codes) {
  const __m256i c = _mm256_cvtepu8_epi32(codes);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  const __m256i exponent = _mm256_and_si256(_mm256_srli_epi32(c, 3), _mm256_set1_epi32(0x0f));
  const __m256i mantissa = _mm256_and_si256(c, _mm256_set1_epi32(0x07));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(120)), 23),
                                         _mm256_slli_epi32(mantissa, 20));
  const __m256i subnormal = _mm256_andnot_si256(
      _mm256_cmpeq_epi32(mantissa, zero),
      _mm256_sub_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(mantissa)), _mm256_set1_epi32(9 << 23)));
  __m256i result = _mm256_blendv_epi8(normal, subnormal, _mm256_cmpeq_epi32(exponent, zero));
  const __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
  result = _mm256_blendv_epi8(result, _mm256_set1_epi32(0x7fc00000), nan);
  return _mm256_castsi256_ps(_mm256_or_si256(sign, result));
}

// The scales of a row come 8 at a time, as element::Nvfp4::scale computes each (the E4M3 value,
// then one division by, or product with, the global scale).
template <typename Out, typename Elem>
__attribute__((target("avx2,f16c"))) void decode_nvfp4(const DequantArgs& a, std::uint64_t row_begin,
                                                       std::uint64_t row_end, Elem* out) {
  const __m256 global = splat(a.global_scale);
  alignas(32) float scales[8];
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row_scales = a.scale_codes + n * a.groups;
    for (std::uint64_t g0 = 0; g0 < a.groups; g0 += 8) {
      const std::uint64_t count = std::min<std::uint64_t>(8, a.groups - g0);
      std::uint64_t codes8 = 0;
      std::memcpy(&codes8, row_scales + g0, static_cast<std::size_t>(count));
      const __m256 e4m3 = e4m3_to_f32(_mm_cvtsi64_si128(static_cast<long long>(codes8)));
      _mm256_store_ps(scales, a.global_multiplies ? _mm256_mul_ps(e4m3, global) : _mm256_div_ps(e4m3, global));
      for (std::uint64_t j = 0; j < count; ++j, out += 16) {
        Out y{out};
        nvfp4_group(a.codes + n * (a.cols / 2) + (g0 + j) * 8, splat(scales[j]), y);
      }
    }
  }
}

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
  if (!ggml_avx2_decodes(type)) return false;
  bool done = false;
  ggml::with_block_type(type, [&](auto t) {
    using T = decltype(t);
    if constexpr (Covered<T>) {
      switch (dtype) {
        case DType::kF32:
          decode_rows<T, F32Out>(base, row_bytes, cols, row_begin, row_end, reinterpret_cast<float*>(out));
          break;
        case DType::kBF16:
          decode_rows<T, Bf16Out<true>>(base, row_bytes, cols, row_begin, row_end,
                                        reinterpret_cast<std::uint16_t*>(out));
          break;
        case DType::kF16:
          decode_rows<T, F16Out>(base, row_bytes, cols, row_begin, row_end, reinterpret_cast<std::uint16_t*>(out));
          break;
        default: return;
      }
      done = true;
    }
  });
  return done;
}

bool decode_mxfp4_rows_avx2(const std::uint8_t* codes, const std::uint8_t* exponents, std::uint64_t cols,
                            std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out) {
  if (!cpu_has_avx2() || cols % 32 != 0) return false;
  switch (dtype) {
    case DType::kF32:
      decode_mxfp4<F32Out>(codes, exponents, cols, row_begin, row_end, reinterpret_cast<float*>(out));
      return true;
    // The scale is finite, so no element is NaN.
    case DType::kBF16:
      decode_mxfp4<Bf16Out<false>>(codes, exponents, cols, row_begin, row_end, reinterpret_cast<std::uint16_t*>(out));
      return true;
    case DType::kF16:
      decode_mxfp4<F16Out>(codes, exponents, cols, row_begin, row_end, reinterpret_cast<std::uint16_t*>(out));
      return true;
    default: return false;
  }
}

bool decode_nvfp4_rows_avx2(const DequantArgs& a, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                            std::byte* out) {
  // A NaN global scale (a broken file) makes every element NaN, and which NaN the portable
  // decoder gives (its scale's or the global one) is the compiler's choice of operand order for
  // the product: that case stays with the portable decoder, so the two always agree.
  if (!cpu_has_avx2() || a.cols % 16 != 0 || a.groups != a.cols / 16 || std::isnan(a.global_scale)) return false;
  switch (dtype) {
    case DType::kF32: decode_nvfp4<F32Out>(a, row_begin, row_end, reinterpret_cast<float*>(out)); return true;
    // With the global scale not NaN, every NaN an element can be is a quiet NaN with no payload
    // (an E4M3 NaN code's, or 0 x Inf's), which the plain narrowing keeps a NaN.
    case DType::kBF16:
      decode_nvfp4<Bf16Out<false>>(a, row_begin, row_end, reinterpret_cast<std::uint16_t*>(out));
      return true;
    case DType::kF16: decode_nvfp4<F16Out>(a, row_begin, row_end, reinterpret_cast<std::uint16_t*>(out)); return true;
    default: return false;
  }
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

}  // namespace qload::formats::detail
