// compressed-tensors FP4: nvfp4-pack-quantized (E2M1 pairs, E4M3 scale per 16, a global
// scale) and mxfp4-pack-quantized (E8M0 exponent per 32): detection from the config and the
// parts, and the decode on hand-worked values. Equality with compressed-tensors' own
// decompressor on checkpoints it wrote is python.clients (test_quantized_libraries.py); the
// GPU kernels against these decoders, quant_device_args_test.cpp and tests/gpu.
#include <catch2/catch.hpp>

#include <bit>
#include <cstring>
#include <vector>

#include "formats_test_support.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "quant_detect_support.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing;
using namespace qload::testing::quant_detect;

namespace {

const std::string kNvfp4 =
    R"({"num_bits":4,"type":"float","symmetric":true,"strategy":"tensor_group","group_size":16})";
const std::string kMxfp4 = R"({"num_bits":4,"type":"float","symmetric":true,"strategy":"group","group_size":32})";

std::vector<T> nvfp4_parts(const std::string& p, std::uint64_t n, std::uint64_t k) {
  return {{p + ".weight_packed", DType::kU8, Shape{n, k / 2}},
          {p + ".weight_scale", DType::kF8_E4M3, Shape{n, k / 16}},
          {p + ".weight_global_scale", DType::kF32, Shape{1}},
          {p + ".input_global_scale", DType::kF32, Shape{1}}};
}

std::vector<float> decode(const LogicalTensor& t, const std::vector<PartBytes>& parts) {
  std::vector<float> out(t.rows * t.cols);
  const Status s = dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!s) FAIL(s.error().to_string());
  return out;
}

}  // namespace

TEST_CASE("compressed-tensors nvfp4-pack-quantized: weight_packed U8, E4M3 scales per 16, a global scale",
          "[quant][detect][fp4]") {
  const std::string cfg = ct_config(kNvfp4, "nvfp4-pack-quantized", R"(,"ignore":["lm_head"])");
  std::vector<T> ts = nvfp4_parts("l", 64, 96);
  ts.push_back({"lm_head.weight", DType::kBF16, Shape{10, 96}});
  const auto q = detect_quantization(make_catalog(ts, cfg));
  if (!q) FAIL(q.error().to_string());
  const LogicalTensor& t = only_logical(*q);
  CHECK(t.params.scheme == QuantScheme::kNvfp4);
  CHECK(weight_scheme_name(t.params) == "nvfp4");
  CHECK((t.rows == 64 && t.cols == 96));
  CHECK((t.params.group_size == 16 && t.params.bits == 4));
  CHECK(t.part("weight_global_scale").has_value());
  const QuantLayoutText layout = describe_layout(t, make_catalog(ts, cfg));
  CHECK(layout.scales == "per-group 16, divided by a per-tensor global scale (F32)");
  CHECK(layout.scale_dtype == "F8_E4M3");

  check_error(detect_quantization(make_catalog(without(ts, "l.weight_global_scale"), cfg)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.weight_global_scale'"});
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kF16, Shape{64, 6}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "expected F8_E4M3 [64, 6]", .tensor = "l.weight_scale"});
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_packed", DType::kU8, Shape{64, 44}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "K a multiple of 16", .tensor = "l.weight_packed"});
  // Under an int pack-quantized config these parts are a contradiction, named.
  check_error(detect_quantization(make_catalog(ts, ct_config(kW4A16, "pack-quantized"))),
              {.code = Errc::kCorrupt, .message_has = "is not a part of that scheme"});
  // Only what compressed-tensors writes: group 16, tensor_group, symmetric.
  check_error(detect_quantization(make_catalog(
                  ts, ct_config(R"({"num_bits":4,"type":"float","strategy":"tensor_group","group_size":32})",
                                "nvfp4-pack-quantized"))),
              {.code = Errc::kUnsupported, .message_has = "nvfp4-pack-quantized with 4 bits, group 32"});
}

TEST_CASE("compressed-tensors mxfp4-pack-quantized is MXFP4 with compressed-tensors' part names",
          "[quant][detect][fp4]") {
  const std::vector<T> ts{{"l.weight_packed", DType::kU8, Shape{8, 64}}, {"l.weight_scale", DType::kU8, Shape{8, 4}}};
  const std::string cfg = ct_config(kMxfp4, "mxfp4-pack-quantized");
  const auto q = detect_quantization(make_catalog(ts, cfg));
  if (!q) FAIL(q.error().to_string());
  const LogicalTensor& t = only_logical(*q);
  CHECK(t.params.scheme == QuantScheme::kMxfp4);
  CHECK((t.rows == 8 && t.cols == 128));
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kF8_E4M3, Shape{8, 4}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "expected U8 [8, 4]", .tensor = "l.weight_scale"});
}

