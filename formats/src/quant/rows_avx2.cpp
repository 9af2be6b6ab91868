// The GGML block decoders, OCP MXFP4's and NVFP4's, and GPTQ rows, written for AVX2 (ggml-quants.c's AVX2
// loops are the model): a block's codes are assembled 32 bytes at a time with byte shuffles and
// masks (rows_x86.inc, shared with rows_avx512.cpp), widened 8 to a vector, scaled, and written
// straight in the output's dtype, so a BF16 or F16 output costs no second pass over an f32 slab.
// The f32 arithmetic is value()'s (ggml_element.hpp): one exact int -> f32 conversion, one
// multiply with the scale first, then the minimum subtracted or added; the narrowing is
// convert_bits.hpp's (round to nearest even, NaN quieted with its top payload bits), BF16 through
// three f32 operations where a block's elements allow it (split_top), F16 through F16C, which
// rounds and quiets the same way. rows_avx2_test compares every covered type and
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

#include "bitstream.hpp"
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

// The same rounding for zeros and normal values below 2^111 in magnitude, in three f32 operations
// instead of five integer ones: Veltkamp's split with 2^16 + 1 (t = x * C, then t - (t - x), each
// rounded on its own, so no FMA: this file is built with -ffp-contract=off) leaves x rounded to its
// top 8 significant bits, to nearest with ties to even, its low 16 bits zero and the sign of a zero
// kept. Checked over every f32 of that range once (4 * 10^9 values), and in CI over every
// mantissa of the exponents at its edges (rows_avx2_test); subnormals round wrongly and larger
// values overflow, which Bf16SplitOut's flags tell rows_x86.inc.
QLOAD_AVX2 __m256i split_top(__m256 x) {  // x rounded, its BF16 bits in each lane's top half
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(65537.0f));
  return _mm256_castps_si256(_mm256_sub_ps(t, _mm256_sub_ps(t, x)));
}

// 16 lanes of BF16 words (each <= 0xffff, so the saturating pack is exact; it interleaves 128-bit
// lanes, which the permute puts back in order).
QLOAD_AVX2 void store_words(std::uint16_t* p, __m256i a, __m256i b) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
}

template <bool kMayBeNan>
struct Bf16Out {
  static constexpr bool kNaN = kMayBeNan, kSubnormal = true, kHuge = true;  // what it narrows right
  std::uint16_t* p;
  QLOAD_AVX2 void put(__m256 a, __m256 b) {
    store_words(p, bf16_bits<kMayBeNan>(a), bf16_bits<kMayBeNan>(b));
    p += 16;
  }
};

// Takes its 16 lanes as even and odd elements (kEvenOdd, widen16): the split leaves each odd
// element's BF16 bits in the top half of its 32-bit lane already, so lane i's two words are the
// even one shifted down and the odd one, in memory order.
struct Bf16SplitOut {
  static constexpr bool kNaN = false, kSubnormal = false, kHuge = false;  // what it narrows right
  static constexpr bool kEvenOdd = true;
  std::uint16_t* p;
  QLOAD_AVX2 void put(__m256 even, __m256 odd) {
    const __m256i words = _mm256_or_si256(_mm256_srli_epi32(split_top(even), 16), split_top(odd));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), words);
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

// The 16 codes as f32 (exact) in two vectors: in order (codes 0-7, 8-15) for most outputs; codes
// 0, 2, ..., 14 and 1, 3, ..., 15 for an output that takes them so (kEvenOdd): one byte-to-word
// widening (port 5), then each word pair multiplied and added with (1, 0) for the even codes and
// shifted for the odd ones, where in-order lanes take three port-5 shuffles (and two shifts for
// the even codes measured 4-7% slower in L1: ports 0 and 1 are this loop's limit), and the output
// then interleaves its two halves of each word pair with no shuffle at all.
struct Lanes16 {
  __m256 a, b;
};
template <typename Out>
QLOAD_AVX2 Lanes16 widen16(__m128i q) {
  if constexpr (requires { Out::kEvenOdd; }) {
    const __m256i words = _mm256_cvtepi8_epi16(q);  // 32-bit lane i: code 2i (low), 2i + 1 (high)
    return {_mm256_cvtepi32_ps(_mm256_madd_epi16(words, _mm256_set1_epi32(1))),
            _mm256_cvtepi32_ps(_mm256_srai_epi32(words, 16))};
  } else {
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))};
  }
}

