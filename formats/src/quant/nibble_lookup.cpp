#include "nibble_lookup.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qload::formats::detail {
namespace {

void interleaved_scalar(const float* table, const std::uint8_t* codes, std::size_t count, float* y) {
  for (std::size_t j = 0; j < count; ++j) {
    y[2 * j] = table[codes[j] & 0xFu];
    y[2 * j + 1] = table[codes[j] >> 4u];
  }
}

void split_scalar(const float* table, const std::uint8_t* codes, std::size_t count, float* y) {
  for (std::size_t j = 0; j < count; ++j) {
    y[j] = table[codes[j] & 0xFu];
    y[count + j] = table[codes[j] >> 4u];
  }
}

#if defined(__x86_64__)
// 8 codes (int32 lanes, 0..15) looked up in the 16-entry table held as two halves: a permute of
// each half by the low 3 bits, the upper half's result chosen where bit 3 is set.
__attribute__((target("avx2"))) inline __m256 lookup8(__m256 low, __m256 high, __m256i codes) {
  const __m256 from_low = _mm256_permutevar8x32_ps(low, codes);
  const __m256 from_high = _mm256_permutevar8x32_ps(high, codes);
  return _mm256_blendv_ps(from_low, from_high, _mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)));
}

__attribute__((target("avx2"))) inline void interleaved_avx2(const float* table, const std::uint8_t* codes,
                                                             std::size_t count, float* y) {
  const __m256 low = _mm256_loadu_ps(table), high = _mm256_loadu_ps(table + 8);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  std::size_t j = 0;
  for (; j + 8 <= count; j += 8, y += 16) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j));
    const __m128i lo = _mm_and_si128(bytes, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    const __m128i pairs = _mm_unpacklo_epi8(lo, hi);  // element order: lo0 hi0 lo1 hi1 ...
    _mm256_storeu_ps(y, lookup8(low, high, _mm256_cvtepu8_epi32(pairs)));
    _mm256_storeu_ps(y + 8, lookup8(low, high, _mm256_cvtepu8_epi32(_mm_srli_si128(pairs, 8))));
  }
  interleaved_scalar(table, codes + j, count - j, y);
}

__attribute__((target("avx2"))) void groups_avx2(const float* tables, const std::uint8_t* codes, std::size_t groups,
                                                 std::size_t group_bytes, float* y) {
  for (std::size_t g = 0; g < groups; ++g)
    interleaved_avx2(tables + 16 * g, codes + g * group_bytes, group_bytes, y + 2 * g * group_bytes);
}

__attribute__((target("avx2"))) void split_avx2(const float* table, const std::uint8_t* codes, std::size_t count,
                                                float* y) {
  const __m256 low = _mm256_loadu_ps(table), high = _mm256_loadu_ps(table + 8);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  std::size_t j = 0;
  for (; j + 8 <= count; j += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j));
    const __m128i lo = _mm_and_si128(bytes, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    _mm256_storeu_ps(y + j, lookup8(low, high, _mm256_cvtepu8_epi32(lo)));
    _mm256_storeu_ps(y + count + j, lookup8(low, high, _mm256_cvtepu8_epi32(hi)));
  }
  for (; j < count; ++j) {
    y[j] = table[codes[j] & 0xFu];
    y[count + j] = table[codes[j] >> 4u];
  }
}
#endif

}  // namespace

bool nibble_lookup_uses_avx2() noexcept {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");  // a fact of the CPU, read once
  return avx2;
#else
  return false;
#endif
}

void lookup_groups_interleaved(const float* tables, const std::uint8_t* codes, std::size_t groups,
                               std::size_t group_bytes, float* y) {
#if defined(__x86_64__)
  if (nibble_lookup_uses_avx2()) return groups_avx2(tables, codes, groups, group_bytes, y);
#endif
  for (std::size_t g = 0; g < groups; ++g)
    interleaved_scalar(tables + 16 * g, codes + g * group_bytes, group_bytes, y + 2 * g * group_bytes);
}

void lookup_nibbles_split(const float* table, const std::uint8_t* codes, std::size_t count, float* y) {
#if defined(__x86_64__)
  if (nibble_lookup_uses_avx2()) return split_avx2(table, codes, count, y);
#endif
  split_scalar(table, codes, count, y);
}

}  // namespace qload::formats::detail
