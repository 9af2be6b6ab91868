// The GGML block decoders, OCP MXFP4's and NVFP4's, written for AVX2 (GPTQ rows:
// rows_avx2_gptq.cpp) (ggml-quants.c's AVX2
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

#include "rows_avx2_outputs.inc"

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