template <typename Out>
QLOAD_AVX2 void scaled16(Out& y, __m128i q, __m256 d) {
  const auto [a, b] = widen16<Out>(q);
  y.put(_mm256_mul_ps(d, a), _mm256_mul_ps(d, b));
}
template <typename Out>
QLOAD_AVX2 void scaled16_minus(Out& y, __m128i q, __m256 d, __m256 m) {
  const auto [a, b] = widen16<Out>(q);
  y.put(_mm256_sub_ps(_mm256_mul_ps(d, a), m), _mm256_sub_ps(_mm256_mul_ps(d, b), m));
}
template <typename Out>
QLOAD_AVX2 void scaled16_plus(Out& y, __m128i q, __m256 d, __m256 m) {
  const auto [a, b] = widen16<Out>(q);
  y.put(_mm256_add_ps(_mm256_mul_ps(d, a), m), _mm256_add_ps(_mm256_mul_ps(d, b), m));
}

QLOAD_AVX2 __m256 splat(float x) {
  return _mm256_set1_ps(x);
}

#include "rows_x86.inc"

// ---- NVFP4 to BF16 through tables of each group's values ---------------------------------------

// bits::f32_to_bf16's rounding of 8 finite-or-Inf lanes (no NaN), the words in the lanes' low halves.
QLOAD_AVX2 __m256i round_bf16_words(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
}

// round_bf16_words, or (kSplit) the same words through split_top, for lanes in its range.
template <bool kSplit>
QLOAD_AVX2 __m256i narrow_words(__m256 v) {
  if constexpr (kSplit) return _mm256_srli_epi32(split_top(v), 16);
  return round_bf16_words(v);
}

// NVFP4's non-negative levels in the order nvfp4_bf16_group packs them.
QLOAD_AVX2 __m256 nvfp4_levels() {
  return _mm256_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6);
}

// The bytes of a table of 16 BF16 words (8 in each 128-bit lane, code k's word k of its lane) as
// two byte tables for _mm256_shuffle_epi8: low bytes, and high bytes with the sign set for codes
// 8-15, which are the negative levels: their products are the non-negative ones' negated bit for
// bit (the product's sign is the signs' XOR, its magnitude the same, rounding to nearest even
// symmetric).
struct Nvfp4ByteTables {
  __m256i low, high;
};
QLOAD_AVX2 Nvfp4ByteTables nvfp4_byte_tables(__m256i words) {
  const __m256i low_bytes = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10,
                                             12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i high_bytes = _mm256_add_epi8(low_bytes, _mm256_set1_epi8(1));
  const __m256i sign = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, -128, -128, -128, -128, -128, -128, -128, -128, 0, 0, 0,
                                        0, 0, 0, 0, 0, -128, -128, -128, -128, -128, -128, -128, -128);
  return {_mm256_shuffle_epi8(words, low_bytes), _mm256_xor_si256(_mm256_shuffle_epi8(words, high_bytes), sign)};
}

