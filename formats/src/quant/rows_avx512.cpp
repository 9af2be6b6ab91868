// The GGML block decoders, and OCP MXFP4's and NVFP4's, for CPUs with AVX-512 and its BF16
// conversions (Intel from Cooper Lake and Sapphire Rapids, AMD from Zen 4): rows_x86.inc's code
// assembly, as rows_avx2.cpp has it, with the f32 arithmetic 16 lanes to a vector instead of 8
// and the narrowing to BF16 one instruction. That narrowing is where AVX2 spent half its time:
// VCVTNEPS2BF16 rounds to nearest even and quiets a NaN keeping its top payload bits, as
// bits::f32_to_bf16 does, but reads a subnormal input as zero, so a vector with a subnormal lane
// (rare: only tiny E8M0, E4M3 x global or f32 scales make one) takes the integer rounding
// instead. To BF16, most GGML types go through tables of each run's values indexed by VPERMW
// (Avx512Bf16Tables, below). rows_avx2_test compares every covered type and output with the
// portable decoder, bit for bit, as it does the AVX2 ones.
//
// As in rows_avx2.cpp, every function carries the target attribute instead of the file being
// built with -mavx512f, so that nothing from a shared header is emitted here with AVX-512.
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

// GCC 12's AVX-512 intrinsics pass an "undefined" vector as the unused merge source, which its
// own -Wmaybe-uninitialized then reports wherever they are inlined (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qload::formats::detail {

#if defined(__x86_64__)
namespace {

using namespace ggml;

#define QLOAD_SIMD_TARGET "avx2,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512bf16"
#define QLOAD_AVX512 __attribute__((target(QLOAD_SIMD_TARGET), always_inline)) inline

// ---- output: 16 f32 lanes written as F32, BF16 or F16 -------------------------------------------

struct F32Out {
  float* p;
  QLOAD_AVX512 void put(__m512 v) {
    _mm512_storeu_ps(p, v);
    p += 16;
  }
};

// bits::f32_to_bf16 on 16 lanes with integers (rows_avx2.cpp's bf16_bits, NaN rule included).
QLOAD_AVX512 __m256i bf16_by_integers(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan));
}

// VCVTNEPS2BF16 alone, for elements known not to be subnormal (rows_x86.inc checks the scales).
struct Bf16NormalOut {
  static constexpr bool kNaN = true, kSubnormal = false, kHuge = true;  // what it narrows right
  std::uint16_t* p;
  QLOAD_AVX512 void put(__m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), __builtin_bit_cast(__m256i, _mm512_cvtneps_pbh(v)));
    p += 16;
  }
};

// Any elements: the instruction, or the integer rounding for a vector with a subnormal lane.
struct Bf16Out {
  std::uint16_t* p;
  QLOAD_AVX512 void put(__m512 v) {
    constexpr int kSubnormal = 0x20;  // VFPCLASSPS's category bit
    if (_mm512_fpclass_ps_mask(v, kSubnormal) == 0) {
      Bf16NormalOut{p}.put(v);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_by_integers(v));
    }
    p += 16;
  }
};

struct F16Out {
  std::uint16_t* p;
  QLOAD_AVX512 void put(__m512 v) {  // VCVTPS2PH: the F16C rounding and quieting, 16 lanes
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    p += 16;
  }
};

// ---- 16 codes (signed bytes) scaled: d * q, d * q - m, d * q + m --------------------------------

