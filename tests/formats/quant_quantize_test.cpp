// Quantize on load (quant_codec.hpp: formats::quantize) against references that share none of
// the implementation's bit tricks (fp8_reference.hpp): amax, scale and x / scale per the header
// in plain f32 arithmetic, codes by the brute-force E4M3 encoder, int8 by a floor-based round
// half to even; the round trip is also held to an error bound (derived at round_trip_bound_fp8 /
// round_trip_bound_int8).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/shape.hpp"

#include "fp8_reference.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing::fp8_ref;

// ---------------------------------------------------------------------------------------------
// Quantize on load

TEST_CASE("quantize targets parse, name themselves and reject other spellings", "[quant]") {
  CHECK(parse_quantize_target("fp8").value() == QuantizeTarget::kFp8Tensor);
  CHECK(parse_quantize_target("fp8:per-tensor").value() == QuantizeTarget::kFp8Tensor);
  CHECK(parse_quantize_target("fp8:per-channel").value() == QuantizeTarget::kFp8Row);
  CHECK(parse_quantize_target("fp8:block").value() == QuantizeTarget::kFp8Block);
  CHECK(parse_quantize_target("int8").value() == QuantizeTarget::kInt8Row);
  for (QuantizeTarget t :
       {QuantizeTarget::kFp8Tensor, QuantizeTarget::kFp8Row, QuantizeTarget::kFp8Block, QuantizeTarget::kInt8Row})
    CHECK(parse_quantize_target(quantize_target_name(t)).value() == t);
  for (std::string_view bad : {"", "FP8", "fp8:", "fp8:per-row", "int4", "int8:block", "fp8 "}) {
    INFO(bad);
    const auto r = parse_quantize_target(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == Errc::kInvalidArgument);
    for (std::string_view valid : {"fp8:per-tensor", "fp8:per-channel", "fp8:block", "int8"})
      CHECK(r.error().message().find(valid) != std::string::npos);
  }
}

TEST_CASE("quantized_layout gives dtypes, scale shapes, names and sizes", "[quant]") {
  const QuantizedLayout t = quantized_layout(200, 300, QuantizeTarget::kFp8Tensor).value();
  CHECK(t.weight_dtype == DType::kF8_E4M3);
  CHECK(t.scale_shape == Shape{1});
  CHECK(t.scale_suffix == "weight_scale");
  CHECK(t.weight_bytes == 60000);
  CHECK(t.scale_bytes == 4);
  const QuantizedLayout r = quantized_layout(200, 300, QuantizeTarget::kFp8Row).value();
  CHECK(r.scale_shape == Shape{200, 1});
  CHECK(r.scale_bytes == 800);
  const QuantizedLayout b = quantized_layout(200, 300, QuantizeTarget::kFp8Block).value();
  CHECK(b.scale_shape == Shape{2, 3});
  CHECK(b.scale_suffix == "weight_scale_inv");
  CHECK(b.scale_bytes == 24);
  const QuantizedLayout i = quantized_layout(200, 300, QuantizeTarget::kInt8Row).value();
  CHECK(i.weight_dtype == DType::kI8);
  CHECK(i.scale_shape == Shape{200, 1});
  CHECK(i.weight_bytes == 60000);
  CHECK(i.scale_bytes == 800);
  CHECK(quantized_layout(256, 128, QuantizeTarget::kFp8Block).value().scale_shape == Shape{2, 1});
}

namespace {

// The input as stored (F32, BF16 or F16) and the exact values the quantizer sees.
struct Input {
  std::vector<std::byte> bytes;
  std::vector<float> values;
};

Input make_input(const std::vector<float>& x, DType dtype) {
  Input in;
  in.values.resize(x.size());
  if (dtype == DType::kF32) {
    in.values = x;
    in.bytes = to_bytes(x);
    return in;
  }
  std::vector<std::uint16_t> narrow(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::kBF16) {
      narrow[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x[i]) >> 16);  // truncation: any bf16 will do
      in.values[i] = bf16_value(narrow[i]);
    } else {
      narrow[i] = std::bit_cast<std::uint16_t>(static_cast<Half>(x[i]));
      in.values[i] = f16_value(narrow[i]);
    }
  }
  in.bytes = to_bytes(narrow);
  return in;
}