// NVFP4 to BF16 for a group whose scale s is finite, through a table of its 16 values: the 8
// products mul_rn(level, s) of the non-negative levels, narrowed as bits::f32_to_bf16 does (no
// NaN can occur; Inf and subnormal products round as the codec's integers do), and their
// negations (nvfp4_byte_tables). Each element is then two byte lookups: 16 elements from 8 code
// bytes for one product and one narrowing of 8. (Measured: 0.42 -> 0.56x memcpy on AVX2; two
// groups at once, nvfp4_bf16_pair, is faster still; rows_avx512.cpp has its own tables.)
QLOAD_AVX2 void nvfp4_bf16_group(const std::uint8_t* codes, float s, std::uint16_t* out) {
  const __m256i bf16 = round_bf16_words(_mm256_mul_ps(nvfp4_levels(), _mm256_set1_ps(s)));
  const __m128i values = _mm_packus_epi32(_mm256_castsi256_si128(bf16), _mm256_extracti128_si256(bf16, 1));
  const Nvfp4ByteTables t = nvfp4_byte_tables(_mm256_castsi128_si256(values));
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
  const __m128i c = _mm_unpacklo_epi8(low_nibbles(q), high_nibbles(q));  // codes in element order
  const __m128i l = _mm_shuffle_epi8(_mm256_castsi256_si128(t.low), c);
  const __m128i h = _mm_shuffle_epi8(_mm256_castsi256_si128(t.high), c);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi8(l, h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8), _mm_unpackhi_epi8(l, h));
}
// Two groups (16 code bytes, scales s[0] and s[1]) at once, the same tables and lookups with one
// group in each 128-bit lane, arranged so that port 5 (every shuffle, pack, unpack and lane
// crossing) does 8 operations for 32 elements instead of 13, which was this loop's limit:
// the products come as [levels 0-3 of both groups] and [levels 4-7 of both], whose pack is the
// table with no permute; the codes are one broadcast load (a load port) and one byte shuffle
// that doubles each byte, then masks; the 128-bit halves are stored apart instead of being
// permuted into order (a 128-bit extract to memory is a store). kSplit: the products narrowed by
// split_top, for scales whose products are all zeros or normal below 2^111 (nvfp4_split_takes),
// three f32 operations a lane for round_bf16_words' five integer ones: 13.5 -> 16.8 GB/s in L1.
template <bool kSplit>
QLOAD_AVX2 void nvfp4_bf16_pair(const std::uint8_t* codes, const float* s, std::uint16_t* out) {
  const __m256 scales = _mm256_blend_ps(_mm256_broadcast_ss(s), _mm256_broadcast_ss(s + 1), 0xF0);  // s0 x4 | s1 x4
  const __m256 low_levels = _mm256_setr_ps(0, 0.5f, 1, 1.5f, 0, 0.5f, 1, 1.5f);
  const __m256 high_levels = _mm256_setr_ps(2, 3, 4, 6, 2, 3, 4, 6);
  // packus interleaves its sources by 128-bit lane: [low levels, high levels] of group 0, then of group 1.
  const __m256i words = _mm256_packus_epi32(narrow_words<kSplit>(_mm256_mul_ps(low_levels, scales)),
                                            narrow_words<kSplit>(_mm256_mul_ps(high_levels, scales)));
  const Nvfp4ByteTables t = nvfp4_byte_tables(words);
  // Byte j of a lane's group doubled into word j (bytes 0-7 in the low lane, 8-15 in the high),
  // then the low nibble kept in the word's low byte (element 2j) and the high one moved to its
  // high byte (element 2j + 1).
  const __m256i twice = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load16(codes)),
                                            _mm256_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9,
                                                             10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
  const __m256i c = _mm256_or_si256(_mm256_and_si256(twice, _mm256_set1_epi16(0x000F)),
                                    _mm256_and_si256(_mm256_srli_epi16(twice, 4), _mm256_set1_epi16(0x0F00)));
  const __m256i l = _mm256_shuffle_epi8(t.low, c), h = _mm256_shuffle_epi8(t.high, c);
  const __m256i first = _mm256_unpacklo_epi8(l, h), second = _mm256_unpackhi_epi8(l, h);  // elements 0-7, 8-15
  auto* o = reinterpret_cast<__m128i*>(out);
  _mm_storeu_si128(o, _mm256_castsi256_si128(first));
  _mm_storeu_si128(o + 1, _mm256_castsi256_si128(second));
  _mm_storeu_si128(o + 2, _mm256_extracti128_si256(first, 1));
  _mm_storeu_si128(o + 3, _mm256_extracti128_si256(second, 1));
}

