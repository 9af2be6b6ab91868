// detect_quantization (quant.hpp) on hand-built catalogs: every scheme and scale layout, the
// config sources (config.json's quantization_config, side files in a scratch model directory),
// and the rejections: wrong part dtypes and shapes, missing parts, unsupported options and
// contradictory configs. Shapes follow ../shared/formats.md sections 1-4. FP8 and MXFP4:
// quant_detect_fp8_test.cpp; compressed-tensors: quant_detect_ct_test.cpp; the catalog builders:
// quant_detect_support.hpp.
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

TEST_CASE("scheme names and part lookup", "[quant][detect]") {
  CHECK(quant_scheme_name(QuantScheme::kGptq) == "gptq");
  CHECK(quant_scheme_name(QuantScheme::kAwqGemm) == "awq-gemm");
  CHECK(quant_scheme_name(QuantScheme::kAwqGemv) == "awq-gemv");
  CHECK(quant_scheme_name(QuantScheme::kFp8) == "fp8");
  CHECK(quant_scheme_name(QuantScheme::kCtPacked) == "ct-pack-quantized");
  CHECK(quant_scheme_name(QuantScheme::kCtInt) == "ct-int-quantized");
  const LogicalTensor t{.name = "w", .parts = {{"qweight", 3}, {"scales", 7}}};
  CHECK(t.part("scales") == 7u);
  CHECK_FALSE(t.part("qzeros").has_value());
}

TEST_CASE("a checkpoint without config or quantized tensors is all plain", "[quant][detect]") {
  const Catalog c = make_catalog({{"b.weight", DType::kBF16, Shape{4, 4}},
                                  {"a.weight", DType::kF8_E4M3, Shape{4, 4}},  // FP8 without a scale: plain
                                  {"a.scales", DType::kF32, Shape{4}}});       // "scales" alone is no evidence
  const auto q = detect_quantization(c);
  REQUIRE(q);
  CHECK(q->method.empty());
  CHECK(q->logical.empty());
  CHECK(q->plain == std::vector<std::uint32_t>{0, 1, 2});
}

TEST_CASE("gptq from config.json: parts, K and N, v1 by default, bias and norms plain, sorted output",
          "[quant][detect]") {
  std::vector<T> ts{{"model.norm.weight", DType::kF16, Shape{4096}}};
  gptq(ts, "model.layers.1.mlp.down_proj", 11008, 4096, 4, 128);
  gptq(ts, "model.layers.0.self_attn.q_proj", 4096, 4096, 4, 128);
  ts.push_back({"model.layers.0.self_attn.q_proj.bias", DType::kF16, Shape{4096}});
  const Catalog c = make_catalog(ts, kGptq);
  const auto q = detect_quantization(c);
  REQUIRE(q);
  CHECK(q->method == "gptq");
  CHECK(q->config_source == "config.json");
  REQUIRE(q->logical.size() == 2);
  const LogicalTensor& a = q->logical[0];
  CHECK(a.name == "model.layers.0.self_attn.q_proj.weight");
  CHECK(q->logical[1].name == "model.layers.1.mlp.down_proj.weight");
  CHECK(a.rows == 4096);
  CHECK(a.cols == 4096);
  CHECK(q->logical[1].rows == 4096);
  CHECK(q->logical[1].cols == 11008);
  CHECK(a.params.scheme == QuantScheme::kGptq);
  CHECK(a.params.bits == 4);
  CHECK(a.params.group_size == 128);
  CHECK(a.params.gptq_version == 1);
  CHECK(a.params.sym);
  CHECK(a.params.weight_dtype == DType::kI32);
  CHECK(a.params.scale_dtype == DType::kF16);
  CHECK(role_name(c, a, "qweight") == "model.layers.0.self_attn.q_proj.qweight");
  CHECK(role_name(c, a, "qzeros") == "model.layers.0.self_attn.q_proj.qzeros");
  CHECK(role_name(c, a, "scales") == "model.layers.0.self_attn.q_proj.scales");
  CHECK_FALSE(a.part("g_idx").has_value());
  CHECK(q->plain == std::vector<std::uint32_t>{0, 7});  // the norm and the bias
}