// Which scale element covers (n, k) for a quantize target (quant_codec.hpp: one per tensor,
// per row, per 128x128 block).
std::uint64_t target_scale_index(QuantizeTarget target, std::uint64_t cols, std::uint64_t n, std::uint64_t k) {
  switch (target) {
    case QuantizeTarget::kFp8Tensor: return 0;
    case QuantizeTarget::kFp8Row:
    case QuantizeTarget::kInt8Row: return n;
    case QuantizeTarget::kFp8Block: return (n / 128) * ceil_div(cols, 128) + k / 128;
  }
  return 0;
}

// The header's scales: amax over each scale's elements (finite values) / qmax in f32, 1 where that is 0.
std::vector<float> reference_scales(const std::vector<float>& x, std::uint64_t rows, std::uint64_t cols,
                                    QuantizeTarget target, std::uint64_t count) {
  std::vector<float> amax(count, 0.0f);
  for (std::uint64_t n = 0; n < rows; ++n)
    for (std::uint64_t k = 0; k < cols; ++k) {
      const float a = std::fabs(x[n * cols + k]);
      float& m = amax[target_scale_index(target, cols, n, k)];
      if (std::isfinite(a) && a > m) m = a;
    }
  const float qmax = target == QuantizeTarget::kInt8Row ? 127.0f : 448.0f;
  std::vector<float> s(count);
  for (std::size_t i = 0; i < count; ++i) {
    s[i] = amax[i] / qmax;
    if (s[i] == 0.0f) s[i] = 1.0f;
  }
  return s;
}

// Bound on |dequantize(quantize(x)) - x| for E4M3, scale s, finite x (|x| <= amax):
//   v = fl(x / s) has relative error <= 2^-24, and |v| <= 448 (1 + 2^-24).
//   Encoding v: for |v| >= 2^-6 (normal) the spacing is 2^(e-3) for |v| in [2^e, 2^(e+1)), so
//   |q - v| <= 2^(e-4) <= 2^-4 |v| (a v just past 448 saturates to 448, an error of 2^-23 |v|);
//   below 2^-6 the spacing is 2^-9, so |q - v| <= 2^-10. Hence |q - v| <= max(2^-4 |v|, 2^-10).
//   y = fl(q * s) adds a relative 2^-24 of q * s. Adding up, |y - x| <= s max(2^-4 |v|, 2^-10)
//   + |x| 2^-24 + |q| s 2^-24, and the last two terms are below 2^-18 times the first
//   (|q| <= 2|v|), so:  |y - x| <= (1 + 2^-18) max(2^-4 |x|, 2^-10 s).
double round_trip_bound_fp8(float x, float s) {
  return (1 + std::ldexp(1.0, -18)) *
         std::max(std::ldexp(std::fabs(static_cast<double>(x)), -4), std::ldexp(static_cast<double>(s), -10));
}
// int8: |q - v| <= 1/2 (|v| <= 127 (1 + 2^-24), rounding to an integer, clamping only moves
// v by 127 * 2^-24), v = fl(x / s) is off by |x| / s * 2^-24 <= 2^-17 and the product by
// 127 s 2^-24 < 2^-17 s:  |y - x| <= s (1/2 + 2^-16).
double round_trip_bound_int8(float s) {
  return static_cast<double>(s) * (0.5 + std::ldexp(1.0, -16));
}

LogicalTensor round_trip_tensor(std::uint64_t rows, std::uint64_t cols, QuantizeTarget target) {
  switch (target) {
    case QuantizeTarget::kFp8Tensor: return fp8_tensor(rows, cols, DType::kF8_E4M3, ScaleLayout::kTensor);
    case QuantizeTarget::kFp8Row: return fp8_tensor(rows, cols, DType::kF8_E4M3, ScaleLayout::kRow);
    default: return fp8_tensor(rows, cols, DType::kF8_E4M3, ScaleLayout::kBlock, 128, 128);
  }
}