// Whether NVFP4's products with 8 group scales (levels 0.5 to 6, and zero) are all zeros or normal
// below 2^111, split_top's range: no scale below 2^-125 in magnitude but zero, none from 2^108 up.
QLOAD_AVX2 bool nvfp4_split_takes(__m256 scales) {
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), scales);
  return no_subnormal_products(scales) &&
         _mm256_movemask_ps(_mm256_cmp_ps(magnitude, _mm256_set1_ps(0x1p108f), _CMP_GE_OQ)) == 0;
}

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
  // NVFP4 to BF16 for `count` groups whose scales (`scaled`, past `count` zeros; the same in
  // `scales`) are finite, through the tables above, pairs first.
  QLOAD_AVX2 static void nvfp4_bf16(const std::uint8_t* codes, __m256 scaled, const float* scales, std::uint64_t count,
                                    std::uint16_t* out) {
    std::uint64_t j = 0;
    if (nvfp4_split_takes(scaled))
      for (; j + 2 <= count; j += 2) nvfp4_bf16_pair<true>(codes + j * 8, scales + j, out + j * 16);
    else
      for (; j + 2 <= count; j += 2) nvfp4_bf16_pair<false>(codes + j * 8, scales + j, out + j * 16);
    if (j < count) nvfp4_bf16_group(codes + j * 8, scales[j], out + j * 16);
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

// GGML blocks whose runs of 32 elements share one scale (and minimum) over 16 codes, to BF16
// through a table of the run's 16 values: each value computed once, in f32 as value() does
// (the product with the level, then the minimum), narrowed as Bf16Out<false> narrows, and each
// element two byte lookups; Q2_K and Q3_K, whose runs are 16 elements of 4 or 8 levels, put two
// runs in one table. Without AVX-512, narrowing is most of a BF16 output's cost, and this does
// it for 16 values instead of 32 elements. (Q5_K, Q6_K and Q8_0 have as many values as elements
// or more: no table.)
struct Avx2Bf16Tables {
  struct Table {
    __m256i low, high;  // in each 128-bit lane, byte k: the low (high) byte of code k's value
  };
  // The table from the 16 values in f32: `a` holds codes 0-3 and 8-11, `b` codes 4-7 and 12-15,
  // the order in which the 128-bit lanes of _mm256_packus_epi32 put them back in order.
  QLOAD_AVX2 static Table narrow(__m256 a, __m256 b) {
    const __m256i words = _mm256_packus_epi32(bf16_bits<false>(a), bf16_bits<false>(b));  // codes 0-7 | 8-15
    const __m256i split = _mm256_shuffle_epi8(
        words, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3,
                                5, 7, 9, 11, 13, 15));  // low bytes, high bytes | the same
    return {_mm256_permute4x64_epi64(split, 0x88), _mm256_permute4x64_epi64(split, 0xDD)};
  }
  // Levels in narrow()'s order: 0-15, and IQ4's non-linear ones.
  QLOAD_AVX2 static __m256 unsigned_a() { return _mm256_setr_ps(0, 1, 2, 3, 8, 9, 10, 11); }
  QLOAD_AVX2 static __m256 unsigned_b() { return _mm256_setr_ps(4, 5, 6, 7, 12, 13, 14, 15); }
  QLOAD_AVX2 static __m256 iq4_a() { return _mm256_setr_ps(-127, -104, -83, -65, 1, 13, 25, 38); }
  QLOAD_AVX2 static __m256 iq4_b() { return _mm256_setr_ps(-49, -35, -22, -10, 53, 69, 89, 113); }

  // d * level: the tables of Q4_0 (levels q - 8), IQ4_NL and IQ4_XS.
  QLOAD_AVX2 static Table scaled(__m256 d, __m256 a, __m256 b) {
    return narrow(_mm256_mul_ps(d, a), _mm256_mul_ps(d, b));
  }
  // d * level - m, levels 0-15: Q4_K's table.
  QLOAD_AVX2 static Table minus_table(float d, float m) {
    const __m256 vd = splat(d), vm = splat(m);
    return narrow(_mm256_sub_ps(_mm256_mul_ps(vd, unsigned_a()), vm),
                  _mm256_sub_ps(_mm256_mul_ps(vd, unsigned_b()), vm));
  }
  // 32 elements whose codes are bytes of c, written at out: elements 0-7 and 16-23 in the low
  // 128-bit lane, 8-15 and 24-31 in the high one (interleave() arranges them so), which the
  // byte unpacks put back in order.
  QLOAD_AVX2 static void lookup32(const Table& t, __m256i c, std::uint16_t* out) {
    const __m256i l = _mm256_shuffle_epi8(t.low, c), h = _mm256_shuffle_epi8(t.high, c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_unpacklo_epi8(l, h));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), _mm256_unpackhi_epi8(l, h));
  }
  // 32 bytes in element order, as lookup32 takes them.
  QLOAD_AVX2 static __m256i interleave(__m256i bytes) {
    return _mm256_permute4x64_epi64(bytes, 0xD8);  // 64-bit quarters 0, 2, 1, 3
  }
  // The 32 nibbles of 16 bytes in GGML's order (the low ones, then the high ones), as lookup32
  // takes them: the low nibbles of bytes 0-7 and the high ones of the same bytes in the low
  // lane, those of bytes 8-15 in the high lane.
  QLOAD_AVX2 static __m256i nibbles32(const std::uint8_t* qs) {
    const __m256i twice = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load16(qs)),
                                              _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm256_blend_epi32(low_nibbles(twice), high_nibbles(twice), 0xCC);
  }

  QLOAD_AVX2 static void block(Q4_0, const std::uint8_t* b, std::uint16_t* out) {
    const __m256 eight = _mm256_set1_ps(8);
    const __m256 levels_a = _mm256_sub_ps(unsigned_a(), eight), levels_b = _mm256_sub_ps(unsigned_b(), eight);  // exact
    lookup32(scaled(splat(f16c_half_at(b)), levels_a, levels_b), nibbles32(b + 2), out);
  }
  QLOAD_AVX2 static void block(Q4_1, const std::uint8_t* b, std::uint16_t* out) {
    const __m256 d = splat(f16c_half_at(b)), m = splat(f16c_half_at(b + 2));
    const Table t =
        narrow(_mm256_add_ps(_mm256_mul_ps(d, unsigned_a()), m), _mm256_add_ps(_mm256_mul_ps(d, unsigned_b()), m));
    lookup32(t, nibbles32(b + 4), out);
  }
  QLOAD_AVX2 static void block(IQ4_NL, const std::uint8_t* b, std::uint16_t* out) {
    lookup32(scaled(splat(f16c_half_at(b)), iq4_a(), iq4_b()), nibbles32(b + 2), out);
  }
  QLOAD_AVX2 static void block(IQ4_XS, const std::uint8_t* b, std::uint16_t* out) {
    float dl[8];
    iq4xs_scales(b, f16c_half_at(b), dl);
    for (unsigned j = 0; j < 8; ++j)
      lookup32(scaled(splat(dl[j]), iq4_a(), iq4_b()), nibbles32(b + 8 + j * 16), out + j * 32);
  }
  QLOAD_AVX2 static void block(Q4_K, const std::uint8_t* b, std::uint16_t* out) {
    float sd[8], sm[8];
    k4_scales(b, f16c_half_at(b), f16c_half_at(b + 2), sd, sm);
    for (unsigned j = 0; j < 8; j += 2, out += 64) {  // runs j and j + 1: the low nibbles of 32 bytes, then the high
      const __m256i q = interleave(load32(b + 16 + j * 16));
      lookup32(minus_table(sd[j], sm[j]), low_nibbles(q), out);
      lookup32(minus_table(sd[j + 1], sm[j + 1]), high_nibbles(q), out + 32);
    }
  }
  // Q2_K and Q3_K: runs of 16 elements, each with its scale (and minimum) over 4 or 8 levels. A
  // table holds two runs' values, the second run's at codes offset by 4 or 8, so 32 elements go
  // through one table: second_run(offset) is that offset on elements 16-31, in lookup32's lanes.
  QLOAD_AVX2 static __m256i second_run(char offset) {
    const __m128i half =
        _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, offset, offset, offset, offset, offset, offset, offset, offset);
    return _mm256_set_m128i(half, half);
  }
  QLOAD_AVX2 static void block(Q2_K, const std::uint8_t* b, std::uint16_t* out) {
    float dl[16], ml[16];
    q2k_scales(b, f16c_half_at(b + 80), f16c_half_at(b + 82), dl, ml);
    const __m256 levels = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    const __m256i offset = second_run(4);
    for (unsigned half = 0; half < 2; ++half) {
      const __m256i q = interleave(load32(b + 16 + half * 32));
      for (unsigned shift = 0; shift < 8; shift += 2, out += 32) {  // runs j and j + 1: codes 0-3, then 4-7
        const unsigned j = half * 8 + shift;
        const __m256i crumbs = _mm256_and_si256(_mm256_srli_epi16(q, static_cast<int>(shift)), _mm256_set1_epi8(3));
        const Table t = narrow(_mm256_sub_ps(_mm256_mul_ps(splat(dl[j]), levels), splat(ml[j])),
                               _mm256_sub_ps(_mm256_mul_ps(splat(dl[j + 1]), levels), splat(ml[j + 1])));
        lookup32(t, _mm256_or_si256(crumbs, offset), out);
      }
    }
  }
  QLOAD_AVX2 static void block(Q3_K, const std::uint8_t* b, std::uint16_t* out) {
    float dl[16];
    q3k_scales(b, f16c_half_at(b + 108), dl);
    const __m256i hmask = interleave(load32(b));
    const __m256 below = _mm256_setr_ps(-4, -3, -2, -1, -4, -3, -2, -1), above = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    const __m256i offset = second_run(8);
    for (unsigned half = 0; half < 2; ++half) {
      const __m256i q = interleave(load32(b + 32 + half * 32));
      for (unsigned shift = 0; shift < 8; shift += 2, out += 32) {
        const unsigned j = half * 8 + shift;
        // Index: the crumb, plus 4 where the high-mask bit is set (code = index - 4), plus 8 for run j + 1.
        const __m256i crumbs = _mm256_and_si256(_mm256_srli_epi16(q, static_cast<int>(shift)), _mm256_set1_epi8(3));
        const __m256i index =
            _mm256_or_si256(_mm256_or_si256(crumbs, where_bit(hmask, half * 4 + shift / 2, true, 4)), offset);
        const __m256 d0 = splat(dl[j]), d1 = splat(dl[j + 1]);
        // Codes 0-3 and 8-11: runs j and j + 1 below zero; 4-7 and 12-15: from zero up.
        const __m256 a = _mm256_blend_ps(_mm256_mul_ps(d0, below), _mm256_mul_ps(d1, below), 0xF0);
        const __m256 b4 = _mm256_blend_ps(_mm256_mul_ps(d0, above), _mm256_mul_ps(d1, above), 0xF0);
        lookup32(narrow(a, b4), index, out);
      }
    }
  }
};

