// FP8 codecs, the FP8 decoder (dequantize_rows with QuantScheme::kFp8) and quantize-on-load
// (quant_codec.hpp), against references written here that share none of the implementation's
// bit tricks (formats.md 3.1 for the formats):
//   - decoding: each code's value from its sign, exponent and mantissa fields with std::ldexp
//     in double (ref_decode), plus the known values listed in formats.md;
//   - encoding: brute force (ref_encode_e4m3): of all the non-NaN E4M3 values with the input's
//     sign, the one nearest to the input, distances computed exactly as integers, ties to the
//     even code; saturation falls out of it (past 448 the nearest finite value is 448);
//   - dequantizing: W[n,k] = ref_decode(code) * scale, the scale read by hand (F32 bits, BF16
//     as the top half of an f32, F16 through GCC's _Float16) at an index computed from the
//     layout's definition;
//   - quantizing: amax, scale and x / scale per the header in plain f32 arithmetic, codes by
//     the brute-force encoder, int8 by a floor-based round half to even; the round trip is
//     also held to an error bound (derived at round_trip_bound_fp8 / round_trip_bound_int8).
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

using namespace qload;
using namespace qload::formats;

namespace {

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

double ref_decode(std::uint8_t code, Fp8Format f) {
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int field = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int all_ones = (1 << f.exponent_bits) - 1;
  if (f.ieee_specials && field == all_ones) return mantissa == 0 ? sign * INFINITY : std::copysign(NAN, sign);
  if (!f.ieee_specials && field == all_ones && mantissa == (1 << f.mantissa_bits) - 1) return std::copysign(NAN, sign);
  if (field == 0) return sign * std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  return sign * std::ldexp((1 << f.mantissa_bits) + mantissa, field - f.bias - f.mantissa_bits);
}

float ref_decode_f(std::uint8_t code, Fp8Format f) {
  return static_cast<float>(ref_decode(code, f));
}

std::uint8_t ref_encode_e4m3(float x) {
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
float ref_round_half_even(float v) {
  const double low = std::floor(static_cast<double>(v));
  const double frac = static_cast<double>(v) - low;  // exact: v is a float, low its floor
  if (frac > 0.5) return static_cast<float>(low + 1);
  if (frac < 0.5) return static_cast<float>(low);
  return static_cast<float>(std::fmod(low, 2.0) == 0 ? low : low + 1);
}

using Half = _Float16;

float bf16_value(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
float f16_value(std::uint16_t h) {
  return static_cast<float>(std::bit_cast<Half>(h));
}

// Equal bit for bit, or both NaN with the same sign.
bool same_float(float a, float b) {
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

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

constexpr const char* kName = "model.layers.3.mlp.down_proj.weight";

LogicalTensor fp8_tensor(std::uint64_t rows, std::uint64_t cols, DType weight_dtype, ScaleLayout layout,
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
std::uint64_t ref_scale_index(const LogicalTensor& t, std::uint64_t n, std::uint64_t k) {
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

float ref_scale_value(const PartBytes& s, std::uint64_t i) {
  switch (s.dtype) {
    case DType::kF32: return element<float>(s.bytes, i);
    case DType::kBF16: return bf16_value(element<std::uint16_t>(s.bytes, i));
    case DType::kF16: return f16_value(element<std::uint16_t>(s.bytes, i));
    default: return NAN;
  }
}

std::vector<float> dequantize_all(const LogicalTensor& t, std::span<const PartBytes> parts) {
  std::vector<float> out(t.rows * t.cols);
  const Status st = dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  INFO((st ? std::string("ok") : st.error().to_string()));
  REQUIRE(st.has_value());
  return out;
}

void require_corrupt(const Status& st, std::initializer_list<std::string_view> mentions) {
  REQUIRE_FALSE(st.has_value());
  INFO(st.error().to_string());
  CHECK(st.error().code() == Errc::kCorrupt);
  CHECK(st.error().tensor() == std::optional<std::string_view>(kName));
  for (std::string_view m : mentions) CHECK(st.error().message().find(m) != std::string::npos);
}

}  // namespace

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
  const QuantizedLayout t = quantized_layout(200, 300, QuantizeTarget::kFp8Tensor);
  CHECK(t.weight_dtype == DType::kF8_E4M3);
  CHECK(t.scale_shape == Shape{1});
  CHECK(t.scale_suffix == "weight_scale");
  CHECK(t.weight_bytes == 60000);
  CHECK(t.scale_bytes == 4);
  const QuantizedLayout r = quantized_layout(200, 300, QuantizeTarget::kFp8Row);
  CHECK(r.scale_shape == Shape{200, 1});
  CHECK(r.scale_bytes == 800);
  const QuantizedLayout b = quantized_layout(200, 300, QuantizeTarget::kFp8Block);
  CHECK(b.scale_shape == Shape{2, 3});
  CHECK(b.scale_suffix == "weight_scale_inv");
  CHECK(b.scale_bytes == 24);
  const QuantizedLayout i = quantized_layout(200, 300, QuantizeTarget::kInt8Row);
  CHECK(i.weight_dtype == DType::kI8);
  CHECK(i.scale_shape == Shape{200, 1});
  CHECK(i.weight_bytes == 60000);
  CHECK(i.scale_bytes == 800);
  CHECK(quantized_layout(256, 128, QuantizeTarget::kFp8Block).scale_shape == Shape{2, 1});
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
  q.layout = quantized_layout(rows, cols, target);
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
