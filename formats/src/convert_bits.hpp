// The arithmetic of every float conversion, shared by convert.cpp (host) and convert.cu
// (device) so that CPU and GPU results are bit-identical by construction: both compile these
// very functions. Plain C++17 (nvcc compiles the .cu side with its own dialect) on unsigned
// integers (one exact int -> float conversion aside, see f16_to_f32), so nothing depends on a
// floating-point unit's rounding mode, flush-to-zero or denormals-are-zero settings, or on
// how a compiler contracts float expressions.
//
// Written without branches (every case computed, one selected) because convert()'s loops
// must vectorise, and a warp must not diverge on a subnormal.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QLOAD_CONVERT_HD __host__ __device__ __forceinline__
#else
#define QLOAD_CONVERT_HD inline
#endif

namespace qload::formats::bits {

// condition ? if_true : if_false, spelled as masks so that compilers emit a compare-and-blend, not a branch.
QLOAD_CONVERT_HD std::uint32_t select(bool condition, std::uint32_t if_true, std::uint32_t if_false) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(condition);
  return (if_true & mask) | (if_false & ~mask);
}

// f32 -> bf16: bf16 is the top half of an f32, so rounding is adding just under half of
// the dropped 16 bits plus the kept part's lowest bit (ties to even) and truncating. The
// carry walks into the exponent by itself: the largest mantissa rounds up to the next
// binade, and past the largest finite value to the Inf pattern 0x7f80.
QLOAD_CONVERT_HD std::uint16_t f32_to_bf16(std::uint32_t x) {
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  // NaN: keep sign and the payload's top 6 bits, set the quiet bit (bit 6 of bf16).
  const std::uint32_t nan = (x >> 16) | 0x0040u;
  return static_cast<std::uint16_t>(select((x & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

// bf16 -> f32: exact; a signalling NaN is quieted (payload kept whole) like every NaN out
// of this codec.
QLOAD_CONVERT_HD std::uint32_t bf16_to_f32(std::uint16_t h) {
  const std::uint32_t x = static_cast<std::uint32_t>(h) << 16;
  return select((x & 0x7fffffffu) > 0x7f800000u, x | 0x00400000u, x);
}

// f32 -> f16. f16 has 5 exponent bits (bias 15) and 10 mantissa bits. One rounding serves
// normal and subnormal results: the 24-bit significand (implicit bit included) is shifted
// right by s with round to nearest even, where s = 13 for a normal result and 126 - e
// (e the f32 exponent field) for a subnormal one, then the exponent is added back on top:
// (e - 113) << 10, because the kept implicit bit already counts as one exponent step. A
// rounding carry into bit 11 bumps the exponent, which is the right answer, also from the
// largest subnormal into the smallest normal. s is clamped to 25: from there the value is
// under half of the smallest subnormal and rounds to 0 (an exact half rounds to the even 0),
// and it covers f32 subnormals (e = 0, given the implicit bit harmlessly).
QLOAD_CONVERT_HD std::uint16_t f32_to_f16(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;

  const std::int32_t exponent = static_cast<std::int32_t>(a >> 23);
  const std::int32_t wanted_shift = 126 - exponent;
  const auto shift = static_cast<std::uint32_t>(wanted_shift < 13 ? 13 : (wanted_shift > 25 ? 25 : wanted_shift));
  const auto exponent_bits = static_cast<std::uint32_t>((exponent > 113 ? exponent : 113) - 113) << 10;
  const std::uint32_t significand = (a & 0x007fffffu) | 0x00800000u;
  const std::uint32_t half_minus_one = (1u << (shift - 1)) - 1u;
  const std::uint32_t finite =
      ((significand + half_minus_one + ((significand >> shift) & 1u)) >> shift) + exponent_bits;

  // 65520 = largest finite (65504) + half its ulp: a tie, and 65504's mantissa is odd, so
  // from there on everything rounds to Inf. Inf itself takes this path too.
  const std::uint32_t inf = 0x7c00u;
  // NaN: quiet bit (bit 9) set, the payload's top 9 bits kept below it.
  const std::uint32_t nan = 0x7e00u | ((a >> 13) & 0x01ffu);

  std::uint32_t result = select(a >= 0x477ff000u, inf, finite);
  result = select(a > 0x7f800000u, nan, result);
  return static_cast<std::uint16_t>(sign | result);
}

// f16 -> f32: exact. A subnormal f16 is m * 2^-24 with 0 < m < 1024, a normal f32 whose
// exponent depends on m's leading bit. That bit is found by converting m to float: the one
// non-integer step in this file, and an exact one (every integer below 2^24 is a float), so
// no rounding mode, flush-to-zero or denormals-are-zero setting can change it, host or
// device. It vectorises on every x86-64 (cvtdq2ps), where a count-leading-zeros has no
// vector form before AVX-512 and a branch-free shift search was 3x slower. The float's bits
// are then scaled by 2^-24 by subtracting 24 from the exponent field.
QLOAD_CONVERT_HD std::uint32_t exact_float_bits(std::uint32_t small_integer) {
  const float value = static_cast<float>(static_cast<std::int32_t>(small_integer));
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  std::uint32_t out;
  __builtin_memcpy(&out, &value, sizeof out);
  return out;
#endif
}

QLOAD_CONVERT_HD std::uint32_t f16_to_f32(std::uint16_t h) {
  const std::uint32_t x = h;
  const std::uint32_t sign = (x & 0x8000u) << 16;
  const std::uint32_t exponent = (x >> 10) & 0x1fu;
  const std::uint32_t mantissa = x & 0x03ffu;

  const std::uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);
  // For mantissa == 0 (a zero) the subtraction wraps; the select puts 0 there instead.
  const std::uint32_t subnormal = select(mantissa == 0u, 0u, exact_float_bits(mantissa) - (24u << 23));
  // Inf keeps a zero mantissa; NaN keeps its whole payload and gets the quiet bit.
  const std::uint32_t special = 0x7f800000u | (mantissa << 13) | select(mantissa != 0u, 0x00400000u, 0u);

  std::uint32_t result = select(exponent == 0u, subnormal, normal);
  result = select(exponent == 0x1fu, special, result);
  return sign | result;
}

}  // namespace qload::formats::bits
