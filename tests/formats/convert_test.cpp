// Float dtype conversions (convert.hpp) against references that share none of its bit tricks:
//   - f16: GCC's _Float16 type. Its conversions to and from float are IEEE 754 round to
//     nearest even, done by libgcc's soft-fp (__truncsfhf2 / __extendhfsf2) on baseline
//     x86-64, code written independently of ours.
//   - bf16 (and f16 again, to validate the reference itself against _Float16): nearest_bits()
//     below, which finds the two representable values bracketing the exact value in double
//     arithmetic (frexp/ldexp/floor, all exact here), picks the nearer, ties to the even
//     significand, and builds the bit pattern from the sign, exponent and significand fields.
//     Overflow falls out of the same rule: past max_finite + half an ulp the nearer neighbour
//     is 2^(emax+1), which is Inf.
//   - decoding (bf16/f16 -> value) from the fields with ldexp.
// NaN results are checked against the documented rule instead of a reference: NaN, same sign,
// quiet bit set, the payload's top bits kept.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qload/formats/convert.hpp"
#include "qload/runtime/dtype.hpp"

using namespace qload;
using namespace qload::formats;

namespace {

// A binary16-like format: 1 sign bit, exponent bits, `mantissa_bits` stored significand bits.
struct Format {
  int mantissa_bits;
  int emax;  // largest unbiased exponent of a finite value; the bias equals it
  int emin() const { return 1 - emax; }
};
constexpr Format kF16{10, 15};
constexpr Format kBF16{7, 127};

// The value of a bit pattern of `f`, from its fields.
double decode(std::uint16_t bits, Format f) {
  const int exponent_bits = 15 - f.mantissa_bits;
  const int field = (bits >> f.mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (field == (1 << exponent_bits) - 1) return mantissa == 0 ? sign * INFINITY : NAN;
  if (field == 0) return sign * std::ldexp(mantissa, f.emin() - f.mantissa_bits);
  return sign * std::ldexp((1 << f.mantissa_bits) + mantissa, field - f.emax - f.mantissa_bits);
}

// The bit pattern of `f` nearest to the non-NaN `value` (ties to even, overflow to Inf).
std::uint16_t nearest_bits(double value, Format f) {
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const double a = std::fabs(value);
  const std::uint16_t inf = static_cast<std::uint16_t>(((1 << (15 - f.mantissa_bits)) - 1) << f.mantissa_bits);
  if (std::isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e = 0;
  (void)std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): a's leading bit is 2^(e-1)
  const int quantum_exp = std::max(e - 1, f.emin()) - f.mantissa_bits;  // spacing of f's values near a
  const double scaled = std::ldexp(a, -quantum_exp);                    // exact: a power-of-two scaling
  const double low = std::floor(scaled);
  const double high = low + 1;
  double k = low;
  if (scaled - low > high - scaled) k = high;
  if (scaled - low == high - scaled) k = std::fmod(low, 2.0) == 0 ? low : high;
  const double rounded = std::ldexp(k, quantum_exp);
  if (rounded >= std::ldexp(1.0, f.emax + 1)) return sign | inf;
  if (rounded < std::ldexp(1.0, f.emin())) return sign | static_cast<std::uint16_t>(k);  // subnormal or zero
  int re = 0;
  const double m = std::frexp(rounded, &re);  // rounded = m * 2^re
  const auto field = static_cast<std::uint16_t>(re - 1 + f.emax);
  const auto mantissa = static_cast<std::uint16_t>(std::ldexp(m * 2 - 1, f.mantissa_bits));
  return sign | static_cast<std::uint16_t>(field << f.mantissa_bits) | mantissa;
}

float f32_of(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}
std::uint32_t bits_of(float value) {
  return std::bit_cast<std::uint32_t>(value);
}

using Half = _Float16;
std::uint16_t ref_f32_to_f16(std::uint32_t x) {
  return std::bit_cast<std::uint16_t>(static_cast<Half>(f32_of(x)));
}
std::uint32_t ref_f16_to_f32(std::uint16_t h) {
  return bits_of(static_cast<float>(std::bit_cast<Half>(h)));
}
std::uint16_t ref_f32_to_bf16(std::uint32_t x) {
  return nearest_bits(f32_of(x), kBF16);
}
std::uint32_t ref_bf16_to_f32(std::uint16_t b) {
  return bits_of(static_cast<float>(decode(b, kBF16)));  // exact: every bf16 value is a float
}

bool is_nan_f32(std::uint32_t x) {
  return (x & 0x7fffffffu) > 0x7f800000u;
}

// The documented NaN rule, for a NaN `in` (in_bits wide, in_mantissa bits of significand)
// giving `out`: NaN, same sign, quiet bit (top significand bit) set, and the source payload's
// bits below its quiet bit kept, as many of them as fit, aligned to the top.
bool follows_nan_rule(std::uint64_t in, int in_bits, int in_mantissa, std::uint64_t out, int out_bits,
                      int out_mantissa) {
  const auto low_mask = [](int n) { return (std::uint64_t{1} << n) - 1; };
  const std::uint64_t out_exponent_mask = low_mask(out_bits - 1 - out_mantissa) << out_mantissa;
  const bool same_sign = ((in >> (in_bits - 1)) & 1) == ((out >> (out_bits - 1)) & 1);
  const std::uint64_t in_significand = in & low_mask(in_mantissa);
  const std::uint64_t out_significand = out & low_mask(out_mantissa);
  const bool quiet = ((out_significand >> (out_mantissa - 1)) & 1) != 0;
  const int kept = std::min(in_mantissa, out_mantissa) - 1;
  const std::uint64_t in_top = (in_significand >> (in_mantissa - 1 - kept)) & low_mask(kept);
  const std::uint64_t out_top = (out_significand >> (out_mantissa - 1 - kept)) & low_mask(kept);
  return (out & out_exponent_mask) == out_exponent_mask && quiet && same_sign && in_top == out_top;
}

// Collects the first few mismatches for the failure message instead of one CHECK per element
// (millions of Catch2 assertions would dominate the run time).
struct Mismatches {
  std::size_t count = 0;
  std::ostringstream first;
  void add(std::uint64_t in, std::uint64_t got, std::uint64_t want) {
    if (count++ < 8) first << std::hex << "in 0x" << in << ": got 0x" << got << ", want 0x" << want << "\n";
  }
};
#define REQUIRE_NO_MISMATCHES(m) \
  do {                           \
    INFO((m).first.str());       \
    REQUIRE((m).count == 0);     \
  } while (false)

std::vector<std::byte> to_bytes(const std::vector<std::uint16_t>& v) {
  std::vector<std::byte> out(v.size() * 2);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
std::vector<std::byte> to_bytes(const std::vector<std::uint32_t>& v) {
  std::vector<std::byte> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
template <typename T>
T element(const std::vector<std::byte>& bytes, std::size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

std::vector<std::uint16_t> all_16_bit_patterns() {
  std::vector<std::uint16_t> v(65536);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

// Converts with convert() through byte spans.
std::vector<std::byte> run_convert(const std::vector<std::byte>& in, DType from, DType to) {
  std::vector<std::byte> out(converted_bytes(in.size(), from, to));
  const Status status = convert(in, from, out, to);
  if (!status) FAIL(status.error().to_string());
  return out;
}

// Edge cases of f32 -> bf16 / f16 (both signs are added by the caller).
std::vector<std::uint32_t> special_f32() {
  return {0x00000000, 0x7f800000,                          // 0, Inf
          0x7fc00000, 0x7fffffff, 0x7fa00000, 0x7fc00001,  // quiet NaNs, various payloads
          0x7f800001, 0x7fbfffff, 0x7f802000, 0x7f800100,  // signalling NaNs (payload only in low bits too)
          0x00000001, 0x007fffff, 0x00800000,              // f32 subnormals, smallest normal
          0x7f7fffff,                                      // f32 max finite (-> Inf in both)
          // bf16: ties (even kept, odd rounds up), and either side of them
          0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x3f818001, 0x3f817fff,
          // bf16: max finite 0x7f7f, the overflow threshold (a tie at odd -> Inf), either side
          0x7f7f0000, 0x7f7f7fff, 0x7f7f8000, 0x7f7f8001,
          // bf16 subnormals: smallest, largest, a tie into the smallest normal
          0x00010000, 0x007f0000, 0x007f8000, 0x00008000, 0x00008001, 0x00018000,
          // f16: 1.0 ties, max finite 65504, just below/at/above the threshold 65520
          0x3f800000, 0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001, 0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001,
          0x47800000,
          // f16 subnormals: smallest (2^-24), half of it (tie -> 0), just above half, 1.5x (tie -> 2),
          // largest (1023 * 2^-24), the tie between it and the smallest normal (-> normal), 2^-14
          0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33c00000, 0x34200000, 0x387fc000, 0x387fe000, 0x387fdfff,
          0x38800000, 0x387fffff,
          // round to zero: far below half the smallest subnormal
          0x2f800000, 0x00400000, 0x0c000000};
}

std::vector<std::uint32_t> f32_inputs(std::size_t random_count) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t s : special_f32()) {
    v.push_back(s);
    v.push_back(s | 0x80000000u);
  }
  std::mt19937 rng(20240611);
  // Uniform bit patterns (every class, mostly out of f16's range), then patterns whose
  // exponent lies where f16 has values (subnormal to overflow).
  for (std::size_t i = 0; i < random_count; ++i) v.push_back(static_cast<std::uint32_t>(rng()));
  std::uniform_int_distribution<std::uint32_t> exponent(98, 144);
  for (std::size_t i = 0; i < random_count; ++i)
    v.push_back((static_cast<std::uint32_t>(rng()) & 0x807fffffu) | (exponent(rng) << 23));
  return v;
}

}  // namespace

TEST_CASE("the bf16 reference agrees with _Float16 when both round to f16", "[formats][convert]") {
  // Validates nearest_bits() itself: the same rule applied to f16's format must give what
  // GCC's independent implementation gives.
  Mismatches m;
  for (std::uint32_t x : f32_inputs(1 << 18)) {
    if (is_nan_f32(x)) continue;
    const std::uint16_t want = ref_f32_to_f16(x);
    const std::uint16_t got = nearest_bits(f32_of(x), kF16);
    if (got != want) m.add(x, got, want);
  }
  REQUIRE_NO_MISMATCHES(m);
}

TEST_CASE("f16 -> f32 is exact for all 65536 inputs", "[formats][convert]") {
  const auto in = all_16_bit_patterns();
  const auto out = run_convert(to_bytes(in), DType::kF16, DType::kF32);
  Mismatches m;
  for (std::uint16_t h : in) {
    const std::uint32_t got = element<std::uint32_t>(out, h);
    if (got != f16_to_f32_bits(h)) m.add(h, got, f16_to_f32_bits(h));
    const bool nan = (h & 0x7fff) > 0x7c00;
    if (nan ? !follows_nan_rule(h, 16, 10, got, 32, 23) : got != ref_f16_to_f32(h)) m.add(h, got, ref_f16_to_f32(h));
  }
  REQUIRE_NO_MISMATCHES(m);
}

TEST_CASE("bf16 -> f32 is exact for all 65536 inputs", "[formats][convert]") {
  const auto in = all_16_bit_patterns();
  const auto out = run_convert(to_bytes(in), DType::kBF16, DType::kF32);
  Mismatches m;
  for (std::uint16_t b : in) {
    const std::uint32_t got = element<std::uint32_t>(out, b);
    if (got != bf16_to_f32_bits(b)) m.add(b, got, bf16_to_f32_bits(b));
    const bool nan = (b & 0x7fff) > 0x7f80;
    if (nan ? !follows_nan_rule(b, 16, 7, got, 32, 23) : got != ref_bf16_to_f32(b)) m.add(b, got, ref_bf16_to_f32(b));
  }
  REQUIRE_NO_MISMATCHES(m);
  // Quiet NaNs and every finite value are the plain upper-half widening.
  CHECK(bf16_to_f32_bits(0x3f80) == 0x3f800000u);
  CHECK(bf16_to_f32_bits(0xffc1) == 0xffc10000u);
  CHECK(bf16_to_f32_bits(0x7f81) == 0x7fc10000u);  // signalling: quieted, payload kept
}

TEST_CASE("f16 -> bf16 rounds once, for all 65536 inputs", "[formats][convert]") {
  const auto in = all_16_bit_patterns();
  const auto out = run_convert(to_bytes(in), DType::kF16, DType::kBF16);
  Mismatches m;
  for (std::uint16_t h : in) {
    const auto got = element<std::uint16_t>(out, h);
    const bool nan = (h & 0x7fff) > 0x7c00;
    const std::uint16_t want = nan ? 0 : nearest_bits(decode(h, kF16), kBF16);
    if (nan ? !follows_nan_rule(h, 16, 10, got, 16, 7) : got != want) m.add(h, got, want);
  }
  REQUIRE_NO_MISMATCHES(m);
  CHECK(element<std::uint16_t>(out, 0x7bff) == 0x4780);  // 65504 needs 11 bits: rounds up to 65536
  CHECK(element<std::uint16_t>(out, 0x0001) == 0x3380);  // f16 subnormals are bf16 normals
}

TEST_CASE("bf16 -> f16 rounds once, for all 65536 inputs", "[formats][convert]") {
  const auto in = all_16_bit_patterns();
  const auto out = run_convert(to_bytes(in), DType::kBF16, DType::kF16);
  Mismatches m;
  for (std::uint16_t b : in) {
    const auto got = element<std::uint16_t>(out, b);
    const bool nan = (b & 0x7fff) > 0x7f80;
    if (nan) {
      if (!follows_nan_rule(b, 16, 7, got, 16, 10)) m.add(b, got, 0);
      continue;
    }
    // Two independent references: _Float16 from the (exact) float, and nearest_bits.
    const std::uint16_t want = ref_f32_to_f16(bits_of(static_cast<float>(decode(b, kBF16))));
    if (got != want) m.add(b, got, want);
    if (got != nearest_bits(decode(b, kBF16), kF16)) m.add(b, got, nearest_bits(decode(b, kBF16), kF16));
  }
  REQUIRE_NO_MISMATCHES(m);
  CHECK(element<std::uint16_t>(out, 0x4780) == 0x7c00);  // 65536 overflows to Inf
  CHECK(element<std::uint16_t>(out, 0x0001) == 0x0000);  // far below f16's smallest subnormal
}

TEST_CASE("f32 -> f16 matches _Float16 on random patterns and every special class", "[formats][convert]") {
  const auto in = f32_inputs(1 << 21);
  const auto out = run_convert(to_bytes(in), DType::kF32, DType::kF16);
  Mismatches m;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t x = in[i];
    const auto got = element<std::uint16_t>(out, i);
    if (got != f32_to_f16_bits(x)) m.add(x, got, f32_to_f16_bits(x));
    if (is_nan_f32(x) ? !follows_nan_rule(x, 32, 23, got, 16, 10) : got != ref_f32_to_f16(x))
      m.add(x, got, ref_f32_to_f16(x));
  }
  REQUIRE_NO_MISMATCHES(m);
  // The rules, spelled out.
  CHECK(f32_to_f16_bits(0x477fe000) == 0x7bff);  // 65504, max finite
  CHECK(f32_to_f16_bits(0x477fefff) == 0x7bff);  // just below the threshold
  CHECK(f32_to_f16_bits(0x477ff000) == 0x7c00);  // 65520: a tie at odd -> Inf
  CHECK(f32_to_f16_bits(0xc77ff000) == 0xfc00);
  CHECK(f32_to_f16_bits(0x3f801000) == 0x3c00);  // tie at even stays
  CHECK(f32_to_f16_bits(0x3f803000) == 0x3c02);  // tie at odd rounds up
  CHECK(f32_to_f16_bits(0x33800000) == 0x0001);  // 2^-24, smallest subnormal
  CHECK(f32_to_f16_bits(0x33000000) == 0x0000);  // 2^-25: tie -> even zero
  CHECK(f32_to_f16_bits(0xb3000001) == 0x8001);  // just above the tie
  CHECK(f32_to_f16_bits(0x387fe000) == 0x0400);  // rounds up into the smallest normal
  CHECK(f32_to_f16_bits(0x80000001) == 0x8000);  // -0 stays negative
  CHECK(f32_to_f16_bits(0x7f800001) == 0x7e00);  // sNaN, payload only in low bits: still NaN
  CHECK(f32_to_f16_bits(0xffa02000) == 0xff01);  // sNaN: quieted, top payload bits kept
}

TEST_CASE("f32 -> bf16 matches the exact-arithmetic reference on random patterns and special classes",
          "[formats][convert]") {
  const auto in = f32_inputs(1 << 21);
  const auto out = run_convert(to_bytes(in), DType::kF32, DType::kBF16);
  Mismatches m;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t x = in[i];
    const auto got = element<std::uint16_t>(out, i);
    if (got != f32_to_bf16_bits(x)) m.add(x, got, f32_to_bf16_bits(x));
    if (is_nan_f32(x) ? !follows_nan_rule(x, 32, 23, got, 16, 7) : got != ref_f32_to_bf16(x))
      m.add(x, got, ref_f32_to_bf16(x));
  }
  REQUIRE_NO_MISMATCHES(m);
  CHECK(f32_to_bf16_bits(0x3f808000) == 0x3f80);  // tie at even stays
  CHECK(f32_to_bf16_bits(0x3f818000) == 0x3f82);  // tie at odd rounds up
  CHECK(f32_to_bf16_bits(0x7f7f7fff) == 0x7f7f);  // below the overflow threshold
  CHECK(f32_to_bf16_bits(0x7f7f8000) == 0x7f80);  // max finite + half ulp -> Inf
  CHECK(f32_to_bf16_bits(0xff7fffff) == 0xff80);  // f32 max -> -Inf
  CHECK(f32_to_bf16_bits(0x00008000) == 0x0000);  // half the smallest subnormal: tie -> 0
  CHECK(f32_to_bf16_bits(0x007f8000) == 0x0080);  // rounds up into the smallest normal
  CHECK(f32_to_bf16_bits(0x7f800001) == 0x7fc0);  // sNaN, payload only in low bits: still NaN
  CHECK(f32_to_bf16_bits(0xff812345) == 0xffc1);  // sNaN: quieted, top payload bits kept
}

TEST_CASE("convert() handles odd lengths and misaligned spans like the scalar functions", "[formats][convert]") {
  std::mt19937 rng(7);
  const DType floats[] = {DType::kF16, DType::kBF16, DType::kF32};
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000003}}) {
    for (DType from : floats) {
      for (DType to : floats) {
        const std::size_t in_size = dtype_info(from).block_bytes;
        const std::size_t out_size = dtype_info(to).block_bytes;
        INFO(dtype_name(from) << " -> " << dtype_name(to) << ", " << count << " elements");
        // Both spans start 2 bytes into their buffers: misaligned for f32.
        std::vector<std::byte> in_buffer(count * in_size + 2);
        std::vector<std::byte> out_buffer(count * out_size + 4, std::byte{0x5a});
        for (auto& b : in_buffer) b = static_cast<std::byte>(rng());
        const std::span<const std::byte> in(in_buffer.data() + 2, count * in_size);
        const std::span<std::byte> out(out_buffer.data() + 2, count * out_size);
        REQUIRE(convert(in, from, out, to));
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) {
          std::uint32_t x = 0;  // the element as f32 bits, then converted by the scalar functions
          std::memcpy(&x, in.data() + i * in_size, in_size);
          if (from == DType::kF16) x = f16_to_f32_bits(static_cast<std::uint16_t>(x));
          if (from == DType::kBF16) x = bf16_to_f32_bits(static_cast<std::uint16_t>(x));
          std::uint32_t want = x;
          if (to == DType::kF16) want = f32_to_f16_bits(x);
          if (to == DType::kBF16) want = f32_to_bf16_bits(x);
          if (from == to) std::memcpy(&want, in.data() + i * in_size, in_size);  // identity: a copy, NaNs too
          std::uint32_t got = 0;
          std::memcpy(&got, out.data() + i * out_size, out_size);
          wrong += got != want;
        }
        CHECK(wrong == 0);
        // Nothing written outside the output span.
        CHECK(out_buffer[0] == std::byte{0x5a});
        CHECK(out_buffer[1] == std::byte{0x5a});
        CHECK(out_buffer[count * out_size + 2] == std::byte{0x5a});
        CHECK(out_buffer[count * out_size + 3] == std::byte{0x5a});
      }
    }
  }
}