QLOAD_AVX512 __m512 widen(__m128i bytes) {  // 16 signed bytes, as f32 (exact)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}
template <typename Out>
QLOAD_AVX512 void scaled16(Out& y, __m128i q, __m512 d) {
  y.put(_mm512_mul_ps(d, widen(q)));
}
template <typename Out>
QLOAD_AVX512 void scaled16_minus(Out& y, __m128i q, __m512 d, __m512 m) {
  y.put(_mm512_sub_ps(_mm512_mul_ps(d, widen(q)), m));
}
template <typename Out>
QLOAD_AVX512 void scaled16_plus(Out& y, __m128i q, __m512 d, __m512 m) {
  y.put(_mm512_add_ps(_mm512_mul_ps(d, widen(q)), m));
}
QLOAD_AVX512 __m512 splat(float x) {
  return _mm512_set1_ps(x);
}

#include "rows_x86.inc"

// 16 E2M1 codes (one a byte, in element order) through a table of their 16 signed f32 values.
QLOAD_AVX512 __m512 e2m1_lookup(__m128i codes, __m512 table) {
  return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), table);
}

struct Avx512Groups {
  // OCP MXFP4: as rows_avx2.cpp's, with the sign in the table: (-L) * s is -(L * s) bit for bit,
  // the scale being positive and finite, and code 8 is -0 as in the spec's table.
  template <typename Out>
  QLOAD_AVX512 static void mxfp4(const std::uint8_t* codes, __m512 scale, Out& y) {
    const __m512 doubled = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, -0.0f, -1, -2, -3, -4, -6, -8, -12);
    const __m128i q = load16(codes), lo = low_nibbles(q), hi = high_nibbles(q);
    y.put(_mm512_mul_ps(e2m1_lookup(_mm_unpacklo_epi8(lo, hi), doubled), scale));
    y.put(_mm512_mul_ps(e2m1_lookup(_mm_unpackhi_epi8(lo, hi), doubled), scale));
  }

  // NVFP4: `count` groups of 16, each element mul_rn(level, scale) as element::Nvfp4::value,
  // the signed level (code 8 is -0) from the table; two groups (16 bytes of codes) at a time.
  // To BF16 where no product is subnormal (Bf16NormalOut), two groups' 16 values each are
  // narrowed into one table of 32 words (VCVTNE2PS2BF16, the rounding Bf16NormalOut's
  // VCVTNEPS2BF16 gives each element) that VPERMW indexes with the codes: byte i of the codes
  // widened to the word pair (low nibble, high nibble), plus 16 for the second group. One
  // widening shuffle for 32 elements where the direct path spends eight.
  template <typename Out>
  QLOAD_AVX512 static void nvfp4(const std::uint8_t* codes, const float* scales, std::uint64_t count, Out& y) {
    const __m512 levels = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
    std::uint64_t j = 0;
    if constexpr (std::is_same_v<Out, Bf16NormalOut>) {
      const __m512i second = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x00100010, 0x00100010, 0x00100010, 0x00100010,
                                               0x00100010, 0x00100010, 0x00100010, 0x00100010);
      for (; j + 2 <= count; j += 2, codes += 16, y.p += 32) {
        const __m512i b = _mm512_cvtepu8_epi32(load16(codes));  // dword i: byte i (elements 2i, 2i + 1)
        const __m512i pairs =
            _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(b, _mm512_set1_epi32(0x0F)),
                                            _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0xF0)), 12)),
                            second);
        const __m512i table =
            __builtin_bit_cast(__m512i, _mm512_cvtne2ps_pbh(_mm512_mul_ps(levels, _mm512_set1_ps(scales[j + 1])),
                                                            _mm512_mul_ps(levels, _mm512_set1_ps(scales[j]))));
        _mm512_storeu_si512(y.p, _mm512_permutexvar_epi16(pairs, table));
      }
    }
    for (; j + 2 <= count; j += 2, codes += 16) {
      const __m128i q = load16(codes), lo = low_nibbles(q), hi = high_nibbles(q);
      y.put(_mm512_mul_ps(e2m1_lookup(_mm_unpacklo_epi8(lo, hi), levels), splat(scales[j])));
      y.put(_mm512_mul_ps(e2m1_lookup(_mm_unpackhi_epi8(lo, hi), levels), splat(scales[j + 1])));
    }
    if (j < count) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes));
      y.put(_mm512_mul_ps(e2m1_lookup(_mm_unpacklo_epi8(low_nibbles(q), high_nibbles(q)), levels), splat(scales[j])));
    }
  }
};

