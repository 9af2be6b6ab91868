// GPTQ rows (2, 4 and 8 bits) and BF16 narrowing by the split written for AVX2, as
// rows_avx2.cpp's decoders are (its opening comment says how): rows_avx2_test compares every
// output with the portable decoder, bit for bit.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "bitstream.hpp"
#include "decoders.hpp"
#include "dequantize_element.hpp"
#include "row_decoders.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qload::formats::detail {

#if defined(__x86_64__)
namespace {

#define QLOAD_SIMD_TARGET "avx2,f16c"
#define QLOAD_AVX2 __attribute__((target(QLOAD_SIMD_TARGET), always_inline)) inline
#define QLOAD_SIMD_LOOP __attribute__((target(QLOAD_SIMD_TARGET)))

#include "rows_avx2_outputs.inc"

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

#else  // not x86-64: the portable decoders only

bool decode_gptq_row_avx2(unsigned, const std::byte*, std::uint64_t, std::uint64_t, std::uint64_t, const GptqGroups&,
                          const std::int32_t*, const float*, DType, std::byte*) {
  return false;
}
bool narrow_bf16_split_avx2(const float*, std::uint64_t, std::uint16_t*) {
  return false;
}

#endif

#undef QLOAD_SIMD_LOOP
#undef QLOAD_AVX2
#undef QLOAD_SIMD_TARGET

}  // namespace qload::formats::detail
