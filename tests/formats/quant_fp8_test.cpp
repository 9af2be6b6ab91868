// FP8 codecs and the FP8 decoder (dequantize_rows with QuantScheme::kFp8), against references
// that share none of the implementation's bit tricks (fp8_reference.hpp; formats.md 3.1 for the
// formats); quantize-on-load's tests are in quant_quantize_test.cpp:
//   - decoding: each code's value from its sign, exponent and mantissa fields with std::ldexp
//     in double (ref_decode), plus the known values listed in formats.md;
//   - encoding: brute force (ref_encode_e4m3): of all the non-NaN E4M3 values with the input's
//     sign, the one nearest to the input, distances computed exactly as integers, ties to the
//     even code; saturation falls out of it (past 448 the nearest finite value is 448);
//   - dequantizing: W[n,k] = ref_decode(code) * scale, the scale read by hand (F32 bits, BF16
//     as the top half of an f32, F16 through GCC's _Float16) at an index computed from the
//     layout's definition;
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
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
// Codecs

TEST_CASE("fp8 decoders match the field formula for all 256 codes of E4M3FN and E5M2", "[quant]") {
  Mismatches e4m3;
  Mismatches e5m2;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    if (!same_float(fp8_e4m3_to_f32(code), ref_decode_f(code, kE4M3)))
      e4m3.add("code", c, "got", fp8_e4m3_to_f32(code), "want", ref_decode_f(code, kE4M3));
    if (!same_float(fp8_e5m2_to_f32(code), ref_decode_f(code, kE5M2)))
      e5m2.add("code", c, "got", fp8_e5m2_to_f32(code), "want", ref_decode_f(code, kE5M2));
  }
  REQUIRE_NO_MISMATCHES(e4m3);
  REQUIRE_NO_MISMATCHES(e5m2);
}

TEST_CASE("fp8 decoders give the known values of formats.md", "[quant]") {
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0xfe) == -448.0f);
  CHECK(fp8_e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));
  CHECK(fp8_e4m3_to_f32(0x07) == 0.875f * std::ldexp(1.0f, -6));
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_f32(0x40) == 2.0f);
  CHECK(std::bit_cast<std::uint32_t>(fp8_e4m3_to_f32(0x00)) == 0x00000000u);
  CHECK(std::bit_cast<std::uint32_t>(fp8_e4m3_to_f32(0x80)) == 0x80000000u);
  CHECK(std::isnan(fp8_e4m3_to_f32(0x7f)));
  CHECK(std::isnan(fp8_e4m3_to_f32(0xff)));
  CHECK(std::signbit(fp8_e4m3_to_f32(0xff)));
  CHECK(fp8_e4m3_to_f32(0x78) == 256.0f);  // exponent 15 is finite in E4M3FN (no Inf)

  CHECK(fp8_e5m2_to_f32(0x7b) == 57344.0f);
  CHECK(fp8_e5m2_to_f32(0x01) == std::ldexp(1.0f, -16));
  CHECK(fp8_e5m2_to_f32(0x3c) == 1.0f);
  CHECK(fp8_e5m2_to_f32(0x7c) == INFINITY);
  CHECK(fp8_e5m2_to_f32(0xfc) == -INFINITY);
  for (std::uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) CHECK(std::isnan(fp8_e5m2_to_f32(c)));
  CHECK(std::bit_cast<std::uint32_t>(fp8_e5m2_to_f32(0x80)) == 0x80000000u);
}