struct Quantized {
  std::vector<std::byte> weight;
  std::vector<std::byte> scale;
  QuantizedLayout layout;
};

Quantized run_quantize(const Input& in, DType dtype, std::uint64_t rows, std::uint64_t cols, QuantizeTarget target) {
  Quantized q;
  q.layout = quantized_layout(rows, cols, target).value();
  q.weight.resize(q.layout.weight_bytes);
  q.scale.resize(q.layout.scale_bytes);
  const Status st = quantize(in.bytes, dtype, rows, cols, target, q.weight, q.scale);
  INFO((st ? std::string("ok") : st.error().to_string()));
  REQUIRE(st.has_value());
  return q;
}

// Dequantized values: FP8 through dequantize_rows (the decoder under test above), int8 here
// (q * s in f32: kCtInt's decoder is another file's).
std::vector<float> round_trip(const Quantized& q, std::uint64_t rows, std::uint64_t cols, QuantizeTarget target) {
  if (target == QuantizeTarget::kInt8Row) {
    std::vector<float> out(rows * cols);
    for (std::uint64_t n = 0; n < rows; ++n)
      for (std::uint64_t k = 0; k < cols; ++k)
        out[n * cols + k] =
            static_cast<float>(element<std::int8_t>(q.weight, n * cols + k)) * element<float>(q.scale, n);
    return out;
  }
  const LogicalTensor t = round_trip_tensor(rows, cols, target);
  const PartBytes parts[] = {{"weight", DType::kF8_E4M3, Shape{rows, cols}, q.weight},
                             {q.layout.scale_suffix, DType::kF32, q.layout.scale_shape, q.scale}};
  return dequantize_all(t, parts);
}

constexpr QuantizeTarget kTargets[] = {QuantizeTarget::kFp8Tensor, QuantizeTarget::kFp8Row, QuantizeTarget::kFp8Block,
                                       QuantizeTarget::kInt8Row};

}  // namespace

TEST_CASE("quantize matches the reference codes and scales and round-trips within the bound", "[quant]") {
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log2_row(-12.0f, 6.0f);  // f16 inputs stay finite
  for (const auto& [rows, cols] : {std::pair<std::uint64_t, std::uint64_t>{200, 300}, {128, 256}, {1, 5}, {130, 1}}) {
    // Rows of very different magnitudes, a few outliers, some exact zeros.
    std::vector<float> x(rows * cols);
    for (std::uint64_t n = 0; n < rows; ++n) {
      const float row_scale = std::exp2(log2_row(rng));
      for (std::uint64_t k = 0; k < cols; ++k) {
        float v = normal(rng) * row_scale;
        if (k % 97 == 13) v *= 50.0f;
        if (k % 31 == 7) v = 0.0f;
        x[n * cols + k] = v;
      }
    }
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Input in = make_input(x, dtype);
      for (QuantizeTarget target : kTargets) {
        INFO(rows << "x" << cols << " " << dtype_name(dtype) << " -> " << quantize_target_name(target));
        const Quantized q = run_quantize(in, dtype, rows, cols, target);
        const std::uint64_t count = q.layout.scale_bytes / 4;
        const std::vector<float> want_scale = reference_scales(in.values, rows, cols, target, count);
        Mismatches scales;
        for (std::size_t i = 0; i < count; ++i)
          if (!same_float(element<float>(q.scale, i), want_scale[i]))
            scales.add("scale", i, "got", element<float>(q.scale, i), "want", want_scale[i]);
        REQUIRE_NO_MISMATCHES(scales);

        const std::vector<float> y = round_trip(q, rows, cols, target);
        Mismatches codes;
        Mismatches bound;
        for (std::uint64_t n = 0; n < rows; ++n)
          for (std::uint64_t k = 0; k < cols; ++k) {
            const std::size_t i = n * cols + k;
            const float xv = in.values[i];
            const float s = want_scale[target_scale_index(target, cols, n, k)];
            const float v = xv / s;
            const double err = std::fabs(static_cast<double>(y[i]) - xv);
            if (target == QuantizeTarget::kInt8Row) {
              const float clamped = std::clamp(v, -127.0f, 127.0f);
              const auto want = static_cast<std::int8_t>(ref_round_half_even(clamped));
              const auto got = element<std::int8_t>(q.weight, i);
              if (got != want) codes.add("element", i, "x", xv, "got", int{got}, "want", int{want});
              if (err > round_trip_bound_int8(s)) bound.add("element", i, "x", xv, "y", y[i], "scale", s);
            } else {
              const std::uint8_t want = ref_encode_e4m3(v);
              const auto got = element<std::uint8_t>(q.weight, i);
              if (got != want) codes.add("element", i, "x", xv, "got", int{got}, "want", int{want});
              if (err > round_trip_bound_fp8(xv, s)) bound.add("element", i, "x", xv, "y", y[i], "scale", s);
            }
          }
        REQUIRE_NO_MISMATCHES(codes);
        REQUIRE_NO_MISMATCHES(bound);
      }
    }
  }
}

