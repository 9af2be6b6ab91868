// The arithmetic of the FP8 codecs (../shared/formats.md section 3.1), on unsigned integers
// like convert_bits.hpp and for the same reasons: results do not depend on rounding modes,
// flush-to-zero or contraction, the loops that call these vectorise (every case is computed
// and one selected, no branches), and a CUDA kernel can compile the very same functions.
//
// E4M3FN: sign 1, exponent 4 (bias 7), mantissa 3. No infinities; S.1111.111 is NaN, so the
//   largest finite value is 0x7E = 448. exponent 0: (m / 8) * 2^-6.
// E5M2: sign 1, exponent 5 (bias 15), mantissa 2, IEEE-like (Inf, NaN): the top byte of an f16.
#pragma once

#include <cstdint>

#include "../convert_bits.hpp"

namespace qload::formats::bits {

// E4M3FN code -> f32 bits, exact. NaN (0x7F, 0xFF) becomes the quiet NaN of the same sign.
QLOAD_CONVERT_HD std::uint32_t e4m3_to_f32(std::uint8_t code) {
  const std::uint32_t c = code;
  const std::uint32_t sign = (c & 0x80u) << 24;
  const std::uint32_t exponent = (c >> 3) & 0x0fu;
  const std::uint32_t mantissa = c & 0x07u;
  // Rebias 7 -> 127 and move the 3 mantissa bits to the top of f32's 23.
  const std::uint32_t normal = ((exponent + 120u) << 23) | (mantissa << 20);
  // m * 2^-9: m as an exact float, then 9 off its exponent field (m >= 1 keeps it normal).
  const std::uint32_t subnormal = select(mantissa == 0u, 0u, exact_float_bits(mantissa) - (9u << 23));
  std::uint32_t result = select(exponent == 0u, subnormal, normal);
  result = select((c & 0x7fu) == 0x7fu, 0x7fc00000u, result);
  return sign | result;
}

// E5M2 code -> f32 bits, exact (an E5M2 code is an f16's top byte; NaN comes out quiet).
QLOAD_CONVERT_HD std::uint32_t e5m2_to_f32(std::uint8_t code) {
  return f16_to_f32(static_cast<std::uint16_t>(static_cast<std::uint32_t>(code) << 8));
}

// x / 2^shift rounded to nearest, ties to even.
template <unsigned shift>
QLOAD_CONVERT_HD std::uint32_t round_shift_right(std::uint32_t x) {
  return (x + ((1u << (shift - 1)) - 1u) + ((x >> shift) & 1u)) >> shift;
}

// f32 bits -> E4M3FN: round to nearest, ties to even, in one step from the f32 value;
// anything at or beyond 448 in magnitude (Inf included) saturates to +-448 (0x7E / 0xFE);
// NaN gives 0x7F with the input's sign; -0 stays -0 (0x80).
QLOAD_CONVERT_HD std::uint8_t f32_to_e4m3(std::uint32_t x) {
  const std::uint32_t sign = (x >> 24) & 0x80u;
  const std::uint32_t a = x & 0x7fffffffu;

  // Normal results (a >= 2^-6 = 0x3c800000): rebias 127 -> 7 and round away the 20 low
  // mantissa bits to nearest even; a carry out of the mantissa bumps the exponent, which is
  // the right answer. Below 448 the result is at most 0x7E (448 itself is representable).
  const std::uint32_t normal = ((a - (120u << 23)) + 0x7ffffu + ((a >> 20) & 1u)) >> 20;

  // Subnormal results (a < 2^-6): the code is round(a * 2^9), i.e. the 24-bit significand
  // shifted right by 141 - e, rounded like above. Only exponents 117..120 give a nonzero
  // code (below 2^-10 everything is under half the smallest subnormal), so the four shifts
  // are spelled out as constants and one selected: a per-element shift needs AVX2, and the
  // loops calling this must vectorise on baseline x86-64 (SSE2). A result of 8 is the code
  // of 2^-6, the smallest normal: also right. f32 subnormals (e = 0) select 0.
  const std::uint32_t exponent = a >> 23;
  const std::uint32_t significand = (a & 0x007fffffu) | 0x00800000u;
  std::uint32_t subnormal = select(exponent == 117u, round_shift_right<24>(significand), 0u);
  subnormal = select(exponent == 118u, round_shift_right<23>(significand), subnormal);
  subnormal = select(exponent == 119u, round_shift_right<22>(significand), subnormal);
  subnormal = select(exponent == 120u, round_shift_right<21>(significand), subnormal);

  std::uint32_t result = select(a < 0x3c800000u, subnormal, normal);
  result = select(a >= 0x43e00000u, 0x7eu, result);  // 448.0f and beyond, Inf included
  result = select(a > 0x7f800000u, 0x7fu, result);   // NaN
  return static_cast<std::uint8_t>(sign | result);
}

}  // namespace qload::formats::bits