TEST_CASE("the brute-force encoder reference agrees with hand-picked E4M3 roundings", "[quant]") {
  // Validates the reference itself on cases worked out by hand from formats.md.
  CHECK(ref_encode_e4m3(1.0f) == 0x38);
  CHECK(ref_encode_e4m3(1.0625f) == 0x38);  // halfway 1 .. 1.125: to even (1.0, mantissa 0)
  CHECK(ref_encode_e4m3(1.1875f) == 0x3a);  // halfway 1.125 .. 1.25: to even (1.25)
  CHECK(ref_encode_e4m3(500.0f) == 0x7e);
  CHECK(ref_encode_e4m3(-INFINITY) == 0xfe);
  CHECK(ref_encode_e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half of the smallest subnormal: to 0
  CHECK(ref_encode_e4m3(-std::ldexp(1.0f, -12)) == 0x80);
  CHECK(ref_encode_e4m3(NAN) == 0x7f);
}

TEST_CASE("f32 -> E4M3 encodes every value, every midpoint and its neighbours like the reference", "[quant]") {
  std::vector<float> inputs;
  for (int c = 0; c < 256; ++c) {
    const float v = ref_decode_f(static_cast<std::uint8_t>(c), kE4M3);
    if (std::isnan(v)) continue;
    inputs.push_back(v);
    if (c == 0x7e || c == 0xfe) continue;
    if ((c & 0x7f) == 0x7e) continue;
    const float next = ref_decode_f(static_cast<std::uint8_t>(c + 1), kE4M3);
    const float mid = (v + next) / 2;  // exact: 5 significant bits
    inputs.push_back(mid);
    inputs.push_back(std::nextafter(mid, INFINITY));
    inputs.push_back(std::nextafter(mid, -INFINITY));
  }
  Mismatches m;
  for (int c = 0; c < 256; ++c) {  // every value encodes to its own code (-0 to 0x80)
    const auto code = static_cast<std::uint8_t>(c);
    if ((c & 0x7f) == 0x7f) continue;
    if (f32_to_fp8_e4m3(ref_decode_f(code, kE4M3)) != code)
      m.add("code", c, "got", int{f32_to_fp8_e4m3(ref_decode_f(code, kE4M3))});
  }
  for (float x : inputs)
    if (f32_to_fp8_e4m3(x) != ref_encode_e4m3(x))
      m.add("x", x, "got", int{f32_to_fp8_e4m3(x)}, "want", int{ref_encode_e4m3(x)});
  REQUIRE_NO_MISMATCHES(m);
  // Ties go to the even code, by hand: 1.0625 lies halfway between 0x38 and 0x39.
  CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38);
  CHECK(f32_to_fp8_e4m3(1.1875f) == 0x3a);
  CHECK(f32_to_fp8_e4m3(-1.0625f) == 0xb8);
}

TEST_CASE("f32 -> E4M3 saturates past 448, rounds tiny values to subnormals or zero, keeps NaN", "[quant]") {
  const float above[] = {448.0f, 448.5f, 463.99f, 464.0f, 464.01f, 480.0f, 1e6f, FLT_MAX, INFINITY};
  for (float x : above) {
    INFO(x);
    CHECK(f32_to_fp8_e4m3(x) == 0x7e);
    CHECK(f32_to_fp8_e4m3(-x) == 0xfe);
    CHECK(ref_encode_e4m3(x) == 0x7e);
  }
  CHECK(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)) == 0x00);                        // tie 0 / 0x01 -> 0
  CHECK(f32_to_fp8_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);  // just above: 0x01
  CHECK(f32_to_fp8_e4m3(3 * std::ldexp(1.0f, -10)) == 0x02);                    // tie 0x01 / 0x02 -> 0x02
  CHECK(f32_to_fp8_e4m3(5 * std::ldexp(1.0f, -10)) == 0x02);                    // tie 0x02 / 0x03 -> 0x02
  CHECK(f32_to_fp8_e4m3(15 * std::ldexp(1.0f, -10)) == 0x08);                   // tie 0x07 / 0x08 -> 0x08
  CHECK(f32_to_fp8_e4m3(std::nextafter(15 * std::ldexp(1.0f, -10), 0.0f)) == 0x07);
  const float tiny[] = {1e-45f, FLT_MIN, 1e-10f, std::ldexp(1.0f, -11), std::ldexp(1.0f, -20)};
  for (float x : tiny) {
    INFO(x);
    CHECK(f32_to_fp8_e4m3(x) == 0x00);
    CHECK(f32_to_fp8_e4m3(-x) == 0x80);
  }
  CHECK(f32_to_fp8_e4m3(0.0f) == 0x00);
  CHECK(f32_to_fp8_e4m3(-0.0f) == 0x80);
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u}) {
    const std::uint8_t want = (nan & 0x80000000u) ? 0xff : 0x7f;
    CHECK(f32_to_fp8_e4m3(std::bit_cast<float>(nan)) == want);
  }
}