TEST_CASE("quantize keeps exactly representable values unchanged", "[quant]") {
  // FP8: E4M3 values times 2^e with +-448 * 2^e in every row's every 128-column block, so every
  // scale (tensor, row, block) is exactly 2^e and x / s, the code and q * s are all exact.
  // int8: integers in [-127, 127] times 2^e with +-127 * 2^e in every row. All of these are
  // bf16 and f16 values too (at most 7 significant bits, exponents within f16's range).
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> code(0, 0x7e);
  std::uniform_int_distribution<int> integer(-127, 127);
  std::uniform_int_distribution<int> sign(0, 1);
  const std::uint64_t rows = 150;
  const std::uint64_t cols = 270;
  for (QuantizeTarget target : kTargets) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      INFO(quantize_target_name(target) << " " << dtype_name(dtype));
      const int e = target == QuantizeTarget::kFp8Tensor ? -3 : 2;
      std::vector<float> x(rows * cols);
      for (std::uint64_t n = 0; n < rows; ++n)
        for (std::uint64_t k = 0; k < cols; ++k) {
          float v = 0;
          if (target == QuantizeTarget::kInt8Row)
            v = static_cast<float>(k == 0 ? 127 : integer(rng));
          else
            v = k % 128 == 0 ? 448.0f : fp8_e4m3_to_f32(static_cast<std::uint8_t>(code(rng)));
          x[n * cols + k] = std::ldexp(sign(rng) ? -v : v, e);
        }
      const Input in = make_input(x, dtype);
      REQUIRE(in.values == x);
      const Quantized q = run_quantize(in, dtype, rows, cols, target);
      const std::vector<float> y = round_trip(q, rows, cols, target);
      Mismatches m;
      for (std::size_t i = 0; i < x.size(); ++i)
        // int8 has no -0: a -0 input comes back as +0, equal in value.
        if (target == QuantizeTarget::kInt8Row ? y[i] != x[i] : !same_float(y[i], x[i]))
          m.add("element", i, "x", x[i], "y", y[i]);
      REQUIRE_NO_MISMATCHES(m);
    }
  }
}

