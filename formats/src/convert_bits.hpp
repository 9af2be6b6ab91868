// The arithmetic of every float conversion, shared by convert.cpp (host) and convert.cu
// (device) so that CPU and GPU results are bit-identical by construction: both compile these
// very functions. Plain C++17 (nvcc compiles the .cu side with its own dialect) on unsigned
// integers only, so nothing depends on a floating-point unit's rounding mode, flush-to-zero
// or denormals-are-zero settings, or on how a compiler contracts float expressions.
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

// f32 -> f16. f16 has 5 exponent bits (bias 15) and 10 mantissa bits; an f32 exponent e
// (bias 127) maps to e - 112.
QLOAD_CONVERT_HD std::uint16_t f32_to_f16(std::uint32_t x) {
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;

  // Normal results (a >= 2^-14): rebias, then round the 13 dropped bits to nearest even;
  // a carry out of the mantissa bumps the exponent, which is the right answer.
  const std::uint32_t normal = ((a - (112u << 23)) + 0x0fffu + ((a >> 13) & 1u)) >> 13;

  // Subnormal results (a < 2^-14): the f16 value is round(significand * 2^-s) with the full
  // 24-bit significand and s = 126 - e >= 14, rounded like the normal case but with a
  // per-element shift (one instruction on AVX2 and on the GPU). A shift of 25 or more leaves
  // less than half of the smallest subnormal (even an exact half rounds to the even 0), so
  // s is clamped to 25, which also keeps it in range for the lanes where this result is not
  // used (unsigned wrap-around sends them to the clamp too). An f32 subnormal (e = 0)
  // always lands there, so giving it the implicit bit is harmless.
  const std::uint32_t exponent = a >> 23;
  const std::uint32_t significand = (a & 0x007fffffu) | 0x00800000u;
  const std::uint32_t shift_raw = 126u - exponent;
  const std::uint32_t shift = shift_raw < 25u ? shift_raw : 25u;
  const std::uint32_t half_minus_one = ((1u << shift) >> 1) - 1u;
  const std::uint32_t subnormal = (significand + half_minus_one + ((significand >> shift) & 1u)) >> shift;

  // 65520 = largest finite (65504) + half its ulp: a tie, and 65504's mantissa is odd, so
  // from there on everything rounds to Inf. Inf itself takes this path too.
  const std::uint32_t inf = 0x7c00u;
  // NaN: quiet bit (bit 9) set, the payload's top 9 bits kept below it.
  const std::uint32_t nan = 0x7e00u | ((a >> 13) & 0x01ffu);

  std::uint32_t result = select(a < 0x38800000u, subnormal, normal);
  result = select(a >= 0x477ff000u, inf, result);
  result = select(a > 0x7f800000u, nan, result);
  return static_cast<std::uint16_t>(sign | result);
}

// f16 -> f32: exact. A subnormal f16 (m * 2^-24, 0 < m < 1024) becomes a normal f32: m is
// shifted left until its leading bit reaches bit 10 (k steps, 1 <= k <= 10), giving
// 1.f * 2^(-14 - k). The shift count is found by a branch-free binary search of fixed shifts
// (8, 4, 2, 1, 1) rather than a count-leading-zeros, which has no vector form before
// AVX-512.
QLOAD_CONVERT_HD std::uint32_t f16_to_f32(std::uint16_t h) {
  const std::uint32_t x = h;
  const std::uint32_t sign = (x & 0x8000u) << 16;
  const std::uint32_t exponent = (x >> 10) & 0x1fu;
  const std::uint32_t mantissa = x & 0x03ffu;

  const std::uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);

  std::uint32_t v = mantissa;
  std::uint32_t k = 0;
  bool c = v < (0x400u >> 8);
  v = select(c, v << 8, v);
  k += select(c, 8u, 0u);
  c = v < (0x400u >> 4);
  v = select(c, v << 4, v);
  k += select(c, 4u, 0u);
  c = v < (0x400u >> 2);
  v = select(c, v << 2, v);
  k += select(c, 2u, 0u);
  c = v < (0x400u >> 1);
  v = select(c, v << 1, v);
  k += select(c, 1u, 0u);
  c = v < 0x400u;
  v = select(c, v << 1, v);
  k += select(c, 1u, 0u);
  // For mantissa == 0 (a zero) this is garbage, replaced by 0 below.
  const std::uint32_t subnormal = select(mantissa == 0u, 0u, ((113u - k) << 23) | ((v & 0x03ffu) << 13));

  // Inf keeps a zero mantissa; NaN keeps its whole payload and gets the quiet bit.
  const std::uint32_t special = 0x7f800000u | (mantissa << 13) | select(mantissa != 0u, 0x00400000u, 0u);

  std::uint32_t result = select(exponent == 0u, subnormal, normal);
  result = select(exponent == 0x1fu, special, result);
  return sign | result;
}

}  // namespace qload::formats::bits