// GGML blocks to BF16 through a table of each run's values, for the types whose runs have at
// most as many values as elements: a run's values (value()'s f32 product and minimum for every
// code) narrowed by VCVTNEPS2BF16 into one vector of BF16 words, which VPERMW indexes with the
// codes (widened to words): each element one word permute, where the direct path converts,
// multiplies and narrows it. 16 values for Q4_0, Q4_1, IQ4_NL, IQ4_XS and Q4_K runs of 32; four
// runs of 16 elements in one table for Q2_K (4 values each) and Q3_K (8); 32 for Q5_K. decode_rows
// sends only blocks whose scales are finite, whose values are never NaN nor subnormal (all
// multiples of f16's smallest step), so the instruction narrows them as Bf16NormalOut does.
// Measured with the blocks in L1 (qload_quant_bench --rows 64 --cols 4096, GB/s of output on one
// core, the direct path -> these): Q2_K 14.6 -> 35.7, Q3_K 17.7 -> 25, Q4_0 22 -> 30, Q4_K
// 18 -> 33, IQ4_XS 22 -> 31.6, Q5_K 15.1 -> 20.6-21.2 (32-value tables made by one
// VCVTNE2PS2BF16; two conversions and an insert gave 17-18). Tables narrowed with integers as
// AVX2's are (Avx2Bf16Tables: byte lookups) reached 17.6 / 18.8 / 22 / 20 / 22 for the first five.
struct Avx512Bf16Tables {
  // A table of up to 32 values: the low 16 in `low`, the next in `high` (if any).
  QLOAD_AVX512 static __m512i table(__m512 low) {
    return _mm512_castsi256_si512(__builtin_bit_cast(__m256i, _mm512_cvtneps_pbh(low)));
  }
  QLOAD_AVX512 static __m512i table(__m512 low, __m512 high) {  // VCVTNE2PS2BF16: words 0-15 from `low`
    return __builtin_bit_cast(__m512i, _mm512_cvtne2ps_pbh(high, low));
  }
  // 32 elements whose codes (indices into t) are the bytes of c in element order.
  QLOAD_AVX512 static void lookup32(__m512i t, __m256i c, std::uint16_t* out) {
    _mm512_storeu_si512(out, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(c), t));
  }
  // The 32 nibbles of 16 bytes in GGML's order: the low ones, then the high ones.
  QLOAD_AVX512 static __m256i nibbles32(const std::uint8_t* qs) {
    const __m128i q = load16(qs);
    return _mm256_set_m128i(high_nibbles(q), low_nibbles(q));
  }
  QLOAD_AVX512 static __m512 levels16() { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  QLOAD_AVX512 static __m512 iq4_levels16() {
    return _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  }
  // d * level - m for levels 0-15 (and 16-31).
  QLOAD_AVX512 static __m512 minus(float d, float m, __m512 levels) {
    return _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d), levels), _mm512_set1_ps(m));
  }

  QLOAD_AVX512 static void block(Q4_0, const std::uint8_t* b, std::uint16_t* out) {
    const __m512 levels = _mm512_sub_ps(levels16(), _mm512_set1_ps(8));  // exact
    lookup32(table(_mm512_mul_ps(_mm512_set1_ps(f16c_half_at(b)), levels)), nibbles32(b + 2), out);
  }
  QLOAD_AVX512 static void block(Q4_1, const std::uint8_t* b, std::uint16_t* out) {
    const __m512 d = _mm512_set1_ps(f16c_half_at(b)), m = _mm512_set1_ps(f16c_half_at(b + 2));
    lookup32(table(_mm512_add_ps(_mm512_mul_ps(d, levels16()), m)), nibbles32(b + 4), out);
  }
  QLOAD_AVX512 static void block(IQ4_NL, const std::uint8_t* b, std::uint16_t* out) {
    lookup32(table(_mm512_mul_ps(_mm512_set1_ps(f16c_half_at(b)), iq4_levels16())), nibbles32(b + 2), out);
  }
  QLOAD_AVX512 static void block(IQ4_XS, const std::uint8_t* b, std::uint16_t* out) {
    float dl[8];
    iq4xs_scales(b, f16c_half_at(b), dl);
    for (unsigned j = 0; j < 8; ++j)
      lookup32(table(_mm512_mul_ps(_mm512_set1_ps(dl[j]), iq4_levels16())), nibbles32(b + 8 + j * 16), out + j * 32);
  }
  // Q4_K and Q5_K: runs j and j + 1 of each 32 bytes of codes, its low nibbles, then its high ones.
  // (Written as a loop over the two, the scales are broadcast from memory, not shuffled out of a
  // register: measured, the shuffles made Q4_K 1.4x slower.)
  QLOAD_AVX512 static void block(Q4_K, const std::uint8_t* b, std::uint16_t* out) {
    float sd[8], sm[8];
    k4_scales(b, f16c_half_at(b), f16c_half_at(b + 2), sd, sm);
    for (unsigned j = 0; j < 8; j += 2) {
      const __m256i q = load32(b + 16 + j * 16);
      const __m256i codes[2] = {low_nibbles(q), high_nibbles(q)};
      for (unsigned r = 0; r < 2; ++r, out += 32)
        lookup32(table(minus(sd[j + r], sm[j + r], levels16())), codes[r], out);
    }
  }
  QLOAD_AVX512 static void block(Q5_K, const std::uint8_t* b, std::uint16_t* out) {
    float sd[8], sm[8];
    k4_scales(b, f16c_half_at(b), f16c_half_at(b + 2), sd, sm);
    const __m256i qh = load32(b + 16);
    const __m512 high = _mm512_add_ps(levels16(), _mm512_set1_ps(16));
    for (unsigned j = 0; j < 8; j += 2) {
      const __m256i q = load32(b + 48 + j * 16);
      const __m256i codes[2] = {_mm256_or_si256(low_nibbles(q), where_bit(qh, j, true, 0x10)),
                                _mm256_or_si256(high_nibbles(q), where_bit(qh, j + 1, true, 0x10))};
      for (unsigned r = 0; r < 2; ++r, out += 32)
        lookup32(table(minus(sd[j + r], sm[j + r], levels16()), minus(sd[j + r], sm[j + r], high)), codes[r], out);
    }
  }
  // Q2_K and Q3_K: runs of 16 elements, several in one table, run j's values at codes 0-3
  // (Q3_K: 0-7) and the next run's after them: second_run(offset, base) is the index offset of
  // elements 0-15 (base) and 16-31 (base + offset) of 32 elements.
  QLOAD_AVX512 static __m256i second_run(char offset, char base = 0) {
    return _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(base + offset)), _mm_set1_epi8(base));
  }
  // Q2_K: four runs (4 levels each) in one table, lane 4r + c: run j + r, code c.
  QLOAD_AVX512 static void block(Q2_K, const std::uint8_t* b, std::uint16_t* out) {
    float dl[16], ml[16];
    q2k_scales(b, f16c_half_at(b + 80), f16c_half_at(b + 82), dl, ml);
    const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    const __m512i run_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (unsigned half = 0; half < 2; ++half) {
      const __m256i q = load32(b + 16 + half * 32);
      for (unsigned shift = 0; shift < 8; shift += 4) {  // runs j to j + 3: two shifts of the same bytes
        const unsigned j = half * 8 + shift;
        const __m512 d = _mm512_permutexvar_ps(run_of_lane, _mm512_castps128_ps512(_mm_loadu_ps(dl + j)));
        const __m512 m = _mm512_permutexvar_ps(run_of_lane, _mm512_castps128_ps512(_mm_loadu_ps(ml + j)));
        const __m512i t = table(_mm512_sub_ps(_mm512_mul_ps(d, levels), m));
        for (unsigned pair = 0; pair < 2; ++pair, out += 32) {  // runs j + 2 pair and j + 2 pair + 1
          const int s2 = static_cast<int>(shift + 2 * pair);
          const __m256i crumbs = _mm256_and_si256(_mm256_srli_epi16(q, s2), _mm256_set1_epi8(3));
          lookup32(t, _mm256_or_si256(crumbs, second_run(4, static_cast<char>(8 * pair))), out);
        }
      }
    }
  }
  // Q3_K: four runs (8 levels each) in one table of 32, lane 8r + c: run j + r, code c - 4.
  QLOAD_AVX512 static void block(Q3_K, const std::uint8_t* b, std::uint16_t* out) {
    float dl[16];
    q3k_scales(b, f16c_half_at(b + 108), dl);
    const __m256i hmask = load32(b);
    const __m512 levels = _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3);
    const __m512i first_two = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i last_two = _mm512_add_epi32(first_two, _mm512_set1_epi32(2));
    for (unsigned half = 0; half < 2; ++half) {
      const __m256i q = load32(b + 32 + half * 32);
      for (unsigned shift = 0; shift < 8; shift += 4) {  // runs j to j + 3: two shifts of the same bytes
        const unsigned j = half * 8 + shift;
        const __m512 d = _mm512_castps128_ps512(_mm_loadu_ps(dl + j));
        const __m512i t = table(_mm512_mul_ps(_mm512_permutexvar_ps(first_two, d), levels),
                                _mm512_mul_ps(_mm512_permutexvar_ps(last_two, d), levels));
        for (unsigned pair = 0; pair < 2; ++pair, out += 32) {  // runs j + 2 pair and j + 2 pair + 1
          const unsigned s2 = shift + 2 * pair;
          // Index: the crumb, plus 4 where the high-mask bit is set (code = index - 4), plus the run's 8 c.
          const __m256i crumbs = _mm256_and_si256(_mm256_srli_epi16(q, static_cast<int>(s2)), _mm256_set1_epi8(3));
          const __m256i index = _mm256_or_si256(_mm256_or_si256(crumbs, where_bit(hmask, half * 4 + s2 / 2, true, 4)),
                                                second_run(8, static_cast<char>(16 * pair)));
          lookup32(t, index, out);
        }
      }
    }
  }
};