// BF16 outputs: any elements (the NaN rule), and the cheaper narrowing for blocks whose scales
// are finite. MXFP4's elements are never NaN; with the global scale not NaN, every NaN an NVFP4
// element can be is a quiet NaN with no payload (an E4M3 NaN code's, or 0 x Inf's), which the
// plain narrowing keeps a NaN: both take it, NVFP4 through its table where scales are finite.
struct Avx2Outputs {
  using Bf16 = Bf16Out<true>;
  using Bf16Fast = Bf16SplitOut;
  using Fp4Bf16 = Bf16Out<false>;
  using Fp4Bf16Fast = Bf16Out<false>;
  using Bf16Tables = Avx2Bf16Tables;
  static constexpr bool kNvfp4Table = true;
};

// ---- GPTQ rows (2, 4 and 8 bits) -----------------------------------------------------------------

// A qweight word holds 32 / B consecutive columns of one output row (field i is column
// 32w / B + i), so each word is one broadcast load, one variable shift and a mask: no transpose.
// Sixteen columns (one group: a group's word count is a multiple of B / 2) go out at a time, as
// 16 lanes in order or, for an output that takes them so (kEvenOdd), as the even and the odd
// columns. value()'s arithmetic: s * float(q - z), the integer difference exact.
QLOAD_AVX2 __m256i word_at(const std::byte* qweight, std::uint64_t index) {
  return _mm256_set1_epi32(static_cast<int>(load_word(qweight, index)));  // memcpy: parts may be unaligned
}
template <unsigned B>
QLOAD_AVX2 __m256 gptq_scaled(__m256i words, __m256i shifts, __m256i z, __m256 s) {
  const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(words, shifts), _mm256_set1_epi32((1 << B) - 1));
  return _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, z)));
}
// The 16 columns from word w on as two vectors of 8 (in order, or even and odd) with the shift
// of each lane's field: Fields16::of(qweight, stride, w).
template <unsigned B, bool kEvenOdd>
struct Fields16;
template <bool kEvenOdd>
struct Fields16<2, kEvenOdd> {  // one word
  __m256i a, b, shift_a, shift_b;
  QLOAD_AVX2 static Fields16 of(const std::byte* qw, std::uint64_t stride, std::uint64_t w) {
    const __m256i v = word_at(qw, w * stride);
    if constexpr (kEvenOdd)
      return {v, v, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), _mm256_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30)};
    return {v, v, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30)};
  }
};
template <bool kEvenOdd>
struct Fields16<4, kEvenOdd> {  // two words
  __m256i a, b, shift_a, shift_b;
  QLOAD_AVX2 static Fields16 of(const std::byte* qw, std::uint64_t stride, std::uint64_t w) {
    const __m256i lo = word_at(qw, w * stride), hi = word_at(qw, (w + 1) * stride);
    if constexpr (kEvenOdd) {
      const __m256i both = _mm256_blend_epi32(lo, hi, 0xF0);  // word w in lanes 0-3, w + 1 in 4-7
      return {both, both, _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24),
              _mm256_setr_epi32(4, 12, 20, 28, 4, 12, 20, 28)};
    }
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return {lo, hi, shifts, shifts};
  }
};
template <bool kEvenOdd>
struct Fields16<8, kEvenOdd> {  // four words
  __m256i a, b, shift_a, shift_b;
  QLOAD_AVX2 static Fields16 of(const std::byte* qw, std::uint64_t stride, std::uint64_t w) {
    const __m256i w0 = word_at(qw, w * stride), w1 = word_at(qw, (w + 1) * stride);
    const __m256i w2 = word_at(qw, (w + 2) * stride), w3 = word_at(qw, (w + 3) * stride);
    if constexpr (kEvenOdd) {  // words w .. w + 3 two lanes each: columns 4j + 0 and 4j + 2, then + 1 and + 3
      const __m256i pairs =
          _mm256_blend_epi32(_mm256_blend_epi32(w0, w1, 0x0C), _mm256_blend_epi32(w2, w3, 0xC0), 0xF0);
      return {pairs, pairs, _mm256_setr_epi32(0, 16, 0, 16, 0, 16, 0, 16),
              _mm256_setr_epi32(8, 24, 8, 24, 8, 24, 8, 24)};
    }
    const __m256i shifts = _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
    return {_mm256_blend_epi32(w0, w1, 0xF0), _mm256_blend_epi32(w2, w3, 0xF0), shifts, shifts};
  }
};