TEST_CASE("nvfp4 decodes E2M1 times scale / global_scale, each rounded to f32, code 8 as -0", "[quant][fp4]") {
  LogicalTensor t{.name = "w", .rows = 2, .cols = 16};
  t.params = {.scheme = QuantScheme::kNvfp4, .bits = 4, .group_size = 16};
  // Row 0: codes 0..15 in order (low nibble first); row 1: all code 1 (0.5).
  std::vector<std::uint8_t> packed = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
  packed.resize(16, 0x11);
  const std::vector<std::uint8_t> scales = {0x40, 0x38};  // E4M3 2.0 and 1.0
  float global = 4.0f;
  std::vector<PartBytes> parts = {{"weight_packed", DType::kU8, Shape{2, 8}, std::as_bytes(std::span(packed))},
                                  {"weight_scale", DType::kF8_E4M3, Shape{2, 1}, std::as_bytes(std::span(scales))},
                                  {"weight_global_scale", DType::kF32, Shape{1}, std::as_bytes(std::span(&global, 1))}};
  const std::vector<float> levels = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<float> got = decode(t, parts);
  for (std::size_t k = 0; k < 16; ++k) {
    INFO(k);
    CHECK(std::bit_cast<std::uint32_t>(got[k]) == std::bit_cast<std::uint32_t>(levels[k] * 0.5f));  // 2 / 4
    CHECK(got[16 + k] == 0.5f * 0.25f);                                                             // 1 / 4
  }
  CHECK(std::signbit(got[8]));
  // A global scale of 3: scale / 3 rounds to f32 first, then level * that rounds again.
  global = 3.0f;
  got = decode(t, parts);
  const float third = 1.0f / 3.0f;
  CHECK(got[16 + 0] == 0.5f * third);
  CHECK(std::bit_cast<std::uint32_t>(got[7]) == std::bit_cast<std::uint32_t>(6.0f * (2.0f / 3.0f)));
  // Parts of the wrong size are refused, naming the weight.
  parts[1].bytes = parts[1].bytes.first(1);
  std::vector<float> out(32);
  const Status bad = dequantize_rows(t, parts, 0, 2, DType::kF32, std::as_writable_bytes(std::span(out)));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::kCorrupt);
  CHECK(bad.error().tensor() == std::optional<std::string_view>("w"));
}

TEST_CASE("ModelOpt NVFP4 from hf_quant_config.json: weight U8, weight_scale E4M3, weight_scale_2 multiplies",
          "[quant][fp4][detect]") {
  const std::string cfg =
      R"({"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head"]})";
  std::vector<T> ts = {{"l.weight", DType::kU8, Shape{64, 48}},
                       {"l.weight_scale", DType::kF8_E4M3, Shape{64, 6}},
                       {"l.weight_scale_2", DType::kF32, Shape{}},
                       {"l.input_scale", DType::kF32, Shape{}},
                       {"lm_head.weight", DType::kBF16, Shape{32, 96}}};
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  CHECK(q->method == "modelopt");
  const LogicalTensor& t = only_logical(*q);
  CHECK((t.name == "l.weight" && t.rows == 64 && t.cols == 96));
  CHECK(t.params.scheme == QuantScheme::kNvfp4);
  CHECK(t.part("weight_scale_2").has_value());
  CHECK(describe_layout(t, make_catalog(ts, cfg)).scales == "per-group 16, times a per-tensor weight_scale_2 (F32)");
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kF8_E4M3, Shape{64, 3}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "part weight_scale", .tensor = "l.weight_scale"});
  check_error(detect_quantization(make_catalog(without(ts, "l.weight_scale_2"), cfg)),
              {.code = Errc::kCorrupt, .message_has = "weight_scale_2"});
  check_error(
      detect_quantization(make_catalog(ts, R"({"quant_method":"modelopt","quant_algo":"NVFP4","group_size":32})")),
      {.code = Errc::kUnsupported, .message_has = "NVFP4 scales groups of 16"});
}

TEST_CASE("ModelOpt NVFP4 decodes E2M1 times (scale * weight_scale_2), each rounded to f32", "[quant][fp4]") {
  LogicalTensor t{.name = "w", .rows = 1, .cols = 16};
  t.params = {.scheme = QuantScheme::kNvfp4, .bits = 4, .group_size = 16};
  std::vector<std::uint8_t> packed = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
  const std::vector<std::uint8_t> scales = {0x40};  // E4M3 2.0
  // weight_scale_2 is ModelOpt's amax / (6 * 448): the block scale is scale * it, rounded to f32.
  const float scale_2 = 1.0f / 3.0f;
  const std::vector<PartBytes> parts = {
      {"weight", DType::kU8, Shape{1, 8}, std::as_bytes(std::span(packed))},
      {"weight_scale", DType::kF8_E4M3, Shape{1, 1}, std::as_bytes(std::span(scales))},
      {"weight_scale_2", DType::kF32, Shape{}, std::as_bytes(std::span(&scale_2, 1))}};
  const std::vector<float> got = decode(t, parts);
  const std::vector<float> levels = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  const float block = 2.0f * scale_2;
  for (std::size_t k = 0; k < 16; ++k) {
    INFO(k);
    CHECK(std::bit_cast<std::uint32_t>(got[k]) == std::bit_cast<std::uint32_t>(levels[k] * block));
  }
}