// BF16 outputs: any elements, and VCVTNEPS2BF16 alone where the scales rule subnormal elements
// out. NVFP4 keeps its own loop (its table was slower here than on AVX2).
struct Avx512Outputs {
  using Bf16 = Bf16Out;
  using Bf16Fast = Bf16NormalOut;
  using Fp4Bf16 = Bf16Out;
  using Fp4Bf16Fast = Bf16NormalOut;
  using Bf16Tables = Avx512Bf16Tables;
  static constexpr bool kNvfp4Table = false;
};

bool cpu_has_avx512() noexcept {
  // AVX-512 F/VL/BW/DQ (with the OS saving their registers: __builtin_cpu_supports checks), F16C
  // (CPUID 1, ECX bit 29) and AVX512_BF16 (CPUID 7.1, EAX bit 5), read once.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && f16c && bf16;
  }();
  return has;
}

// `count` bytes of codes through a table of 256 16-bit words: eight 512-bit vectors of 32
// words; VPERMI2W looks 32 codes up in 64 words at a time (its 6 index bits), and bits 6 and 7
// of each code pick among the four results. About ten instructions for 32 codes, where a scalar
// loop spends a load and a store on each.
QLOAD_SIMD_LOOP void lookup_words(const std::uint16_t* table, const std::uint8_t* codes, std::uint64_t count,
                                  std::byte* out) {
  __m512i t[8];
  for (unsigned i = 0; i < 8; ++i) t[i] = _mm512_loadu_si512(table + 32 * i);
  const __m512i bit6 = _mm512_set1_epi16(0x40), bit7 = _mm512_set1_epi16(0x80);
  std::uint64_t k = 0;
  for (; k + 32 <= count; k += 32) {
    const __m512i idx = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k)));
    const __mmask32 high64 = _mm512_test_epi16_mask(idx, bit6), high128 = _mm512_test_epi16_mask(idx, bit7);
    const __m512i low = _mm512_mask_blend_epi16(high64, _mm512_permutex2var_epi16(t[0], idx, t[1]),
                                                _mm512_permutex2var_epi16(t[2], idx, t[3]));
    const __m512i high = _mm512_mask_blend_epi16(high64, _mm512_permutex2var_epi16(t[4], idx, t[5]),
                                                 _mm512_permutex2var_epi16(t[6], idx, t[7]));
    _mm512_storeu_si512(out + 2 * k, _mm512_mask_blend_epi16(high128, low, high));
  }
  for (; k < count; ++k) std::memcpy(out + 2 * k, table + codes[k], 2);
}

}  // namespace