TEST_CASE("gptq version: checkpoint_format / format select v1 or v2, others are unsupported", "[quant][detect]") {
  std::vector<T> ts;
  gptq(ts, "l", 256, 64, 4, 128);
  const auto version_of = [&](const std::string& extra) {
    const auto q =
        detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"group_size":128)" + extra + "}"));
    REQUIRE(q);
    return only_logical(*q).params.gptq_version;
  };
  CHECK(version_of("") == 1);
  CHECK(version_of(R"(,"checkpoint_format":"gptq")") == 1);
  CHECK(version_of(R"(,"checkpoint_format":"gptq_v2")") == 2);
  CHECK(version_of(R"(,"format":"GPTQ_V2")") == 2);
  CHECK(version_of(R"(,"format":"gptq_v2","checkpoint_format":"gptq_v2")") == 2);
  // GPTQModel's v1 files store zeros by whole words; everyone else's per field.
  const auto whole_word_of = [&](const std::string& extra) {
    const auto q =
        detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"group_size":128)" + extra + "}"));
    REQUIRE(q);
    return only_logical(*q).params.gptq_v1_whole_word;
  };
  CHECK(whole_word_of(R"(,"meta":{"quantizer":["gptqmodel:4.2.5"]})"));
  CHECK(whole_word_of(R"(,"checkpoint_format":"gptq","meta":{"quantizer":"GPTQModel:1.0"})"));
  CHECK_FALSE(whole_word_of(""));                                                // AutoGPTQ writes no meta
  CHECK_FALSE(whole_word_of(R"(,"meta":{"quantizer":["llmcompressor:0.6"]})"));  // another writer
  CHECK_FALSE(whole_word_of(R"(,"format":"gptq_v2","meta":{"quantizer":["gptqmodel:4.2.5"]})"));  // v2: no z - 1
  check_error(detect_quantization(make_catalog(
                  ts, R"({"quant_method":"gptq","bits":4,"checkpoint_format":"gptq","format":"gptq_v2"})")),
              {.code = Errc::kCorrupt,
               .message_has = "checkpoint_format is 'gptq' but quantization_config.format is 'gptq_v2'",
               .file = "config.json"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"checkpoint_format":"marlin"})")),
              {.code = Errc::kUnsupported, .message_has = "'marlin'"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"is_marlin_format":true})")),
              {.code = Errc::kUnsupported, .message_has = "Marlin"});
}

TEST_CASE("gptq 2-, 3- and 8-bit shapes, group -1, bf16 scales; other widths unsupported", "[quant][detect]") {
  for (const std::uint64_t bits : {2u, 3u, 8u}) {
    std::vector<T> ts;
    gptq(ts, "l", 256, 96, bits, 64);
    const auto q = detect_quantization(
        make_catalog(ts, R"({"quant_method":"gptq","bits":)" + std::to_string(bits) + R"(,"group_size":64})"));
    REQUIRE(q);
    CHECK(only_logical(*q).params.bits == bits);
    CHECK(only_logical(*q).cols == 256);
    CHECK(only_logical(*q).rows == 96);
  }
  std::vector<T> ts;
  gptq(ts, "l", 512, 64, 4, 512);
  ts = with(ts, "l.scales", DType::kBF16, Shape{1, 64});
  const auto q = detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"group_size":-1})"));
  REQUIRE(q);
  CHECK(only_logical(*q).params.group_size == 512);
  CHECK(only_logical(*q).params.scale_dtype == DType::kBF16);
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":5})")),
              {.code = Errc::kUnsupported, .message_has = "5 bits"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"group_size":0})")),
              {.code = Errc::kCorrupt, .message_has = "group_size is 0"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":"4"})")),
              {.code = Errc::kCorrupt, .message_has = "quantization_config.bits is string, expected an integer"});
}