TEST_CASE("quantize gives zero rows a scale of 1 and zero codes", "[quant]") {
  const std::uint64_t rows = 4;
  const std::uint64_t cols = 300;
  std::vector<float> x(rows * cols, 0.0f);
  for (std::uint64_t k = 0; k < cols; ++k) x[2 * cols + k] = static_cast<float>(k) - 150.0f;  // one nonzero row
  for (std::uint64_t k = 0; k < cols; k += 2) x[1 * cols + k] = -0.0f;
  for (QuantizeTarget target : kTargets) {
    INFO(quantize_target_name(target));
    const Input in = make_input(x, DType::kF32);
    const Quantized q = run_quantize(in, DType::kF32, rows, cols, target);
    if (target == QuantizeTarget::kFp8Row || target == QuantizeTarget::kInt8Row) {
      CHECK(element<float>(q.scale, 0) == 1.0f);
      CHECK(element<float>(q.scale, 1) == 1.0f);
      CHECK(element<float>(q.scale, 3) == 1.0f);
      CHECK(element<float>(q.scale, 2) == 150.0f / (target == QuantizeTarget::kInt8Row ? 127.0f : 448.0f));
    }
    const std::vector<float> y = round_trip(q, rows, cols, target);
    for (std::uint64_t n : {0, 1, 3})
      for (std::uint64_t k = 0; k < cols; ++k) REQUIRE(y[n * cols + k] == 0.0f);
    // An all-zero tensor: every target gives scale 1 and zeros (-0 stays -0 in FP8).
    const std::vector<float> zeros(rows * cols, 0.0f);
    const Quantized z = run_quantize(make_input(zeros, DType::kF32), DType::kF32, rows, cols, target);
    for (std::size_t i = 0; i < z.layout.scale_bytes / 4; ++i) CHECK(element<float>(z.scale, i) == 1.0f);
    for (std::byte b : z.weight) REQUIRE(b == std::byte{0});
  }
}

TEST_CASE("quantize ignores Inf and NaN in amax: Inf saturates, NaN is the NaN code (0 in int8)", "[quant]") {
  const std::uint64_t rows = 2;
  const std::uint64_t cols = 4;
  const std::vector<float> x = {1.0f, INFINITY, -NAN, -2.0f, -INFINITY, NAN, 0.5f, 4.0f};
  const Input in = make_input(x, DType::kF32);
  const Quantized f = run_quantize(in, DType::kF32, rows, cols, QuantizeTarget::kFp8Row);
  CHECK(element<float>(f.scale, 0) == 2.0f / 448.0f);
  CHECK(element<float>(f.scale, 1) == 4.0f / 448.0f);
  const auto code = [&](std::size_t i) { return int{element<std::uint8_t>(f.weight, i)}; };
  CHECK(code(1) == 0x7e);
  CHECK(code(2) == 0xff);
  CHECK(code(3) == 0xfe);
  CHECK(code(4) == 0xfe);
  CHECK(code(5) == 0x7f);
  const Quantized i8 = run_quantize(in, DType::kF32, rows, cols, QuantizeTarget::kInt8Row);
  const auto q = [&](std::size_t i) { return int{element<std::int8_t>(i8.weight, i)}; };
  CHECK(q(1) == 127);
  CHECK(q(2) == 0);
  CHECK(q(3) == -127);
  CHECK(q(4) == -127);
  CHECK(q(5) == 0);
  CHECK(q(7) == 127);
}

TEST_CASE("quantize rejects unsupported input dtypes and wrong buffer sizes", "[quant]") {
  std::vector<std::byte> in(4 * 8 * 4);
  std::vector<std::byte> w(32);
  std::vector<std::byte> s(16);
  CHECK(quantize(in, DType::kF32, 4, 8, QuantizeTarget::kFp8Row, w, s).has_value());
  const auto expect_invalid = [](const Status& st) {
    REQUIRE_FALSE(st.has_value());
    CHECK(st.error().code() == Errc::kInvalidArgument);
  };
  expect_invalid(quantize(in, DType::kI32, 4, 8, QuantizeTarget::kFp8Row, w, s));
  expect_invalid(quantize(in, DType::kF8_E4M3, 4, 8, QuantizeTarget::kFp8Row, w, s));
  expect_invalid(quantize(std::span(in).first(100), DType::kF32, 4, 8, QuantizeTarget::kFp8Row, w, s));
  expect_invalid(quantize(in, DType::kF32, 4, 8, QuantizeTarget::kFp8Row, std::span(w).first(31), s));
  expect_invalid(quantize(in, DType::kF32, 4, 8, QuantizeTarget::kFp8Tensor, w, s));  // scale of 1, not 4
  const Status huge =
      quantize(in, DType::kF32, std::uint64_t{1} << 40, std::uint64_t{1} << 40, QuantizeTarget::kFp8Row, w, s);
  REQUIRE_FALSE(huge.has_value());
  CHECK(huge.error().code() == Errc::kOverflow);
}

