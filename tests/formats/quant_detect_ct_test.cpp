// detect_quantization on compressed-tensors configs (hand-built catalogs): pack-quantized K,
// zero points, strategies and actorder, int/float-quantized layouts, ignore lists and targets,
// and the formats and options qload refuses. Shapes follow ../shared/formats.md section 4.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "formats_test_support.hpp"
#include "qload/formats/quant.hpp"
#include "quant_detect_support.hpp"

using namespace qload;
using namespace qload::formats;
using namespace qload::testing;
using namespace qload::testing::quant_detect;

TEST_CASE("compressed-tensors pack-quantized: K from the packed width and the group count", "[quant][detect]") {
  std::vector<T> ts{{"lm_head.weight", DType::kBF16, Shape{100, 4096}}};
  ct_packed(ts, "l", 4096, 11008, 4, 128);
  const std::string cfg = ct_config(kW4A16, "pack-quantized", R"(,"ignore":["lm_head"])");
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  CHECK(q->method == "compressed-tensors");
  const LogicalTensor& t = only_logical(*q);
  CHECK(t.params.scheme == QuantScheme::kCtPacked);
  CHECK(t.rows == 11008);
  CHECK(t.cols == 4096);
  CHECK(t.params.bits == 4);
  CHECK(t.params.group_size == 128);
  CHECK(t.params.scale_layout == ScaleLayout::kGroup);
  CHECK(t.params.sym);
  CHECK(t.params.dense_bitstream);
  CHECK(t.params.scale_dtype == DType::kBF16);
  CHECK(t.part("weight_shape").has_value());
  CHECK(q->plain == std::vector<std::uint32_t>{0});
  // weight_shape may be I32 (older schema); a group count that fits no K is kCorrupt.
  CHECK(detect_quantization(make_catalog(with(ts, "l.weight_shape", DType::kI32, Shape{2}), cfg)));
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_shape", DType::kI64, Shape{3}), cfg)),
              {.code = Errc::kCorrupt, .message_has = "expected I64 or I32 [2]", .tensor = "l.weight_shape"});
  check_error(
      detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kBF16, Shape{11008, 31}), cfg)),
      {.code = Errc::kCorrupt, .message_has = "expected F16, BF16 or F32 [11008, 32]", .tensor = "l.weight_scale"});
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kBF16, Shape{11000, 32}), cfg)),
              {.code = Errc::kCorrupt, .tensor = "l.weight_scale"});
  check_error(detect_quantization(make_catalog(without(ts, "l.weight_shape"), cfg)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.weight_shape'", .tensor = "l.weight"});
  // A group count below the packed width narrows K: 3-bit, K 100, group 50 -> 10 words hold up to 106.
  std::vector<T> odd;
  ct_packed(odd, "l", 100, 64, 3, 50);
  const auto narrowed = detect_quantization(make_catalog(
      odd, ct_config(R"({"num_bits":3,"type":"int","strategy":"group","group_size":50})", "pack-quantized")));
  REQUIRE(narrowed);
  CHECK(only_logical(*narrowed).cols == 100);
}

TEST_CASE("compressed-tensors pack-quantized: K from weight_shape's bytes when the catalog read them",
          "[quant][detect]") {
  // 8-bit per channel, K 350: 88 words hold up to 352 values, and no group count narrows it.
  std::vector<T> ts;
  ct_packed(ts, "l", 350, 130, 8, 350);
  ts[1] = T{"l.weight_scale", DType::kF32, Shape{130, 1}};
  const std::string cfg =
      ct_config(R"({"num_bits":8,"type":"int","symmetric":true,"strategy":"channel"})", "pack-quantized");
  const auto stating = [&](std::int64_t n, std::int64_t k) {
    Catalog c = make_catalog(ts, cfg);
    std::string bytes(16, '\0');
    std::memcpy(bytes.data(), &n, 8);
    std::memcpy(bytes.data() + 8, &k, 8);
    c.embedded.emplace("l.weight_shape", bytes);
    return c;
  };
  const auto inferred = detect_quantization(make_catalog(ts, cfg));  // bytes not read: inferred
  REQUIRE(inferred);
  CHECK(only_logical(*inferred).cols == 352);
  const auto stated = detect_quantization(stating(130, 350));
  REQUIRE(stated);
  CHECK(only_logical(*stated).cols == 350);
  CHECK(only_logical(*stated).rows == 130);
  for (const auto& [n, k] : {std::pair<std::int64_t, std::int64_t>{130, 348}, {130, 353}, {131, 350}, {130, -1}})
    check_error(detect_quantization(stating(n, k)),
                {.code = Errc::kCorrupt,
                 .message_has = "which weight_packed [130, 88] of 8-bit values cannot hold",
                 .tensor = "l.weight_shape"});
}

TEST_CASE("compressed-tensors pack-quantized asymmetric zero points, channel strategy and actorder",
          "[quant][detect]") {
  std::vector<T> ts;
  ct_packed(ts, "l", 256, 64, 4, 128, true);
  const std::string asym = ct_config(
      R"({"num_bits":4,"type":"int","symmetric":false,"strategy":"group","group_size":128})", "pack-quantized");
  const auto q = detect_quantization(make_catalog(ts, asym));
  REQUIRE(q);
  CHECK_FALSE(only_logical(*q).params.sym);
  CHECK(only_logical(*q).part("weight_zero_point").has_value());
  check_error(detect_quantization(make_catalog(with(ts, "l.weight_zero_point", DType::kI8, Shape{64, 2}), asym)),
              {.code = Errc::kCorrupt,
               .message_has = "expected I32 [8, 2], found I8 [64, 2]",
               .tensor = "l.weight_zero_point"});
  check_error(detect_quantization(make_catalog(without(ts, "l.weight_zero_point"), asym)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.weight_zero_point'"});
  check_error(detect_quantization(make_catalog(ts, ct_config(kW4A16, "pack-quantized"))),
              {.code = Errc::kCorrupt, .message_has = "symmetric", .tensor = "l.weight_zero_point"});

  const std::vector<T> channel{{"l.weight_packed", DType::kI32, Shape{64, 32}},
                               {"l.weight_scale", DType::kF16, Shape{64, 1}},
                               {"l.weight_shape", DType::kI64, Shape{2}}};
  const auto c = detect_quantization(
      make_catalog(channel, ct_config(R"({"num_bits":4,"type":"int","strategy":"channel"})", "pack-quantized")));
  REQUIRE(c);
  CHECK(only_logical(*c).params.scale_layout == ScaleLayout::kRow);
  CHECK(only_logical(*c).cols == 256);
  CHECK(only_logical(*c).params.group_size == 256);

  std::vector<T> ordered;
  ct_packed(ordered, "l", 256, 64, 4, 128);
  const std::string act = ct_config(
      R"({"num_bits":4,"type":"int","strategy":"group","group_size":128,"actorder":"group"})", "pack-quantized");
  check_error(detect_quantization(make_catalog(ordered, act)),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.weight_g_idx'", .tensor = "l.weight"});
  ordered.push_back({"l.weight_g_idx", DType::kI32, Shape{256}});
  CHECK(detect_quantization(make_catalog(ordered, act)));
  check_error(
      detect_quantization(make_catalog(with(ordered, "l.weight_g_idx", DType::kI32, Shape{128}), act)),
      {.code = Errc::kCorrupt, .message_has = "expected I32 [256], found I32 [128]", .tensor = "l.weight_g_idx"});
}

TEST_CASE("compressed-tensors int-quantized and float-quantized layouts", "[quant][detect]") {
  const std::vector<T> w8{{"l.weight", DType::kI8, Shape{64, 256}},
                          {"l.weight_scale", DType::kF32, Shape{64, 1}},
                          {"l.input_scale", DType::kF32, Shape{1}}};
  const auto q = detect_quantization(
      make_catalog(w8, ct_config(R"({"num_bits":8,"type":"int","strategy":"channel"})", "int-quantized")));
  REQUIRE(q);
  CHECK(only_logical(*q).params.scheme == QuantScheme::kCtInt);
  CHECK(only_logical(*q).params.scale_layout == ScaleLayout::kRow);
  CHECK(only_logical(*q).params.weight_dtype == DType::kI8);
  CHECK(only_logical(*q).part("input_scale").has_value());
  check_error(detect_quantization(
                  make_catalog(with(w8, "l.weight", DType::kI32, Shape{64, 256}),
                               ct_config(R"({"num_bits":8,"type":"int","strategy":"channel"})", "int-quantized"))),
              {.code = Errc::kCorrupt, .message_has = "expected I8 [N, K], found I32", .tensor = "l.weight"});

  struct Case {
    std::string weights;
    Shape scale;
    ScaleLayout layout;
  };
  for (const Case& c :
       {Case{R"({"num_bits":8,"type":"float","strategy":"tensor"})", Shape{1}, ScaleLayout::kTensor},
        Case{R"({"num_bits":8,"type":"float","strategy":"channel"})", Shape{300, 1}, ScaleLayout::kRow},
        Case{R"({"num_bits":8,"type":"float","strategy":"group","group_size":64})", Shape{300, 4}, ScaleLayout::kGroup},
        Case{R"({"num_bits":8,"type":"float","strategy":"block","block_structure":[128,128]})", Shape{3, 2},
             ScaleLayout::kBlock}}) {
    INFO(c.weights);
    const std::vector<T> ts{{"l.weight", DType::kF8_E4M3, Shape{300, 200}}, {"l.weight_scale", DType::kBF16, c.scale}};
    const auto f = detect_quantization(make_catalog(ts, ct_config(c.weights, "float-quantized")));
    REQUIRE(f);
    CHECK(only_logical(*f).params.scheme == QuantScheme::kFp8);
    CHECK(only_logical(*f).params.scale_layout == c.layout);
    CHECK(only_logical(*f).params.scale_dtype == DType::kBF16);
    if (c.layout == ScaleLayout::kGroup) CHECK(only_logical(*f).params.group_size == 64);
    if (c.layout == ScaleLayout::kBlock) CHECK(only_logical(*f).params.block_rows == 128);
    const auto naive = detect_quantization(make_catalog(ts, ct_config(c.weights, "naive-quantized")));
    REQUIRE(naive);
    CHECK(only_logical(*naive).params.scheme == QuantScheme::kFp8);
    check_error(detect_quantization(make_catalog(with(ts, "l.weight_scale", DType::kBF16, Shape{7, 7}),
                                                 ct_config(c.weights, "float-quantized"))),
                {.code = Errc::kCorrupt, .message_has = "found BF16 [7, 7]", .tensor = "l.weight_scale"});
  }
}

TEST_CASE("compressed-tensors ignore, per-group formats and overlapping targets", "[quant][detect]") {
  std::vector<T> ts{{"model.layers.0.mlp.gate.weight", DType::kBF16, Shape{8, 256}},
                    {"model.layers.0.mlp.up_proj.weight", DType::kI8, Shape{64, 256}},
                    {"model.layers.0.mlp.up_proj.weight_scale", DType::kF32, Shape{64, 1}}};
  ct_packed(ts, "model.layers.0.self_attn.q_proj", 256, 64, 4, 128);
  const std::string cfg = R"({"quant_method":"compressed-tensors","format":"mixed-precision",
    "ignore":["lm_head","re:.*mlp.gate$"],
    "config_groups":{
      "attn":{"targets":["Linear"],"format":"pack-quantized","weights":)" +
                          kW4A16 + R"(},
      "mlp":{"targets":["re:.*mlp\\..*_proj$"],"format":"int-quantized","weights":{"num_bits":8,"type":"int","strategy":"channel"}}}})";
  const auto q = detect_quantization(make_catalog(ts, cfg));
  REQUIRE(q);
  REQUIRE(q->logical.size() == 2);
  CHECK(q->logical[0].name == "model.layers.0.mlp.up_proj.weight");
  CHECK(q->logical[0].params.scheme == QuantScheme::kCtInt);
  CHECK(q->logical[1].params.scheme == QuantScheme::kCtPacked);
  CHECK(q->plain == std::vector<std::uint32_t>{0});
  // An ignored module with quantized parts contradicts the config.
  std::vector<T> ignored = ts;
  ignored.push_back({"model.layers.0.mlp.gate.weight_scale", DType::kF32, Shape{8, 1}});
  check_error(detect_quantization(make_catalog(ignored, cfg)), {.code = Errc::kCorrupt,
                                                                .message_has = "ignore entry 're:.*mlp.gate$'",
                                                                .tensor = "model.layers.0.mlp.gate.weight_scale"});
  // Two class targets: the stored parts pick the group.
  const std::string both = R"({"quant_method":"compressed-tensors","format":"mixed-precision","config_groups":{
      "a":{"targets":["Linear"],"format":"pack-quantized","weights":)" +
                           kW4A16 + R"(},
      "b":{"targets":["Linear"],"format":"int-quantized","weights":{"num_bits":8,"type":"int","strategy":"channel"}}}})";
  const auto split = detect_quantization(make_catalog(without(ts, "model.layers.0.mlp.gate.weight"), both));
  REQUIRE(split);
  CHECK(split->logical.size() == 2);
}