TEST_CASE("f32 -> E4M3 matches the brute-force reference on random inputs", "[quant]") {
  std::mt19937 rng(20260901);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_real_distribution<float> wide(-500.0f, 500.0f);
  std::uniform_real_distribution<float> log2_magnitude(-14.0f, 10.0f);
  Mismatches m;
  for (int i = 0; i < 300000; ++i) {
    const float xs[] = {std::bit_cast<float>(bits(rng)), wide(rng),
                        std::copysign(std::exp2(log2_magnitude(rng)), wide(rng))};
    for (float x : xs)
      if (f32_to_fp8_e4m3(x) != ref_encode_e4m3(x))
        m.add("x", x, "got", int{f32_to_fp8_e4m3(x)}, "want", int{ref_encode_e4m3(x)});
  }
  REQUIRE_NO_MISMATCHES(m);
}

// ---------------------------------------------------------------------------------------------
// Dequantization

namespace {

struct Fp8Case {
  std::string label;
  LogicalTensor tensor;
  Shape scale_shape;
  DType scale_dtype;
};

struct Fp8Parts {
  std::vector<std::uint8_t> codes;
  std::vector<std::byte> scale;
  std::vector<PartBytes> parts;
};

Fp8Parts make_parts(const Fp8Case& c, std::mt19937& rng, std::string_view scale_role = "weight_scale") {
  Fp8Parts p;
  const LogicalTensor& t = c.tensor;
  std::uniform_int_distribution<int> byte(0, 255);
  p.codes.resize(t.rows * t.cols);
  for (auto& code : p.codes) code = static_cast<std::uint8_t>(byte(rng));
  const std::uint64_t scales = c.scale_shape.numel().value();
  std::uniform_real_distribution<float> log2_scale(-12.0f, 4.0f);
  std::vector<float> values(scales);
  for (float& v : values) v = std::exp2(log2_scale(rng));
  if (c.scale_dtype == DType::kF32) {
    p.scale = to_bytes(values);
  } else {
    std::vector<std::uint16_t> narrow(scales);
    for (std::size_t i = 0; i < scales; ++i)
      narrow[i] = c.scale_dtype == DType::kBF16
                      ? static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(values[i]) >> 16)
                      : std::bit_cast<std::uint16_t>(static_cast<Half>(values[i]));
    p.scale = to_bytes(narrow);
  }
  p.parts.push_back(
      PartBytes{"weight", t.params.weight_dtype, Shape{t.rows, t.cols}, std::as_bytes(std::span(p.codes))});
  p.parts.push_back(PartBytes{scale_role, c.scale_dtype, c.scale_shape, p.scale});
  return p;
}

std::vector<float> reference_dequantize(const LogicalTensor& t, const Fp8Parts& p, const PartBytes& scale) {
  const Fp8Format f = t.params.weight_dtype == DType::kF8_E5M2 ? kE5M2 : kE4M3;
  std::vector<float> out(t.rows * t.cols);
  for (std::uint64_t n = 0; n < t.rows; ++n)
    for (std::uint64_t k = 0; k < t.cols; ++k)
      out[n * t.cols + k] = ref_decode_f(p.codes[n * t.cols + k], f) * ref_scale_value(scale, ref_scale_index(t, n, k));
  return out;
}