TEST_CASE("gptq part with a wrong shape or dtype is kCorrupt naming it, expected and found", "[quant][detect]") {
  std::vector<T> ts;
  gptq(ts, "l", 4096, 4096, 4, 128);
  const std::string cfg = kGptq;
  check_error(
      detect_quantization(make_catalog(with(ts, "l.qzeros", DType::kI32, Shape{16, 512}), cfg)),
      {.code = Errc::kCorrupt, .message_has = "expected I32 [32, 512], found I32 [16, 512]", .tensor = "l.qzeros"});
  check_error(detect_quantization(make_catalog(with(ts, "l.qzeros", DType::kI64, Shape{32, 512}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "found I64 [32, 512]", .tensor = "l.qzeros"});
  check_error(detect_quantization(make_catalog(with(ts, "l.scales", DType::kF16, Shape{32, 4095}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected F16, BF16 or F32 [32, 4096], found F16 [32, 4095]",
               .tensor = "l.scales"});
  check_error(detect_quantization(make_catalog(with(ts, "l.scales", DType::kI32, Shape{32, 4096}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "found I32 [32, 4096]", .tensor = "l.scales"});
  check_error(detect_quantization(make_catalog(with(ts, "l.qweight", DType::kF16, Shape{512, 4096}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected I32 [K*4/32, N], found F16 [512, 4096]",
               .tensor = "l.qweight"});
  check_error(detect_quantization(make_catalog(with(ts, "l.qweight", DType::kI32, Shape{512}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "found I32 [512]", .tensor = "l.qweight"});
  std::vector<T> three;
  gptq(three, "l", 256, 64, 3, 128);
  check_error(detect_quantization(make_catalog(with(three, "l.qweight", DType::kI32, Shape{25, 64}),
                                               R"({"quant_method":"gptq","bits":3})")),
              {.code = Errc::kCorrupt, .message_has = "rows a multiple of 3", .tensor = "l.qweight"});
}

TEST_CASE("gptq missing parts, stray parts, g_idx with desc_act", "[quant][detect]") {
  std::vector<T> ts;
  gptq(ts, "l", 256, 64, 4, 128);
  check_error(detect_quantization(make_catalog(without(ts, "l.scales"), kGptq)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.scales'", .tensor = "l.weight"});
  check_error(detect_quantization(make_catalog(without(ts, "l.qweight"), kGptq)),
              {.code = Errc::kCorrupt, .message_has = "has no 'l.qweight'", .tensor = "l.qzeros"});
  const std::string act = R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true})";
  check_error(detect_quantization(make_catalog(ts, act)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.g_idx'", .tensor = "l.weight"});
  std::vector<T> with_idx;
  gptq(with_idx, "l", 256, 64, 4, 128, true);
  const auto q = detect_quantization(make_catalog(with_idx, act));
  REQUIRE(q);
  CHECK(only_logical(*q).part("g_idx").has_value());
  check_error(detect_quantization(make_catalog(with(with_idx, "l.g_idx", DType::kI32, Shape{255}), kGptq)),
              {.code = Errc::kCorrupt, .message_has = "expected I32 [256], found I32 [255]", .tensor = "l.g_idx"});
}

TEST_CASE("a config contradicted by the tensors is kCorrupt", "[quant][detect]") {
  std::vector<T> ts;
  gptq(ts, "a", 256, 64, 4, 128);
  ct_packed(ts, "b", 256, 64, 4, 128);
  check_error(
      detect_quantization(make_catalog(ts, kGptq)),
      {.code = Errc::kCorrupt, .message_has = "contradictory quantization config", .tensor = "b.weight_packed"});
  std::vector<T> awq;
  awq_gemm(awq, "a", 256, 64, 128);
  awq.push_back({"a.g_idx", DType::kI32, Shape{256}});
  check_error(detect_quantization(make_catalog(awq, R"({"quant_method":"awq","bits":4,"group_size":128})")),
              {.code = Errc::kCorrupt, .message_has = "not a part of that scheme", .tensor = "a.g_idx"});
  std::vector<T> fp8{{"a.weight", DType::kF8_E4M3, Shape{64, 64}}, {"a.weight_scale", DType::kF32, Shape{}}};
  check_error(detect_quantization(make_catalog(fp8, kGptq)),
              {.code = Errc::kCorrupt, .message_has = "contradictory", .tensor = "a.weight_scale"});
}

TEST_CASE("gptq from quantize_config.json in the model directory", "[quant][detect]") {
  ScratchDir dir;
  write_text(dir.file("quantize_config.json"),
             R"({"bits":4,"group_size":128,"desc_act":false,"sym":false,"checkpoint_format":"gptq_v2"})");
  std::vector<T> ts;
  gptq(ts, "l", 256, 64, 4, 128);
  SECTION("directory source") {
    const auto q = detect_quantization(make_catalog(ts, {}, dir.path().string()));
    REQUIRE(q);
    CHECK(q->method == "gptq");
    CHECK(q->config_source == "quantize_config.json");
    CHECK(only_logical(*q).params.gptq_version == 2);
    CHECK_FALSE(only_logical(*q).params.sym);
  }
  SECTION("index source: its directory") {
    const auto q = detect_quantization(make_catalog(ts, {}, dir.file("model.safetensors.index.json")));
    REQUIRE(q);
    CHECK(q->config_source == "quantize_config.json");
  }
  SECTION("config.json's quantization_config wins over side files") {
    const auto q = detect_quantization(make_catalog(ts, kGptq, dir.path().string()));
    REQUIRE(q);
    CHECK(q->config_source == "config.json");
    CHECK(only_logical(*q).params.gptq_version == 1);
  }
  SECTION("a single file source reads nothing beside it") {
    check_error(detect_quantization(make_catalog(ts, {}, dir.file("model.safetensors"))),
                {.code = Errc::kCorrupt, .message_has = "no quantization config was found", .tensor = "l.qweight"});
  }
  SECTION("an invalid side file is kCorrupt naming it") {
    write_text(dir.file("quantize_config.json"), R"({"bits":4,)");
    check_error(detect_quantization(make_catalog(ts, {}, dir.path().string())),
                {.code = Errc::kCorrupt, .message_has = "invalid JSON", .file = dir.file("quantize_config.json")});
  }
  SECTION("an oversized side file is refused naming it") {
    write_text(dir.file("quantize_config.json"), std::string(2u << 20, ' '));
    check_error(detect_quantization(make_catalog(ts, {}, dir.path().string())),
                {.code = Errc::kUnsupported, .message_has = "at most", .file = dir.file("quantize_config.json")});
  }
  SECTION("side files that disagree") {
    write_text(dir.file("quant_config.json"), R"({"w_bit":4,"q_group_size":128,"zero_point":true,"version":"GEMM"})");
    check_error(
        detect_quantization(make_catalog(ts, {}, dir.path().string())),
        {.code = Errc::kCorrupt, .message_has = "quantize_config.json says gptq but quant_config.json says awq"});
  }
}

TEST_CASE("gptqmodel dynamic: -: entries exclude modules, overrides are unsupported", "[quant][detect]") {
  std::vector<T> ts{{"lm_head.weight", DType::kF16, Shape{64, 256}}};
  gptq(ts, "model.layers.0.mlp", 256, 64, 4, 128);
  const std::string skip = R"({"quant_method":"gptq","bits":4,"dynamic":{"-:lm_head":{}}})";
  const auto q = detect_quantization(make_catalog(ts, skip));
  REQUIRE(q);
  CHECK(q->logical.size() == 1);
  CHECK(q->plain == std::vector<std::uint32_t>{0});
  check_error(
      detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"dynamic":{"-:.*layers\\.0\\.":{}}})")),
      {.code = Errc::kCorrupt,
       .message_has = "excluded from quantization by dynamic",
       .tensor = "model.layers.0.mlp.qweight"});
  check_error(
      detect_quantization(make_catalog(ts, R"({"quant_method":"gptq","bits":4,"dynamic":{"+:.*mlp":{"bits":8}}})")),
      {.code = Errc::kUnsupported, .message_has = "per-module overrides"});
}

TEST_CASE("awq gemm from config.json and quant_config.json; modules_to_not_convert", "[quant][detect]") {
  std::vector<T> ts{{"visual.proj.weight", DType::kF16, Shape{64, 64}}};
  awq_gemm(ts, "l", 4096, 4096, 128);
  const std::string cfg =
      R"({"quant_method":"awq","bits":4,"group_size":128,"version":"gemm","zero_point":true,"modules_to_not_convert":["visual"]})";
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  CHECK(q->method == "awq");
  const LogicalTensor& t = only_logical(*q);
  CHECK(t.params.scheme == QuantScheme::kAwqGemm);
  CHECK(t.rows == 4096);
  CHECK(t.cols == 4096);
  CHECK(t.params.group_size == 128);
  CHECK_FALSE(t.params.sym);
  CHECK(q->plain == std::vector<std::uint32_t>{0});
  check_error(
      detect_quantization(make_catalog(with(ts, "l.qzeros", DType::kI32, Shape{32, 4096}), cfg)),
      {.code = Errc::kCorrupt, .message_has = "expected I32 [32, 512], found I32 [32, 4096]", .tensor = "l.qzeros"});
  check_error(detect_quantization(make_catalog(with(ts, "l.scales", DType::kF16, Shape{4096, 32}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "expected F16, BF16 or F32 [32, 4096]", .tensor = "l.scales"});
  // A module the config excludes must not carry quantized parts.
  const std::string exclude_l = R"({"quant_method":"awq","bits":4,"group_size":128,"modules_to_not_convert":["l"]})";
  check_error(detect_quantization(make_catalog(ts, exclude_l)),
              {.code = Errc::kCorrupt, .message_has = "modules_to_not_convert entry 'l'", .tensor = "l.qweight"});

  ScratchDir dir;
  write_text(dir.file("quant_config.json"), R"({"zero_point":true,"q_group_size":128,"w_bit":4,"version":"GEMM"})");
  const auto side = detect_quantization(make_catalog(ts, {}, dir.path().string()));
  REQUIRE(side);
  CHECK(side->config_source == "quant_config.json");
  CHECK(only_logical(*side).params.scheme == QuantScheme::kAwqGemm);
}

TEST_CASE("awq gemv: zero words per AutoAWQ calculate_zeros_width", "[quant][detect]") {
  struct Case {
    std::uint64_t k;
    std::uint64_t group;
    std::uint64_t words;
  };
  // groups / 8 rounded up, then up to a multiple of 1 (G >= 128), 2 (G 64) or 4 (G 32).
  for (const Case& c : {Case{4096, 128, 4}, Case{1280, 128, 2}, Case{4096, 64, 8}, Case{768, 64, 2}, Case{4096, 32, 16},
                        Case{640, 32, 4}, Case{256, 256, 1}}) {
    INFO("K " << c.k << " group " << c.group);
    std::vector<T> ts;
    awq_gemv(ts, "l", c.k, 64, c.words);
    const std::string cfg =
        R"({"quant_method":"awq","bits":4,"version":"GEMV","group_size":)" + std::to_string(c.group) + "}";
    const auto q = detect_quantization(make_catalog(ts, cfg));
    REQUIRE(q);
    CHECK(only_logical(*q).params.scheme == QuantScheme::kAwqGemv);
    CHECK(only_logical(*q).cols == c.k);
    CHECK(only_logical(*q).rows == 64);
    std::vector<T> narrow;
    awq_gemv(narrow, "l", c.k, 64, c.words + 1);
    check_error(detect_quantization(make_catalog(narrow, cfg)), {.code = Errc::kCorrupt, .tensor = "l.qzeros"});
  }
}

TEST_CASE("awq options qload does not decode are unsupported", "[quant][detect]") {
  std::vector<T> ts;
  awq_gemm(ts, "l", 256, 64, 128);
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"awq","bits":8})")),
              {.code = Errc::kUnsupported, .message_has = "8 bits"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"awq","bits":4,"zero_point":false})")),
              {.code = Errc::kUnsupported, .message_has = "zero_point false"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"awq","bits":4,"version":"gemv_fast"})")),
              {.code = Errc::kUnsupported, .message_has = "'gemv_fast'"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"awq","version":"gemv","group_size":48})")),
              {.code = Errc::kUnsupported, .message_has = "group size 48"});
  check_error(detect_quantization(make_catalog(ts, R"({"quant_method":"hqq"})")),
              {.code = Errc::kUnsupported, .message_has = "'hqq'"});
  check_error(detect_quantization(make_catalog(ts, R"({"bits":4})")),
              {.code = Errc::kCorrupt, .message_has = "no quant_method"});
}

TEST_CASE("without a config, other quantized-looking tensors are kCorrupt naming them", "[quant][detect]") {
  std::vector<T> ts;
  gptq(ts, "a", 256, 64, 4, 128);
  gptq(ts, "b", 256, 64, 4, 128);
  ct_packed(ts, "c", 256, 64, 4, 128);
  ts.push_back({"d.qzeros", DType::kI32, Shape{2, 8}});
  ts.push_back({"e.weight", DType::kBF16, Shape{4, 4}});
  ts.push_back({"e.weight_scale", DType::kF32, Shape{1}});
  check_error(detect_quantization(make_catalog(ts)),
              {.code = Errc::kCorrupt,
               .message_has = "tensors look quantized ('a.qweight', 'b.qweight', 'c.weight_packed' and 2 more) but "
                              "no quantization config was found",
               .tensor = "a.qweight"});
}

TEST_CASE("exclusion patterns: globs, regexes qload refuses, back-references", "[quant][detect]") {
  const std::vector<T> ts{{"model.layers.0.mlp.gate.weight", DType::kF8_E4M3, Shape{8, 8}},
                          {"model.layers.0.mlp.gate.weight_scale", DType::kF32, Shape{1}}};
  // ModelOpt globs cross dots and cover the whole name.
  check_error(detect_quantization(make_catalog(
                  ts, R"({"quant_method":"modelopt","quant_algo":"FP8","exclude_modules":["model.*.gate"]})")),
              {.code = Errc::kCorrupt, .message_has = "exclude_modules entry 'model.*.gate'"});
  const auto partial = detect_quantization(
      make_catalog(ts, R"({"quant_method":"modelopt","quant_algo":"FP8","exclude_modules":["model.*.gat"]})"));
  REQUIRE(partial);
  CHECK(partial->logical.size() == 1);
  // A class name in `ignore` cannot be resolved: it matches nothing.
  const std::string float_tensor = R"({"num_bits":8,"type":"float","strategy":"tensor"})";
  const auto by_class = detect_quantization(
      make_catalog(ts, ct_config(float_tensor, "float-quantized", R"(,"ignore":["MixtralSparseMoeBlock"])")));
  REQUIRE(by_class);
  CHECK(by_class->logical.size() == 1);
  check_error(
      detect_quantization(make_catalog(ts, ct_config(float_tensor, "float-quantized", R"(,"ignore":["re:("])"))),
      {.code = Errc::kUnsupported, .message_has = "not a regular expression", .file = "config.json"});
  check_error(
      detect_quantization(make_catalog(ts, ct_config(float_tensor, "float-quantized", R"(,"ignore":["re:(m)\\1"])"))),
      {.code = Errc::kUnsupported});
  // Patterns that made std::regex build an NFA per repeat: refused by RE2 (repeat counts over
  // 1000, nested ones multiplied), never matched slowly. (A count too long to be a number, which
  // overflowed std::regex's parser, is a literal for RE2, as for Perl and Python.)
  for (const char* huge : {R"(re:model{99999999})", R"(re:(a{1000}){1000})", R"(re:((a{10}){10}){11})"}) {
    INFO(huge);
    check_error(detect_quantization(make_catalog(
                    ts, ct_config(float_tensor, "float-quantized", std::string(R"(,"ignore":[")") + huge + "\"]"))),
                {.code = Errc::kUnsupported, .message_has = "is not a regular expression qload can use"});
  }
  // Python's re.match: anchored at the start only; \d and counted repeats work. A match here
  // excludes the quantized module, which is refused (as the ModelOpt glob above).
  check_error(
      detect_quantization(make_catalog(
          ts, ct_config(float_tensor, "float-quantized", R"(,"ignore":["re:model\\.layers\\.\\d{1,3}\\.mlp\\.gat"])"))),
      {.code = Errc::kCorrupt, .message_has = "is excluded from quantization by ignore entry 're:model"});
  const auto unanchored = detect_quantization(
      make_catalog(ts, ct_config(float_tensor, "float-quantized", R"(,"ignore":["re:layers\\.0"])")));
  REQUIRE(unanchored);
  CHECK(unanchored->logical.size() == 1);  // not ignored: re.match does not search
  check_error(
      detect_quantization(make_catalog(ts, ct_config(float_tensor, "float-quantized", R"(,"ignore":"lm_head")"))),
      {.code = Errc::kCorrupt, .message_has = "quantization_config.ignore is string, expected a list of strings"});
}

TEST_CASE("awq gemm takes N from the scales when it is not a multiple of 8", "[quant][detect]") {
  const std::vector<T> ts{{"l.qweight", DType::kI32, Shape{256, 8}},
                          {"l.qzeros", DType::kI32, Shape{2, 8}},
                          {"l.scales", DType::kF16, Shape{2, 60}}};
  const std::string cfg = R"({"quant_method":"awq","bits":4,"group_size":128})";
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  CHECK(only_logical(*q).rows == 60);
  CHECK(only_logical(*q).cols == 256);
  check_error(detect_quantization(make_catalog(with(ts, "l.scales", DType::kF16, Shape{2, 56}), cfg)),
              {.code = Errc::kCorrupt,
               .message_has = "expected F16, BF16 or F32 [2, 64], found F16 [2, 56]",
               .tensor = "l.scales"});
}

TEST_CASE("describe_layout: scales and zero points in words, for the layouts synth does not write", "[quant][detect]") {
  formats::Catalog c;
  const auto add = [&](DType dtype) {
    c.tensors.push_back({.name = "t" + std::to_string(c.tensors.size()), .dtype = dtype});
    return static_cast<std::uint32_t>(c.tensors.size() - 1);
  };
  formats::LogicalTensor gptq{.name = "w", .rows = 64, .cols = 256};
  gptq.params = {.scheme = formats::QuantScheme::kGptq, .bits = 4, .group_size = 256, .sym = false, .gptq_version = 2};
  gptq.parts = {{"qweight", add(DType::kI32)}, {"qzeros", add(DType::kI32)}, {"scales", add(DType::kBF16)}};
  auto l = formats::describe_layout(gptq, c);
  CHECK(l.scales == "per-channel");  // a group as wide as the row
  CHECK(l.scale_dtype == "BF16");
  CHECK(l.zero_points == "per-channel, 4-bit packed along N in I32, stored as z (GPTQ v2)");

  formats::LogicalTensor ct_int{.name = "w", .rows = 64, .cols = 256};
  ct_int.params = {.scheme = formats::QuantScheme::kCtInt, .bits = 8, .group_size = 64, .sym = false};
  ct_int.parts = {{"weight", add(DType::kI8)},
                  {"weight_scale", add(DType::kF32)},
                  {"weight_zero_point", add(DType::kI8)},
                  {"weight_g_idx", add(DType::kI32)}};
  l = formats::describe_layout(ct_int, c);
  CHECK(l.scales == "per-group 64 (with g_idx)");
  CHECK(l.zero_points == "per-group 64, I8");

  formats::LogicalTensor fp8{.name = "w", .rows = 64, .cols = 256};
  fp8.params = {.scheme = formats::QuantScheme::kFp8,
                .bits = 8,
                .scale_layout = formats::ScaleLayout::kBlock,
                .block_rows = 64,
                .block_cols = 128};
  fp8.parts = {{"weight", add(DType::kF8_E4M3)}, {"weight_scale_inv", add(DType::kF32)}};
  l = formats::describe_layout(fp8, c);
  CHECK(l.scales == "block 64x128");
  CHECK(l.zero_points == "none (symmetric)");
}