TEST_CASE("compressed-tensors formats and options qload does not decode", "[quant][detect]") {
  const std::vector<T> ts{{"l.weight_packed", DType::kU8, Shape{64, 128}},
                          {"l.weight_scale", DType::kF8_E4M3, Shape{64, 16}}};
  // NVFP4 needs its global scale (quant_fp4_test.cpp has the rest); FP4 formats with int weights
  // contradict themselves; MXFP6 is not decoded.
  check_error(detect_quantization(make_catalog(
                  ts, ct_config(R"({"num_bits":4,"type":"float","strategy":"tensor_group","group_size":16})",
                                "nvfp4-pack-quantized"))),
              {.code = Errc::kCorrupt, .message_has = "has no part 'l.weight_global_scale'"});
  check_error(detect_quantization(make_catalog(ts, ct_config(kW4A16, "nvfp4-pack-quantized"))),
              {.code = Errc::kCorrupt, .message_has = "format nvfp4-pack-quantized with weights type 'int'"});
  check_error(detect_quantization(
                  make_catalog(ts, ct_config(R"({"num_bits":6,"type":"float","strategy":"group","group_size":32})",
                                             "mxfp6-pack-quantized"))),
              {.code = Errc::kUnsupported, .message_has = "format 'mxfp6-pack-quantized'"});
  check_error(detect_quantization(make_catalog(ts, ct_config(kW4A16, "marlin-24"))),
              {.code = Errc::kUnsupported, .message_has = "'marlin-24'"});
  check_error(detect_quantization(make_catalog(
                  ts, ct_config(kW4A16, "pack-quantized", R"(,"sparsity_config":{"format":"sparse-24-bitmask"})"))),
              {.code = Errc::kUnsupported, .message_has = "sparse-24-bitmask"});
  check_error(detect_quantization(
                  make_catalog(ts, ct_config(R"({"num_bits":1,"type":"int","strategy":"channel"})", "pack-quantized"))),
              {.code = Errc::kUnsupported, .message_has = "1 bits"});
  check_error(detect_quantization(
                  make_catalog(ts, ct_config(R"({"num_bits":4,"type":"int","strategy":"group"})", "pack-quantized"))),
              {.code = Errc::kCorrupt, .message_has = "group_size"});
  // "dense": stored unquantized, so quantized tensors contradict it.
  check_error(detect_quantization(
                  make_catalog({{"l.weight", DType::kF8_E4M3, Shape{4, 4}}, {"l.weight_scale", DType::kF32, Shape{1}}},
                               ct_config(kW4A16, "dense"))),
              {.code = Errc::kCorrupt, .message_has = "unquantized", .tensor = "l.weight_scale"});
  const auto dense =
      detect_quantization(make_catalog({{"l.weight", DType::kBF16, Shape{4, 4}}}, ct_config(kW4A16, "dense")));
  REQUIRE(dense);
  CHECK(dense->logical.empty());
  // Regex targets that match no module.
  std::vector<T> packed;
  ct_packed(packed, "l", 256, 64, 4, 128);
  const std::string narrow =
      R"({"quant_method":"compressed-tensors","format":"pack-quantized","config_groups":{"g":{"targets":["re:.*mlp.*"],"weights":)" +
      kW4A16 + "}}}";
  check_error(detect_quantization(make_catalog(packed, narrow)),
              {.code = Errc::kCorrupt, .message_has = "no config_groups target", .tensor = "l.weight_packed"});
}