std::vector<Fp8Case> dequantize_cases() {
  std::vector<Fp8Case> cases;
  for (DType w : {DType::kF8_E4M3, DType::kF8_E5M2}) {
    for (DType s : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::string tag = std::string(dtype_name(w)) + "/" + std::string(dtype_name(s));
      // 200 x 300: neither a multiple of 128, so the block grids have partial edge blocks.
      cases.push_back({"tensor [] " + tag, fp8_tensor(200, 300, w, ScaleLayout::kTensor), Shape{}, s});
      cases.push_back({"tensor [1] " + tag, fp8_tensor(200, 300, w, ScaleLayout::kTensor), Shape{1}, s});
      cases.push_back({"row [N,1] " + tag, fp8_tensor(200, 300, w, ScaleLayout::kRow), Shape{200, 1}, s});
      cases.push_back({"row [N] " + tag, fp8_tensor(200, 300, w, ScaleLayout::kRow), Shape{200}, s});
      cases.push_back({"block 128x128 " + tag, fp8_tensor(200, 300, w, ScaleLayout::kBlock, 128, 128), Shape{2, 3}, s});
      cases.push_back({"block 3x5 " + tag, fp8_tensor(7, 11, w, ScaleLayout::kBlock, 3, 5), Shape{3, 3}, s});
      cases.push_back({"block 64x32 " + tag, fp8_tensor(200, 300, w, ScaleLayout::kBlock, 64, 32), Shape{4, 10}, s});
      cases.push_back({"group 128 " + tag, fp8_tensor(200, 300, w, ScaleLayout::kGroup, 0, 0, 128), Shape{200, 3}, s});
      cases.push_back({"group 32 " + tag, fp8_tensor(9, 70, w, ScaleLayout::kGroup, 0, 0, 32), Shape{9, 3}, s});
      // Long rows take the scaled-table path of the decoder (segments of >= 1024 elements).
      cases.push_back({"row long " + tag, fp8_tensor(3, 2500, w, ScaleLayout::kRow), Shape{3, 1}, s});
      cases.push_back({"group 2048 " + tag, fp8_tensor(3, 5000, w, ScaleLayout::kGroup, 0, 0, 2048), Shape{3, 3}, s});
      // Llama-4's fbgemm experts: a weight stored transposed, one scale per column, either shape.
      cases.push_back({"column [1,K] " + tag, fp8_tensor(200, 300, w, ScaleLayout::kColumn), Shape{1, 300}, s});
      cases.push_back({"column [K,1] " + tag, fp8_tensor(7, 11, w, ScaleLayout::kColumn), Shape{11, 1}, s});
    }
  }
  return cases;
}

}  // namespace

TEST_CASE("dequantize fp8 matches code * scale for every scale layout, weight and scale dtype", "[quant]") {
  std::mt19937 rng(7);
  for (const Fp8Case& c : dequantize_cases()) {
    INFO(c.label);
    const Fp8Parts p = make_parts(c, rng);
    const std::vector<float> got = dequantize_all(c.tensor, p.parts);
    const std::vector<float> want = reference_dequantize(c.tensor, p, p.parts[1]);
    Mismatches m;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!same_float(got[i], want[i])) m.add("element", i, "code", int{p.codes[i]}, "got", got[i], "want", want[i]);
    REQUIRE_NO_MISMATCHES(m);

    // Any row range gives the same bytes as the matching slice of the whole.
    const std::uint64_t rows = c.tensor.rows;
    const std::uint64_t cols = c.tensor.cols;
    std::uniform_int_distribution<std::uint64_t> row(0, rows);
    for (int trial = 0; trial < 8; ++trial) {
      std::uint64_t a = row(rng);
      std::uint64_t b = row(rng);
      if (a > b) std::swap(a, b);
      if (trial == 0) a = b;  // empty range
      std::vector<float> part((b - a) * cols);
      REQUIRE(dequantize_rows(c.tensor, p.parts, a, b, DType::kF32, std::as_writable_bytes(std::span(part))));
      // memcmp with a null pointer is undefined even for 0 bytes (an empty range has no data()).
      CHECK((part.empty() || std::memcmp(part.data(), got.data() + a * cols, part.size() * sizeof(float)) == 0));
    }
  }
}