bool ggml_avx512_decodes(std::uint32_t type) noexcept {
  bool covered = false;
  ggml::with_block_type(type, [&](auto t) { covered = Covered<decltype(t)>; });
  return covered && cpu_has_avx512();
}

bool decode_block_rows_avx512(std::uint32_t type, const std::uint8_t* base, std::uint64_t row_bytes, std::uint64_t cols,
                              std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out) {
  return ggml_avx512_decodes(type) &&
         block_rows<Avx512Outputs>(type, base, row_bytes, cols, row_begin, row_end, dtype, out);
}

bool decode_mxfp4_rows_avx512(const std::uint8_t* codes, const std::uint8_t* exponents, std::uint64_t cols,
                              std::uint64_t row_begin, std::uint64_t row_end, DType dtype, std::byte* out) {
  return cpu_has_avx512() && cols % 32 == 0 &&
         mxfp4_rows<Avx512Groups, Avx512Outputs>(codes, exponents, cols, row_begin, row_end, dtype, out);
}

bool decode_nvfp4_rows_avx512(const DequantArgs& a, std::uint64_t row_begin, std::uint64_t row_end, DType dtype,
                              std::byte* out) {
  return cpu_has_avx512() && nvfp4_rows_fit(a) &&
         nvfp4_rows<Avx512Groups, Avx512Outputs>(a, row_begin, row_end, dtype, out);
}

