// detect_quantization (quant.hpp) on hand-built catalogs, the FP8 and FP4 families: FP8 in
// 128x128 blocks, per tensor and per row (HF fp8, fbgemm_fp8 with Llama-4's stacked experts,
// ModelOpt), FP8 and int8 weights found by their suffixes without a config, and gpt-oss MXFP4.
// GPTQ, AWQ and the rejections: quant_detect_test.cpp; compressed-tensors:
// quant_detect_ct_test.cpp; the catalog builders: quant_detect_support.hpp.
#include <catch2/catch.hpp>

#include <algorithm>

#include <cstdint>
#include <string>
#include <vector>

#include "formats_test_support.hpp"
#include "qload/formats/quant.hpp"
#include "quant_detect_support.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing;
using namespace qload::testing::quant_detect;

TEST_CASE("fp8 block (DeepSeek-V3): weight_scale_inv per 128x128 block", "[quant][detect]") {
  const std::vector<T> ts{{"l.weight", DType::kF8_E4M3, Shape{300, 200}},
                          {"l.weight_scale_inv", DType::kF32, Shape{3, 2}},
                          {"gate.weight", DType::kBF16, Shape{8, 200}},
                          {"l.bias", DType::kBF16, Shape{300}}};
  const std::string cfg =
      R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]})";
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  const LogicalTensor& t = only_logical(*q);
  CHECK(t.name == "l.weight");
  CHECK(t.params.scheme == QuantScheme::kFp8);
  CHECK(t.params.scale_layout == ScaleLayout::kBlock);
  CHECK(t.params.block_rows == 128);
  CHECK(t.params.block_cols == 128);
  CHECK(t.params.weight_dtype == DType::kF8_E4M3);
  CHECK(t.params.scale_dtype == DType::kF32);
  CHECK(t.rows == 300);
  CHECK(t.cols == 200);
  CHECK(t.part("weight") == 0u);
  CHECK(t.part("weight_scale_inv") == 1u);
  CHECK(q->plain == std::vector<std::uint32_t>{2, 3});
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale_inv", DType::kF32, Shape{2, 2}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected F16, BF16 or F32 [3, 2], found F32 [2, 2]",
               .tensor = "l.weight_scale_inv"});
  check_error(
      detect_quantization(make_catalog(with(ts, "l.weight", DType::kBF16, Shape{300, 200}), cfg)),
      {.code = Errc::kCorrupt, .message_has = "expected F8_E4M3 or F8_E5M2 [N, K], found BF16", .tensor = "l.weight"});
  check_error(detect_quantization(make_catalog(with(ts, "l.weight", DType::kF8_E5M2, Shape{300, 200}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "expected F8_E4M3", .tensor = "l.weight"});
  check_error(detect_quantization(make_catalog(without(ts, "l.weight_scale_inv"), cfg)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.weight_scale_inv'", .tensor = "l.weight"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"fp8","weight_block_size":[128]})")),
              {.code = Errc::kCorrupt, .message_has = "weight_block_size"});
}

TEST_CASE("fp8 without a block size: per-tensor scale, or per-row inferred from the shape; input_scale is a part",
          "[quant][detect]") {
  const std::string cfg = R"({"quant_method":"fp8","activation_scheme":"static"})";
  for (const Shape& scalar : {Shape{}, Shape{1}}) {
    const std::vector<T> ts{{"attn.k_proj.weight", DType::kF8_E4M3, Shape{64, 32}},
                            {"attn.k_proj.weight_scale", DType::kF32, scalar},
                            {"attn.k_proj.input_scale", DType::kF32, Shape{}},
                            {"attn.k_scale", DType::kF32, Shape{}}};
    const auto q = detect_quantization(make_catalog(ts, cfg));
    REQUIRE(q);
    const LogicalTensor& t = only_logical(*q);
    CHECK(t.params.scale_layout == ScaleLayout::kTensor);
    CHECK(t.part("input_scale") == 2u);
    CHECK(q->plain == std::vector<std::uint32_t>{3});  // k_scale stays plain
  }
  const std::vector<T> row{{"l.weight", DType::kF8_E4M3, Shape{64, 32}}, {"l.weight_scale", DType::kF32, Shape{64, 1}}};
  const auto q = detect_quantization(make_catalog(row, cfg));
  REQUIRE(q);
  CHECK(only_logical(*q).params.scale_layout == ScaleLayout::kRow);
  check_error(detect_quantization(make_catalog(with(row, "l.weight_scale", DType::kF32, Shape{1, 32}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected F16, BF16 or F32 [] or [1] or [64, 1] or [64], found F32 [1, 32]",
               .tensor = "l.weight_scale"});
  check_error(detect_quantization(
                  make_catalog(with(row, "l.weight_scale", DType::kF32, Shape{2, 2}), R"({"quant_method":"fp8"})")),
              {.code = Errc::kCorrupt, .tensor = "l.weight_scale"});
  const std::vector<T> bad_input{{"l.weight", DType::kF8_E4M3, Shape{64, 32}},
                                 {"l.weight_scale", DType::kF32, Shape{}},
                                 {"l.input_scale", DType::kF32, Shape{64}}};
  check_error(detect_quantization(make_catalog(bad_input, cfg)), {.code = Errc::kCorrupt, .tensor = "l.input_scale"});
  const std::vector<T> inv{{"l.weight", DType::kF8_E4M3, Shape{64, 32}},
                           {"l.weight_scale_inv", DType::kF32, Shape{1, 1}}};
  check_error(detect_quantization(make_catalog(inv, cfg)),
              {.code = Errc::kCorrupt, .message_has = "no block size", .tensor = "l.weight_scale_inv"});
  check_error(detect_quantization(make_catalog(row, R"({"quant_method":"fp8","fmt":"e5m2"})")),
              {.code = Errc::kCorrupt, .message_has = "expected F8_E5M2", .tensor = "l.weight"});
}

TEST_CASE("fbgemm_fp8 is per row", "[quant][detect]") {
  const std::vector<T> ts{{"l.weight", DType::kF8_E4M3, Shape{64, 32}}, {"l.weight_scale", DType::kF32, Shape{64, 1}}};
  const std::string cfg = R"({"quant_method":"fbgemm_fp8","activation_scale_ub":1200.0})";
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  CHECK(q->method == "fbgemm_fp8");
  CHECK(only_logical(*q).params.scale_layout == ScaleLayout::kRow);
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kF32, Shape{1}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected F16, BF16 or F32 [64, 1] or [64], found F32 [1]",
               .tensor = "l.weight_scale"});
}

TEST_CASE("fbgemm_fp8: Llama-4's fused experts are stacked FP8 weights scaled per column", "[quant][detect]") {
  const std::string p = "language_model.model.layers.1.feed_forward.experts.";
  const std::vector<T> ts{{p + "gate_up_proj", DType::kF8_E4M3, Shape{4, 64, 96}},  // [E, H, 2I]
                          {p + "gate_up_proj_scale", DType::kF32, Shape{4, 1, 96}},
                          {p + "down_proj", DType::kF8_E4M3, Shape{4, 48, 64}},  // [E, I, H]
                          {p + "down_proj_scale", DType::kF32, Shape{4, 64, 1}},
                          {"l.weight", DType::kF8_E4M3, Shape{64, 32}},
                          {"l.weight_scale", DType::kF32, Shape{64, 1}},
                          {"router.weight", DType::kBF16, Shape{4, 64}}};
  const std::string cfg = R"({"quant_method":"fbgemm_fp8","modules_to_not_convert":["router"]})";
  const auto q = detect_quantization(make_catalog(ts, cfg));
  if (!q) FAIL(q.error().to_string());
  REQUIRE(q->logical.size() == 3);
  const auto named = [&](const std::string& name) -> const LogicalTensor& {
    const auto it = std::ranges::find(q->logical, name, &LogicalTensor::name);
    REQUIRE(it != q->logical.end());
    return *it;
  };
  const LogicalTensor& down = named(p + "down_proj");
  const LogicalTensor& gate_up = named(p + "gate_up_proj");
  CHECK((down.experts == 4 && down.rows == 4 * 48 && down.cols == 64 && down.shape == Shape{4, 48, 64}));
  CHECK((gate_up.experts == 4 && gate_up.rows == 4 * 64 && gate_up.cols == 96));
  CHECK(gate_up.params.scale_layout == ScaleLayout::kColumn);
  CHECK(gate_up.part("weight_scale").has_value());
  CHECK(named("l.weight").params.scale_layout == ScaleLayout::kRow);
  CHECK(describe_layout(gate_up, make_catalog(ts, cfg)).scales.starts_with("per-channel (per column"));
  // A scale that is not one per expert and output channel.
  check_error(detect_quantization(make_catalog(with(ts, p + "gate_up_proj_scale", DType::kF32, Shape{4, 64, 1}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected F32 [4, 1, 96] or [4, 96, 1]",
               .tensor = p + "gate_up_proj_scale"});
  // Without fbgemm_fp8 the pair is two plain tensors, as before.
  const auto plain = detect_quantization(make_catalog(ts, R"({"quant_method":"fp8"})"));
  REQUIRE(plain);
  CHECK(plain->logical.size() == 1);
}

TEST_CASE("modelopt fp8 from hf_quant_config.json or config.json", "[quant][detect]") {
  const std::vector<T> ts{{"l.weight", DType::kF8_E4M3, Shape{64, 32}},
                          {"l.weight_scale", DType::kF32, Shape{}},
                          {"l.input_scale", DType::kF32, Shape{}},
                          {"lm_head.weight", DType::kBF16, Shape{100, 32}}};
  ScratchDir dir;
  write_text(
      dir.file("hf_quant_config.json"),
      R"({"producer":{"name":"modelopt","version":"0.19"},"quantization":{"quant_algo":"FP8","kv_cache_quant_algo":null,"exclude_modules":["lm_head"]}})");
  const auto q = detect_quantization(make_catalog(ts, {}, dir.path().string()));
  REQUIRE(q);
  CHECK(q->method == "modelopt");
  CHECK(q->config_source == "hf_quant_config.json");
  CHECK(only_logical(*q).params.scale_layout == ScaleLayout::kTensor);
  CHECK(only_logical(*q).parts.size() == 3);
  CHECK(q->plain == std::vector<std::uint32_t>{3});

  const std::vector<T> row{{"l.weight", DType::kF8_E4M3, Shape{64, 32}}, {"l.weight_scale", DType::kF32, Shape{64, 1}}};
  const auto channel =
      detect_quantization(make_catalog(row, R"({"quant_method":"modelopt","quant_algo":"FP8_PER_CHANNEL_PER_TOKEN"})"));
  REQUIRE(channel);
  CHECK(only_logical(*channel).params.scale_layout == ScaleLayout::kRow);
  check_error(
      detect_quantization(make_catalog(row, R"({"quant_method":"modelopt","quant_algo":"FP8"})")),
      {.code = Errc::kCorrupt, .message_has = "expected F16, BF16 or F32 [] or [1]", .tensor = "l.weight_scale"});
  check_error(detect_quantization(make_catalog(row, R"({"quant_method":"modelopt","quant_algo":"W4A16_AWQ"})")),
              {.code = Errc::kUnsupported, .message_has = "'W4A16_AWQ'"});
  // NVFP4 is decoded (quant_fp4_test.cpp); FP8 tensors under it contradict the config.
  check_error(detect_quantization(make_catalog(row, R"({"quant_method":"modelopt","quant_algo":"NVFP4"})")),
              {.code = Errc::kCorrupt, .message_has = "modelopt NVFP4 part weight: expected U8 [N, K/2]"});
  // Only the KV cache quantized: the weights must be plain.
  const auto kv = detect_quantization(
      make_catalog({{"l.weight", DType::kBF16, Shape{4, 4}}}, R"({"quant_method":"modelopt","quant_algo":null})"));
  REQUIRE(kv);
  CHECK(kv->logical.empty());
  check_error(detect_quantization(make_catalog(row, R"({"quant_method":"modelopt","quant_algo":null})")),
              {.code = Errc::kCorrupt, .message_has = "quantizes no weights", .tensor = "l.weight_scale"});
}

TEST_CASE("without a config, fp8 and int8 weights with a scale are detected by their suffixes", "[quant][detect]") {
  const std::vector<T> ts{
      {"a.weight", DType::kF8_E4M3, Shape{64, 32}},   {"a.weight_scale", DType::kF32, Shape{64, 1}},
      {"b.weight", DType::kF8_E4M3, Shape{300, 200}}, {"b.weight_scale_inv", DType::kF32, Shape{3, 2}},
      {"c.weight", DType::kF8_E5M2, Shape{8, 8}},     {"c.weight_scale", DType::kF32, Shape{1}}};
  const auto q = detect_quantization(make_catalog(ts));
  REQUIRE(q);
  CHECK(q->method == "fp8");
  CHECK(q->config_source == "tensor names");
  REQUIRE(q->logical.size() == 3);
  CHECK(q->logical[0].params.scale_layout == ScaleLayout::kRow);
  CHECK(q->logical[1].params.scale_layout == ScaleLayout::kBlock);
  CHECK(q->logical[1].params.block_rows == 128);
  CHECK(q->logical[2].params.scale_layout == ScaleLayout::kTensor);
  CHECK(q->logical[2].params.weight_dtype == DType::kF8_E5M2);
  const auto int8 = detect_quantization(
      make_catalog({{"a.weight", DType::kI8, Shape{64, 32}}, {"a.weight_scale", DType::kF32, Shape{64, 1}}}));
  REQUIRE(int8);
  CHECK(int8->method == "int8");
  CHECK(only_logical(*int8).params.scheme == QuantScheme::kCtInt);
  check_error(detect_quantization(make_catalog(with(ts, "b.weight_scale_inv", DType::kF32, Shape{5, 2}))),
              {.code = Errc::kCorrupt, .tensor = "b.weight_scale_inv"});
}

TEST_CASE("mxfp4 (gpt-oss): <name>_blocks and <name>_scales pairs under quant_method mxfp4", "[quant][detect]") {
  const std::string config = R"({"quant_method":"mxfp4","modules_to_not_convert":["model.layers.0.self_attn"]})";
  const std::string p = "model.layers.0.mlp.experts.";
  std::vector<T> ts = {{p + "gate_up_proj_blocks", DType::kU8, Shape{4, 64, 90, 16}},
                       {p + "gate_up_proj_scales", DType::kU8, Shape{4, 64, 90}},
                       {p + "gate_up_proj_bias", DType::kBF16, Shape{4, 64}},
                       {"model.layers.0.self_attn.q_proj.weight", DType::kBF16, Shape{64, 2880}}};
  const auto q = detect_quantization(make_catalog(ts, config));
  REQUIRE(q);
  CHECK(q->method == "mxfp4");
  const LogicalTensor& w = only_logical(*q);
  CHECK(w.name == p + "gate_up_proj");
  CHECK(w.params.scheme == QuantScheme::kMxfp4);
  CHECK((w.rows == 4 * 64 && w.cols == 2880));
  CHECK(w.dequantized_shape() == Shape{4, 64, 2880});
  CHECK(q->plain == std::vector<std::uint32_t>{2, 3});
  const QuantLayoutText layout = describe_layout(w, make_catalog(ts, config));
  CHECK((layout.scales == "per-group 32" && layout.scale_dtype == "E8M0"));

  check_error(
      detect_quantization(make_catalog(without(ts, p + "gate_up_proj_scales"), config)),
      {.code = Errc::kCorrupt, .message_has = "MXFP4 blocks without their", .tensor = p + "gate_up_proj_blocks"});
  check_error(
      detect_quantization(make_catalog(with(ts, p + "gate_up_proj_scales", DType::kU8, Shape{4, 64, 89}), config)),
      {.code = Errc::kCorrupt, .message_has = "expected U8 [..., G, 16] and U8 [..., G]"});
}