TEST_CASE("convert() rejects wrong sizes, unsupported pairs and overlapping spans", "[formats][convert]") {
  std::vector<std::byte> in(16);
  std::vector<std::byte> out(64);
  const auto expect_invalid = [](const Status& status) {
    REQUIRE_FALSE(status);
    CHECK(status.error().code() == Errc::kInvalidArgument);
  };
  const std::span<const std::byte> in16(in);
  // Output size must be exactly the converted size.
  expect_invalid(convert(in16, DType::kF32, std::span(out).first(6), DType::kBF16));
  expect_invalid(convert(in16, DType::kF32, std::span(out).first(10), DType::kBF16));
  expect_invalid(convert(in16, DType::kBF16, std::span(out).first(16), DType::kF32));
  expect_invalid(convert(in16, DType::kF16, std::span(out).first(15), DType::kF16));
  // Input must be whole elements.
  expect_invalid(convert(in16.first(6), DType::kF32, std::span(out).first(3), DType::kF16));
  // Pairs outside {F16, BF16, F32}.
  expect_invalid(convert(in16, DType::kF8_E4M3, std::span(out).first(64), DType::kF32));
  expect_invalid(convert(in16, DType::kF32, std::span(out).first(32), DType::kF64));
  expect_invalid(convert(in16, DType::kI32, std::span(out).first(16), DType::kI32));
  // In-place narrowing would read what it already wrote.
  expect_invalid(
      convert(std::span<const std::byte>(out).first(16), DType::kF32, std::span(out).subspan(4, 8), DType::kBF16));
  const Status unsupported = convert(in16, DType::kF8_E4M3, std::span(out).first(64), DType::kF32);
  REQUIRE_FALSE(unsupported);
  CHECK_THAT(unsupported.error().message(), Catch::Contains("F8_E4M3") && Catch::Contains("F32"));
}