// BF16 and F16 outputs (a table of narrowed products per scale where a scale covers enough
// elements, else the f32 path) give exactly the f32 elements narrowed by convert(), for the
// whole weight and for row ranges, with NaN, Inf and zero among the scales.
TEST_CASE("dequantize fp8 to bf16 and f16 gives the f32 elements narrowed, every layout and row range", "[quant]") {
  std::mt19937 rng(11);
  for (Fp8Case c : dequantize_cases()) {
    INFO(c.label);
    Fp8Parts p = make_parts(c, rng);
    if (c.scale_dtype == DType::kF32 && p.scale.size() >= 16) {  // special scales: NaN, Inf, 0
      const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 0.0f};
      std::memcpy(p.scale.data() + 4, special, sizeof special);
    }
    const std::vector<float> f32 = dequantize_all(c.tensor, p.parts);
    const std::uint64_t rows = c.tensor.rows, cols = c.tensor.cols;
    for (const DType dtype : {DType::kBF16, DType::kF16}) {
      INFO(dtype_name(dtype));
      std::vector<std::byte> want(f32.size() * 2);
      REQUIRE(convert(std::as_bytes(std::span(f32)), DType::kF32, want, dtype));
      std::uniform_int_distribution<std::uint64_t> row(0, rows);
      for (int trial = 0; trial < 6; ++trial) {
        std::uint64_t a = trial == 0 ? 0 : row(rng), b = trial == 0 ? rows : row(rng);
        if (a > b) std::swap(a, b);
        std::vector<std::byte> got((b - a) * cols * 2 + 1);  // odd start: unaligned 16-bit output
        REQUIRE(dequantize_rows(c.tensor, p.parts, a, b, dtype, std::span(got).subspan(1)));
        CHECK(std::equal(got.begin() + 1, got.end(), want.begin() + static_cast<std::ptrdiff_t>(a * cols * 2)));
      }
    }
  }
}

TEST_CASE("dequantize fp8 multiplies weight_scale_inv, preferred over weight_scale", "[quant]") {
  std::mt19937 rng(11);
  const Fp8Case c{"block", fp8_tensor(130, 260, DType::kF8_E4M3, ScaleLayout::kBlock, 128, 128), Shape{2, 3},
                  DType::kF32};
  Fp8Parts p = make_parts(c, rng, "weight_scale_inv");
  const std::vector<float> want = reference_dequantize(c.tensor, p, p.parts[1]);
  // A decoy weight_scale of the wrong shape: not read when weight_scale_inv is there.
  const std::vector<float> decoy(5, 1000.0f);
  const std::vector<std::byte> decoy_bytes = to_bytes(decoy);
  p.parts.insert(p.parts.begin(), PartBytes{"weight_scale", DType::kF32, Shape{5}, decoy_bytes});
  const std::vector<float> got = dequantize_all(c.tensor, p.parts);
  Mismatches m;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!same_float(got[i], want[i])) m.add("element", i, "got", got[i], "want", want[i]);
  REQUIRE_NO_MISMATCHES(m);
  // DeepSeek-V3: 0x38 (1.0) with weight_scale_inv 0.5 dequantizes to 0.5 (multiplied, not divided).
  const std::vector<std::uint8_t> one(130 * 260, 0x38);
  const std::vector<float> half(6, 0.5f);
  const std::vector<std::byte> half_bytes = to_bytes(half);
  const PartBytes simple[] = {{"weight", DType::kF8_E4M3, Shape{130, 260}, std::as_bytes(std::span(one))},
                              {"weight_scale_inv", DType::kF32, Shape{2, 3}, half_bytes}};
  for (float v : dequantize_all(c.tensor, simple)) REQUIRE(v == 0.5f);
}