bool lookup_words_avx512(const std::uint16_t* table, const std::uint8_t* codes, std::uint64_t count, std::byte* out) {
  if (!cpu_has_avx512()) return false;
  lookup_words(table, codes, count, out);
  return true;
}

#else  // not x86-64: the portable decoders only

bool ggml_avx512_decodes(std::uint32_t) noexcept {
  return false;
}
bool decode_block_rows_avx512(std::uint32_t, const std::uint8_t*, std::uint64_t, std::uint64_t, std::uint64_t,
                              std::uint64_t, DType, std::byte*) {
  return false;
}
bool decode_mxfp4_rows_avx512(const std::uint8_t*, const std::uint8_t*, std::uint64_t, std::uint64_t, std::uint64_t,
                              DType, std::byte*) {
  return false;
}
bool decode_nvfp4_rows_avx512(const DequantArgs&, std::uint64_t, std::uint64_t, DType, std::byte*) {
  return false;
}
bool lookup_words_avx512(const std::uint16_t*, const std::uint8_t*, std::uint64_t, std::byte*) {
  return false;
}

#endif

#undef QLOAD_SIMD_LOOP
#undef QLOAD_SIMD
#undef QLOAD_AVX512
#undef QLOAD_SIMD_TARGET

}  // namespace qload::formats::detail
