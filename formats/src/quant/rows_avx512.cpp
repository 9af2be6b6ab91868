// The GGML block decoders, and OCP MXFP4's and NVFP4's, for CPUs with AVX-512 and its BF16
// conversions (Intel from Cooper Lake and Sapphire Rapids, AMD from Zen 4): rows_x86.inc's code
// assembly, as rows_avx2.cpp has it, with the f32 arithmetic 16 lanes to a vector instead of 8
// and the narrowing to BF16 one instruction. That narrowing is where AVX2 spent half its time:
// VCVTNEPS2BF16 rounds to nearest even and quiets a NaN keeping its top payload bits, as
// bits::f32_to_bf16 does, but reads a subnormal input as zero, so a vector with a subnormal lane
// (rare: only tiny E8M0, E4M3 x global or f32 scales make one) takes the integer rounding
// instead. rows_avx2_test compares every covered type and output with the portable decoder, bit
// for bit, as it does the AVX2 ones.
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
  static constexpr bool kNaN = true, kSubnormal = false;  // what it narrows right
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
  template <typename Out>
  QLOAD_AVX512 static void nvfp4(const std::uint8_t* codes, const float* scales, std::uint64_t count, Out& y) {
    const __m512 levels = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6);
    std::uint64_t j = 0;
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

// BF16 outputs: any elements, and VCVTNEPS2BF16 alone where the scales rule subnormal elements
// out. NVFP4 keeps its own loop (its table was slower here than on AVX2).
struct Avx512Outputs {
  using Bf16 = Bf16Out;
  using Bf16Fast = Bf16NormalOut;
  using Fp4Bf16 = Bf16Out;
  using Fp4Bf16Fast = Bf16NormalOut;
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

#endif

#undef QLOAD_SIMD_LOOP
#undef QLOAD_SIMD
#undef QLOAD_AVX512
#undef QLOAD_SIMD_TARGET

}  // namespace qload::formats::detail