template <unsigned B, typename Out>
QLOAD_AVX2 void gptq_words(const std::byte* qweight, std::uint64_t stride, std::uint64_t w, std::uint64_t end,
                           std::int32_t z, float s, Out& y) {
  const __m256i vz = _mm256_set1_epi32(z);
  const __m256 vs = _mm256_set1_ps(s);
  for (; w < end; w += B / 2) {
    const auto f = Fields16 < B, requires {
      Out::kEvenOdd;
    }
    > ::of(qweight, stride, w);
    y.put(gptq_scaled<B>(f.a, f.shift_a, vz, vs), gptq_scaled<B>(f.b, f.shift_b, vz, vs));
  }
}
// Act-order: each column's zero point and scale gathered by its group index (in L1: one row's
// groups), the columns in order.
template <unsigned B, typename Out>
QLOAD_AVX2 void gptq_words_indexed(const std::byte* qweight, std::uint64_t stride, std::uint64_t w, std::uint64_t end,
                                   const std::uint32_t* index, const std::int32_t* z, const float* s, Out& y) {
  for (; w < end; w += B / 2) {
    const auto f = Fields16<B, false>::of(qweight, stride, w);
    const std::uint32_t* columns = index + w * (32 / B);
    const __m256i g0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(columns));
    const __m256i g1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(columns + 8));
    y.put(gptq_scaled<B>(f.a, f.shift_a, _mm256_i32gather_epi32(z, g0, 4), _mm256_i32gather_ps(s, g0, 4)),
          gptq_scaled<B>(f.b, f.shift_b, _mm256_i32gather_epi32(z, g1, 4), _mm256_i32gather_ps(s, g1, 4)));
  }
}