TEST_CASE("dequantize fp8 rejects wrong dtypes and shapes as kCorrupt naming tensor and shapes", "[quant]") {
  const std::vector<std::uint8_t> codes(200 * 300, 0x38);
  const std::vector<float> scales(200 * 10, 1.0f);
  const auto code_bytes = std::as_bytes(std::span(codes));
  const auto scale_bytes = [&](std::uint64_t n) { return std::as_bytes(std::span(scales)).first(n * 4); };
  std::vector<float> out(200 * 300);
  const auto run = [&](const LogicalTensor& t, std::vector<PartBytes> parts) {
    return dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  };
  const PartBytes good_weight{"weight", DType::kF8_E4M3, Shape{200, 300}, code_bytes};

  SECTION("weight shape") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kTensor);
    const std::vector<std::uint8_t> more(201 * 300, 0x38);
    require_corrupt(run(t, {{"weight", DType::kF8_E4M3, Shape{201, 300}, std::as_bytes(std::span(more))},
                            {"weight_scale", DType::kF32, Shape{1}, scale_bytes(1)}}),
                    {"[201, 300]", "[200, 300]", "weight"});
  }
  SECTION("weight dtype") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kTensor);
    require_corrupt(run(t, {{"weight", DType::kI8, Shape{200, 300}, code_bytes},
                            {"weight_scale", DType::kF32, Shape{1}, scale_bytes(1)}}),
                    {"I8", "F8_E4M3"});
    require_corrupt(run(t, {{"weight", DType::kF8_E5M2, Shape{200, 300}, code_bytes},
                            {"weight_scale", DType::kF32, Shape{1}, scale_bytes(1)}}),
                    {"F8_E5M2", "F8_E4M3"});
  }
  SECTION("weight bytes") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kTensor);
    require_corrupt(run(t, {{"weight", DType::kF8_E4M3, Shape{200, 300}, code_bytes.first(1000)},
                            {"weight_scale", DType::kF32, Shape{1}, scale_bytes(1)}}),
                    {"1000", "60000"});
  }
  SECTION("scale dtype") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kTensor);
    require_corrupt(run(t, {good_weight, {"weight_scale", DType::kI32, Shape{1}, scale_bytes(1)}}), {"I32"});
  }
  SECTION("per-tensor scale shape") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kTensor);
    require_corrupt(run(t, {good_weight, {"weight_scale", DType::kF32, Shape{2}, scale_bytes(2)}}),
                    {"[2]", "[] or [1]"});
  }
  SECTION("per-row scale shape") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kRow);
    require_corrupt(run(t, {good_weight, {"weight_scale", DType::kF32, Shape{200, 2}, scale_bytes(400)}}),
                    {"[200, 2]", "[200, 1] or [200]"});
    require_corrupt(run(t, {good_weight, {"weight_scale", DType::kF32, Shape{1, 200}, scale_bytes(200)}}),
                    {"[1, 200]"});
  }
  SECTION("block scale shape") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kBlock, 128, 128);
    require_corrupt(run(t, {good_weight, {"weight_scale_inv", DType::kF32, Shape{1, 2}, scale_bytes(2)}}),
                    {"[1, 2]", "[2, 3]"});
    require_corrupt(run(t, {good_weight, {"weight_scale_inv", DType::kF32, Shape{3, 2}, scale_bytes(6)}}),
                    {"[3, 2]", "[2, 3]"});
  }
  SECTION("group scale shape") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kGroup, 0, 0, 128);
    require_corrupt(run(t, {good_weight, {"weight_scale", DType::kF32, Shape{200, 2}, scale_bytes(400)}}),
                    {"[200, 2]", "[200, 3]"});
  }
  SECTION("scale bytes") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kRow);
    require_corrupt(run(t, {good_weight, {"weight_scale", DType::kF32, Shape{200, 1}, scale_bytes(199)}}),
                    {"796", "800"});
  }
  SECTION("missing parts") {
    const LogicalTensor t = fp8_tensor(200, 300, DType::kF8_E4M3, ScaleLayout::kTensor);
    require_corrupt(run(t, {good_weight}), {"weight_scale"});
    require_corrupt(run(t, {{"weight_scale", DType::kF32, Shape{1}, scale_bytes(1)}}), {"weight"});
  }
}