// Issue 45 (findings 1 and 2): a zero-element weight is not in memory, so its dims are bounded
// by nothing but quantized_layout. It quantizes to an empty weight without a row buffer or a
// loop over its rows; its scales are 1, and it may not ask for more of them than
// max(N * K, kMaxScalesBeyondElements).
TEST_CASE("quantize of a zero-element weight refuses more scales than the cap and never wraps the scale size",
          "[quant]") {
  const std::uint64_t rows = (std::uint64_t{1} << 62) + 16;  // rows * 4 wraps to 64
  for (const QuantizeTarget target : {QuantizeTarget::kInt8Row, QuantizeTarget::kFp8Row}) {
    INFO(quantize_target_name(target));
    const auto layout = quantized_layout(rows, 0, target);
    REQUIRE_FALSE(layout.has_value());
    CHECK(layout.error().code() == Errc::kUnsupported);
    std::vector<std::byte> scale(64);  // what the wrapped size was
    const Status st = quantize({}, DType::kF32, rows, 0, target, {}, scale);
    REQUIRE_FALSE(st.has_value());
    CHECK(st.error().code() == Errc::kUnsupported);
  }
  const std::uint64_t over = (std::uint64_t{1} << 40);  // [2^40, 0]: 2^40 empty rows
  CHECK_FALSE(quantized_layout(over, 0, QuantizeTarget::kInt8Row).has_value());
  CHECK_FALSE(quantized_layout(kMaxScalesBeyondElements + 1, 0, QuantizeTarget::kFp8Row).has_value());
  CHECK(quantized_layout(std::uint64_t{1} << 33, std::uint64_t{1} << 33, QuantizeTarget::kFp8Tensor).error().code() ==
        Errc::kOverflow);
}

TEST_CASE("quantize of a zero-element weight gives empty codes and scales of 1 without per-row work", "[quant]") {
  struct Case {
    std::uint64_t rows, cols;
  };
  const float one = 1.0f;
  for (const Case c :
       {Case{0, std::uint64_t{1} << 63}, Case{0, std::uint64_t{1} << 33}, Case{0, std::uint64_t{1} << 28},
        Case{std::uint64_t{1} << 40, 0}, Case{kMaxScalesBeyondElements, 0}, Case{0, 0}}) {
    for (const QuantizeTarget target :
         {QuantizeTarget::kFp8Tensor, QuantizeTarget::kFp8Row, QuantizeTarget::kFp8Block, QuantizeTarget::kInt8Row}) {
      INFO("[" << c.rows << ", " << c.cols << "] to " << quantize_target_name(target));
      const auto layout = quantized_layout(c.rows, c.cols, target);
      const bool per_row = target == QuantizeTarget::kFp8Row || target == QuantizeTarget::kInt8Row;
      if (per_row && c.rows > kMaxScalesBeyondElements) {  // [2^40, 0] per row: 2^40 scales
        REQUIRE_FALSE(layout.has_value());
        CHECK(layout.error().code() == Errc::kUnsupported);
        continue;
      }
      REQUIRE(layout.has_value());
      CHECK(layout->weight_bytes == 0);
      std::vector<std::byte> scale(layout->scale_bytes, std::byte{0xee});
      for (const DType dtype : {DType::kF32, DType::kBF16}) {
        const Status st = quantize({}, dtype, c.rows, c.cols, target, {}, scale);
        REQUIRE(st.has_value());
      }
      const std::uint64_t scales = target == QuantizeTarget::kFp8Tensor ? 1 : per_row ? c.rows : 0;
      CHECK(layout->scale_bytes == scales * 4);
      for (std::uint64_t i = 0; i < scales; ++i) REQUIRE(std::memcmp(scale.data() + i * 4, &one, 4) == 0);
    }
  }
}