// Whether s * (q - z), |q - z| < 2^B, is zero or normal below 2^111 for every code: split_top's range.
template <unsigned B>
bool gptq_split_takes(float s) {
  constexpr float kBelow = B == 2 ? 0x1p109f : B == 4 ? 0x1p107f : 0x1p103f;  // 2^(111 - B)
  const float m = std::fabs(s);
  return m == 0 || (m >= 0x1p-126f && m < kBelow);  // false for NaN and Inf
}

template <unsigned B>
QLOAD_SIMD_LOOP void gptq_row(const std::byte* qweight, std::uint64_t stride, std::uint64_t w0, std::uint64_t w1,
                              std::uint64_t group_words, const std::int32_t* z, const float* s, DType dtype,
                              std::byte* out) {
  for (std::uint64_t w = w0; w < w1;) {
    const std::uint64_t g = w / group_words, end = std::min(w1, (g + 1) * group_words);
    std::byte* at = out + (w - w0) * (32 / B) * dtype_info(dtype).block_bytes;
    if (dtype == DType::kF32) {
      F32Out y{reinterpret_cast<float*>(at)};
      gptq_words<B>(qweight, stride, w, end, z[g], s[g], y);
    } else if (dtype == DType::kF16) {
      F16Out y{reinterpret_cast<std::uint16_t*>(at)};
      gptq_words<B>(qweight, stride, w, end, z[g], s[g], y);
    } else if (gptq_split_takes<B>(s[g])) {
      Bf16SplitOut y{reinterpret_cast<std::uint16_t*>(at)};
      gptq_words<B>(qweight, stride, w, end, z[g], s[g], y);
    } else {
      Bf16Out<true> y{reinterpret_cast<std::uint16_t*>(at)};
      gptq_words<B>(qweight, stride, w, end, z[g], s[g], y);
    }
    w = end;
  }
}
// BF16 by the NaN-keeping rounding: gathering per column costs more than narrowing does.
template <unsigned B>
QLOAD_SIMD_LOOP void gptq_row_indexed(const std::byte* qweight, std::uint64_t stride, std::uint64_t w0,
                                      std::uint64_t w1, const std::uint32_t* index, const std::int32_t* z,
                                      const float* s, DType dtype, std::byte* out) {
  if (dtype == DType::kF32) {
    F32Out y{reinterpret_cast<float*>(out)};
    gptq_words_indexed<B>(qweight, stride, w0, w1, index, z, s, y);
  } else if (dtype == DType::kF16) {
    F16Out y{reinterpret_cast<std::uint16_t*>(out)};
    gptq_words_indexed<B>(qweight, stride, w0, w1, index, z, s, y);
  } else {
    Bf16Out<true> y{reinterpret_cast<std::uint16_t*>(out)};
    gptq_words_indexed<B>(qweight, stride, w0, w1, index, z, s, y);
  }
}

