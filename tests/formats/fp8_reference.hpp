// References for the FP8 and quantize-on-load tests (quant_fp8_test.cpp, quant_quantize_test.cpp),
// written here so that they share none of the implementation's bit tricks (formats.md 3.1):
// field-by-field decoding in double, a brute-force E4M3 encoder, scales read by hand.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/dtype.hpp"

namespace qload::testing::fp8_ref {

using namespace qload::formats;

// ---------------------------------------------------------------------------------------------
// References

struct Fp8Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee_specials;  // E5M2: all-ones exponent is Inf / NaN; E4M3FN: only S.1111.111 is NaN
};
constexpr Fp8Format kE4M3{4, 3, 7, false};
constexpr Fp8Format kE5M2{5, 2, 15, true};

inline double ref_decode(std::uint8_t code, Fp8Format f) {
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int field = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int all_ones = (1 << f.exponent_bits) - 1;
  if (f.ieee_specials && field == all_ones) return mantissa == 0 ? sign * INFINITY : std::copysign(NAN, sign);
  if (!f.ieee_specials && field == all_ones && mantissa == (1 << f.mantissa_bits) - 1) return std::copysign(NAN, sign);
  if (field == 0) return sign * std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  return sign * std::ldexp((1 << f.mantissa_bits) + mantissa, field - f.bias - f.mantissa_bits);
}

inline float ref_decode_f(std::uint8_t code, Fp8Format f) {
  return static_cast<float>(ref_decode(code, f));
}

inline std::uint8_t ref_encode_e4m3(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  double a = std::fabs(static_cast<double>(x));
  // Beyond 2^10 every candidate lies below a, so the order of the distances a - v is the
  // reverse order of v whatever a is: clamping a there changes no comparison. Below 2^-20, 0
  // is nearer than 2^-9 (the smallest nonzero value) by far, for any a: likewise. In between,
  // a and every candidate are integer multiples of 2^-43 below 2^53 (a's ulp is at least
  // 2^-43), so the scaled distances are exact integers.
  a = std::min(a, 1024.0);
  if (a < 0x1p-20) a = 0;
  const auto scaled = [](double v) { return static_cast<std::int64_t>(std::ldexp(v, 43)); };
  const std::int64_t target = scaled(a);
  int best = -1;
  std::int64_t best_distance = 0;
  for (int c = 0; c < 0x80; ++c) {
    const double v = ref_decode(static_cast<std::uint8_t>(c), kE4M3);
    if (std::isnan(v)) continue;
    const std::int64_t d = std::llabs(scaled(v) - target);
    if (best < 0 || d < best_distance || (d == best_distance && c % 2 == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return static_cast<std::uint8_t>(sign | best);
}

// Round half to even for a finite float, from floor and an exact comparison with 1/2.
inline float ref_round_half_even(float v) {
  const double low = std::floor(static_cast<double>(v));
  const double frac = static_cast<double>(v) - low;  // exact: v is a float, low its floor
  if (frac > 0.5) return static_cast<float>(low + 1);
  if (frac < 0.5) return static_cast<float>(low);
  return static_cast<float>(std::fmod(low, 2.0) == 0 ? low : low + 1);
}

using Half = _Float16;

inline float bf16_value(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
inline float f16_value(std::uint16_t h) {
  return static_cast<float>(std::bit_cast<Half>(h));
}

// Equal bit for bit, or both NaN with the same sign.
inline bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Collects the first few mismatches for the failure message instead of one CHECK per element.
struct Mismatches {
  std::size_t count = 0;
  std::ostringstream first;
  template <typename... Ts>
  void add(const Ts&... parts) {
    if (count++ < 8) {
      ((first << parts << ' '), ...);
      first << '\n';
    }
  }
};
#define REQUIRE_NO_MISMATCHES(m) \
  do {                           \
    INFO((m).first.str());       \
    REQUIRE((m).count == 0);     \
  } while (false)

template <typename T>
std::vector<std::byte> to_bytes(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
template <typename T>
T element(std::span<const std::byte> bytes, std::size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

inline std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

constexpr const char* kName = "model.layers.3.mlp.down_proj.weight";

inline LogicalTensor fp8_tensor(std::uint64_t rows, std::uint64_t cols, DType weight_dtype, ScaleLayout layout,
                                std::uint32_t bn = 0, std::uint32_t bk = 0, std::uint64_t group = 0) {
  LogicalTensor t;
  t.name = kName;
  t.rows = rows;
  t.cols = cols;
  t.params.scheme = QuantScheme::kFp8;
  t.params.bits = 8;
  t.params.scale_layout = layout;
  t.params.block_rows = bn;
  t.params.block_cols = bk;
  t.params.group_size = group;
  t.params.weight_dtype = weight_dtype;
  t.params.scale_dtype = DType::kF32;
  return t;
}

// Scale element index of weight element (n, k), from the layout's definition (quant.hpp).
inline std::uint64_t ref_scale_index(const LogicalTensor& t, std::uint64_t n, std::uint64_t k) {
  const QuantParams& p = t.params;
  switch (p.scale_layout) {
    case ScaleLayout::kTensor: return 0;
    case ScaleLayout::kRow: return n;
    case ScaleLayout::kBlock: return (n / p.block_rows) * ceil_div(t.cols, p.block_cols) + k / p.block_cols;
    case ScaleLayout::kGroup: return n * ceil_div(t.cols, p.group_size) + k / p.group_size;
    case ScaleLayout::kColumn: return k;
  }
  return 0;
}

inline float ref_scale_value(const PartBytes& s, std::uint64_t i) {
  switch (s.dtype) {
    case DType::kF32: return element<float>(s.bytes, i);
    case DType::kBF16: return bf16_value(element<std::uint16_t>(s.bytes, i));
    case DType::kF16: return f16_value(element<std::uint16_t>(s.bytes, i));
    default: return NAN;
  }
}

inline std::vector<float> dequantize_all(const LogicalTensor& t, std::span<const PartBytes> parts) {
  std::vector<float> out(t.rows * t.cols);
  const Status st = dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  INFO((st ? std::string("ok") : st.error().to_string()));
  REQUIRE(st.has_value());
  return out;
}

inline void require_corrupt(const Status& st, std::initializer_list<std::string_view> mentions) {
  REQUIRE_FALSE(st.has_value());
  INFO(st.error().to_string());
  CHECK(st.error().code() == Errc::kCorrupt);
  CHECK(st.error().tensor() == std::optional<std::string_view>(kName));
  for (std::string_view m : mentions) CHECK(st.error().message().find(m) != std::string::npos);
}

}  // namespace qload::testing::fp8_ref