// Issue 45 finding 8: a config's patterns cost per pattern x module with no overall bound:
// 1,000 `ignore` expressions took 2.7 GB and 28 s, 300 over 7 modules 48 s. Now the config's
// patterns are capped in all (kMaxPatterns, kMaxRegexPatterns), each expression compiled once
// in bounded memory, and patterns x modules charged to a work budget (detect.hpp kMaxMatchWork);
// beyond, a clean kUnsupported naming the config file and the key.
TEST_CASE("compressed-tensors patterns x modules are bounded in count, memory and work", "[quant][detect]") {
  const auto quoted_list = [](const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& item : items) out += (out.empty() ? "\"" : ",\"") + item + "\"";
    return out;
  };
  const auto config = [&](const std::vector<std::string>& ignore, const std::vector<std::string>& targets) {
    return R"({"quant_method":"compressed-tensors","format":"pack-quantized","quantization_status":"compressed",)"
           R"("ignore":[)" +
           quoted_list(ignore) + R"(],"config_groups":{"g":{"targets":[)" + quoted_list(targets) + R"(],"weights":)" +
           kW4A16 + "}}}";
  };
  std::vector<T> ts;
  ct_packed(ts, "model.layers.0.mlp.up_proj", 256, 64, 4, 128);
  // 1,000 expressions of 8,000 instructions each: the 257th is refused, before it is compiled.
  const std::vector<std::string> heavy(1000, "re:.{1000}x");
  check_error(detect_quantization(make_catalog(ts, config(heavy, {"Linear"}))),
              {.code = Errc::kUnsupported, .message_has = "ignore: the config has more than 256 regular expressions"});
  // 300 expressions, split between targets and ignore: the cap is for the config in all.
  std::vector<std::string> distinct;
  for (int i = 0; i < 300; ++i) distinct.push_back(fmt::format("re:(.*a){{100}}{}", i));
  check_error(detect_quantization(make_catalog(
                  ts, config({distinct.begin(), distinct.begin() + 200}, {distinct.begin() + 200, distinct.end()}))),
              {.code = Errc::kUnsupported, .message_has = "targets: the config has more than 256 regular expressions"});
  // One expression too large for its memory is refused, not compiled in 8 MiB.
  check_error(detect_quantization(make_catalog(ts, config({"re:.{1000}.{1000}.{1000}x"}, {"Linear"}))),
              {.code = Errc::kUnsupported, .message_has = "is not a regular expression qload can use"});
  // 4,097 exact names in all (2,049 ignored, 2,048 targets).
  std::vector<std::string> names;
  for (int i = 0; i < 4097; ++i) names.push_back(fmt::format("model.layers.{}.mlp.gate", i));
  check_error(detect_quantization(
                  make_catalog(ts, config({names.begin(), names.begin() + 2049}, {names.begin() + 2049, names.end()}))),
              {.code = Errc::kUnsupported, .message_has = "more than 4096 module patterns in all"});
  // Under the caps, patterns x modules is charged: 200 expressions of ~2,400 instructions over 7
  // module names of 4,000 bytes is ~13 G steps of worst-case work, refused once the budget is spent.
  std::vector<T> long_names;
  for (int m = 0; m < 7; ++m)
    ct_packed(long_names, fmt::format("model.layers.{}.{}", m, std::string(4000, 'a')), 256, 64, 4, 128);
  std::vector<std::string> wide;
  for (int i = 0; i < 200; ++i) wide.push_back(fmt::format("re:.{{300}}x{}", i));
  const auto refused = detect_quantization(make_catalog(long_names, config(wide, {"Linear"})));
  check_error(refused, {.code = Errc::kUnsupported, .message_has = "qload's budget for a config's patterns x modules"});
  CHECK_THAT(refused.error().message(), Catch::Contains("(ignore)"));
  REQUIRE(refused.error().file().has_value());
  // What real configs hold is accepted: 1,000 exact names and a few short expressions.
  std::vector<std::string> real(names.begin(), names.begin() + 1000);
  real.push_back("lm_head");
  real.push_back("re:.*mlp.gate$");
  const auto q = detect_quantization(make_catalog(ts, config(real, {"re:.*_proj$", "Linear"})));
  REQUIRE(q);
  CHECK(q->logical.size() == 1);
}