template <unsigned B>
void gptq_row_any(const std::byte* qweight, std::uint64_t stride, std::uint64_t w0, std::uint64_t w1,
                  const GptqGroups& groups, const std::int32_t* z, const float* s, DType dtype, std::byte* out) {
  if (groups.index != nullptr)
    gptq_row_indexed<B>(qweight, stride, w0, w1, groups.index, z, s, dtype, out);
  else
    gptq_row<B>(qweight, stride, w0, w1, groups.words, z, s, dtype, out);
}

QLOAD_SIMD_LOOP void narrow_split(const float* in, std::uint64_t count, std::uint16_t* out) {
  for (std::uint64_t k = 0; k < count; k += 16)
    store_words(out + k, _mm256_srli_epi32(split_top(_mm256_loadu_ps(in + k)), 16),
                _mm256_srli_epi32(split_top(_mm256_loadu_ps(in + k + 8)), 16));
}

}  // namespace

bool cpu_has_avx2() noexcept {
  // (clang's __builtin_cpu_supports does not know "f16c": CPUID leaf 1, ECX bit 29, read once.)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has;
}

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

bool decode_gptq_row_avx2(unsigned bits, const std::byte* qweight, std::uint64_t stride, std::uint64_t w0,
                          std::uint64_t w1, const GptqGroups& groups, const std::int32_t* z, const float* s,
                          DType dtype, std::byte* out) {
  const std::uint64_t step = bits / 2;  // words a put takes
  if (!cpu_has_avx2() || (bits != 2 && bits != 4 && bits != 8) || w0 % step != 0 || w1 % step != 0 ||
      (groups.index == nullptr && groups.words % step != 0) ||
      (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16))
    return false;
  switch (bits) {
    case 2: gptq_row_any<2>(qweight, stride, w0, w1, groups, z, s, dtype, out); break;
    case 4: gptq_row_any<4>(qweight, stride, w0, w1, groups, z, s, dtype, out); break;
    default: gptq_row_any<8>(qweight, stride, w0, w1, groups, z, s, dtype, out); break;
  }
  return true;
}

bool narrow_bf16_split_avx2(const float* in, std::uint64_t count, std::uint16_t* out) {
  if (!cpu_has_avx2()) return false;
  narrow_split(in, count, out);
  return true;
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

bool cpu_has_avx2() noexcept {
  return false;
}
bool decode_gptq_row_avx2(unsigned, const std::byte*, std::uint64_t, std::uint64_t, std::uint64_t, const GptqGroups&,
                          const std::int32_t*, const float*, DType, std::byte*) {
  return false;
}

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
bool narrow_bf16_split_avx2(const float*, std::uint64_t, std::uint16_t*) {
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