TEST_CASE("identity conversion copies bytes, NaN payloads included, also in place", "[formats][convert]") {
  std::vector<std::byte> in(4000);
  std::mt19937 rng(3);
  for (auto& b : in) b = static_cast<std::byte>(rng());
  for (DType d : {DType::kF16, DType::kBF16, DType::kF32}) {
    std::vector<std::byte> out(in.size());
    REQUIRE(convert(in, d, out, d));
    CHECK(out == in);
    REQUIRE(convert(out, d, out, d));
    CHECK(out == in);
  }
}

TEST_CASE("is_convertible and converted_bytes cover exactly F16, BF16 and F32", "[formats][convert]") {
  const auto is_float = [](DType d) { return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32; };
  for (const DTypeInfo& from : all_dtypes())
    for (const DTypeInfo& to : all_dtypes()) {
      INFO(from.name << " -> " << to.name);
      CHECK(is_convertible(from.dtype, to.dtype) == (is_float(from.dtype) && is_float(to.dtype)));
    }
  CHECK(converted_bytes(8, DType::kF32, DType::kBF16) == 4);
  CHECK(converted_bytes(8, DType::kF32, DType::kF16) == 4);
  CHECK(converted_bytes(6, DType::kBF16, DType::kF32) == 12);
  CHECK(converted_bytes(6, DType::kF16, DType::kBF16) == 6);
  CHECK(converted_bytes(12, DType::kF32, DType::kF32) == 12);
  CHECK(converted_bytes(0, DType::kF16, DType::kF32) == 0);
  CHECK(converted_bytes(1ull << 40, DType::kBF16, DType::kF32) == 1ull << 41);
  CHECK(converted_bytes(16, DType::kF8_E4M3, DType::kF32) == 0);  // outside the contract: 0
}
