// Quantized synthetic checkpoints: every --quant scheme writes files the formats layer detects as
// that scheme, with 7 quantized linears per layer that dequantize to finite values, and (FP8)
// to the unquantized weight within FP8's error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qload/formats/driver.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"
#include "qload/session/synth.hpp"
#include "support/scratch.hpp"

using namespace qload;

namespace {

session::SynthOptions small_model(std::string quant) {
  return {.layers = 2,
          .hidden = 256,
          .intermediate = 512,
          .vocab = 64,
          .heads = 4,
          .kv_heads = 2,
          .shards = 2,
          .dtype = DType::kBF16,
          .seed = 7,
          .quant = std::move(quant)};
}

struct Expected {
  std::string method;
  formats::QuantScheme scheme;
  std::uint32_t bits;
  bool fp8;  // compare with the unquantized weight
};

Expected expected(const std::string& quant) {
  using formats::QuantScheme;
  if (quant == "gptq4") return {"gptq", QuantScheme::kGptq, 4, false};
  if (quant == "gptq3") return {"gptq", QuantScheme::kGptq, 3, false};
  if (quant == "gptq8") return {"gptq", QuantScheme::kGptq, 8, false};
  if (quant == "awq") return {"awq", QuantScheme::kAwqGemm, 4, false};
  if (quant == "fp8-channel") return {"fbgemm_fp8", QuantScheme::kFp8, 8, true};
  if (quant.starts_with("ct-pack4")) return {"compressed-tensors", QuantScheme::kCtPacked, 4, false};
  if (quant == "ct-fp8") return {"compressed-tensors", QuantScheme::kFp8, 8, true};
  if (quant == "ct-nvfp4") return {"compressed-tensors", QuantScheme::kNvfp4, 4, false};
  return {"fp8", QuantScheme::kFp8, 8, true};  // fp8-block, fp8-tensor
}

std::vector<std::byte> read_tensor(const formats::Catalog& catalog, std::uint32_t index) {
  const formats::TensorEntry& t = catalog.tensors[index];
  std::vector<std::byte> bytes(t.nbytes);
  std::ifstream in(catalog.files[t.file].path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t.offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(in);
  return bytes;
}

std::vector<float> to_f32(const std::vector<std::byte>& bf16) {
  std::vector<float> out(bf16.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t h = 0;
    std::memcpy(&h, bf16.data() + 2 * i, 2);
    const std::uint32_t bits = std::uint32_t{h} << 16;
    std::memcpy(&out[i], &bits, 4);
  }
  return out;
}

// The whole dequantized weight as f32, from the parts' bytes read off the files.
std::vector<float> dequantize(const formats::Catalog& catalog, const formats::LogicalTensor& t) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<formats::PartBytes> parts;
  storage.reserve(t.parts.size());
  for (const auto& [role, index] : t.parts) {
    storage.push_back(read_tensor(catalog, index));
    const formats::TensorEntry& e = catalog.tensors[index];
    parts.push_back({role, e.dtype, e.shape, storage.back()});
  }
  std::vector<float> out(t.rows * t.cols);
  const Status s = formats::dequantize_rows(t, parts, 0, t.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!s) FAIL(s.error().to_string());
  return out;
}

std::string file_hash(const std::string& path) {
  auto reader = io::make_reader({.engine = io::EngineKind::kPread}, Logger{}).value();
  return io::digest_file(*reader, reader->open_file(path).value()).value().xxh3_128.hex();
}

}  // namespace

TEST_CASE("synth --quant writes checkpoints detected as their scheme that dequantize correctly",
          "[synth][quant][scripts]") {
  const std::string quant(GENERATE(from_range(session::kSynthQuantNames.begin(), session::kSynthQuantNames.end())));
  CAPTURE(quant);
  const Expected want = expected(quant);
  testing::ScratchDir dir, plain_dir;
  const auto report = session::synthesize(dir.path().string(), small_model(quant)).value();
  REQUIRE(session::synthesize(plain_dir.path().string(), small_model("")));

  const formats::Catalog catalog = formats::open_catalog(dir.path().string()).value();
  const formats::Catalog plain = formats::open_catalog(plain_dir.path().string()).value();
  CHECK(catalog.tensors.size() == report.tensors);
  CHECK(catalog.total_tensor_bytes() == report.bytes);
  const auto q = formats::detect_quantization(catalog);
  REQUIRE(q);
  CHECK(q->method == want.method);
  CHECK(q->config_source == "config.json");
  REQUIRE(q->logical.size() == 7 * 2);
  CHECK(q->plain.size() == 7);              // embed_tokens, lm_head, model.norm, 2 layer norms x 2 layers
  for (const std::uint32_t i : q->plain) {  // plain tensors are exactly the unquantized model's
    const formats::TensorEntry& t = catalog.tensors[i];
    CAPTURE(t.name);
    const auto* p = plain.find(t.name);
    REQUIRE(p != nullptr);
    CHECK(t.dtype == DType::kBF16);
    CHECK(read_tensor(catalog, i) == read_tensor(plain, static_cast<std::uint32_t>(p - plain.tensors.data())));
  }
  for (const formats::LogicalTensor& t : q->logical) {
    CAPTURE(t.name);
    CHECK(t.params.scheme == want.scheme);
    CHECK(t.params.bits == want.bits);
    const std::vector<float> values = dequantize(catalog, t);
    CHECK(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }));
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    CHECK(*lo < *hi);
    if (!want.fp8) {
      CHECK(std::max(-*lo, *hi) <= 0.0101f * static_cast<float>(1u << want.bits));  // |q - z| * scale
      continue;
    }
    const auto* original = plain.find(t.name);
    REQUIRE(original != nullptr);
    const std::vector<float> expected =
        to_f32(read_tensor(plain, static_cast<std::uint32_t>(original - plain.tensors.data())));
    REQUIRE(expected.size() == values.size());
    // E4M3 rounds to 3 mantissa bits (relative error <= 2^-4; every value here is normal after
    // scaling); ct-fp8's bf16 scale adds up to 2^-9.
    std::size_t outside = 0;
    for (std::size_t i = 0; i < values.size(); ++i)
      outside += std::fabs(values[i] - expected[i]) > std::fabs(expected[i]) * (0x1p-4f + 0x1p-8f) ? 1 : 0;
    CHECK(outside == 0);
  }
}

TEST_CASE("synth --quant gptq writes v1 symmetric zeros and g_idx = k / 128", "[synth][quant][scripts]") {
  testing::ScratchDir dir;
  REQUIRE(session::synthesize(dir.path().string(), small_model("gptq4")));
  const formats::Catalog catalog = formats::open_catalog(dir.path().string()).value();
  const auto config = nlohmann::json::parse(catalog.config_json);
  CHECK(config["quantization_config"] == nlohmann::json::parse(R"({"quant_method":"gptq","bits":4,"group_size":128,
      "desc_act":false,"sym":true,"checkpoint_format":"gptq"})"));
  const auto* zeros = catalog.find("model.layers.1.mlp.down_proj.qzeros");
  const auto* g_idx = catalog.find("model.layers.1.mlp.down_proj.g_idx");
  REQUIRE(zeros != nullptr);
  REQUIRE(g_idx != nullptr);
  CHECK(zeros->shape == Shape{4, 32});  // K 512 / 128 groups, N 256 * 4 / 32 words
  CHECK(catalog.find("model.layers.1.mlp.down_proj.weight") == nullptr);
  const auto zero_bytes = read_tensor(catalog, static_cast<std::uint32_t>(zeros - catalog.tensors.data()));
  for (std::size_t i = 0; i < zero_bytes.size(); i += 4) {
    std::uint32_t word = 0;
    std::memcpy(&word, zero_bytes.data() + i, 4);
    REQUIRE(word == 0x77777777u);  // z = 8 stored as 7 (formats.md section 1)
  }
  const auto g_bytes = read_tensor(catalog, static_cast<std::uint32_t>(g_idx - catalog.tensors.data()));
  REQUIRE(g_bytes.size() == 512 * 4);
  for (std::int32_t k = 0; k < 512; ++k) {
    std::int32_t g = 0;
    std::memcpy(&g, g_bytes.data() + 4 * k, 4);
    REQUIRE(g == k / 128);
  }
}

TEST_CASE("synth --quant configs match what the formats layer and qload convert expect", "[synth][quant][scripts]") {
  using nlohmann::json;
  const auto config_of = [](const std::string& quant) {
    testing::ScratchDir dir;
    REQUIRE(session::synthesize(dir.path().string(), small_model(quant)));
    std::ifstream in(dir.file("config.json"));
    return json::parse(in)["quantization_config"];
  };
  CHECK(config_of("fp8-block") ==
        json::parse(
            R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128]})"));
  CHECK(config_of("fp8-tensor") == json::parse(R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic"})"));
  CHECK(config_of("fp8-channel") == json::parse(R"({"quant_method":"fbgemm_fp8"})"));
  CHECK(config_of("awq") ==
        json::parse(R"({"quant_method":"awq","bits":4,"group_size":128,"version":"gemm","zero_point":true})"));
  CHECK(config_of("ct-pack4") == json::parse(R"({"quant_method":"compressed-tensors","format":"pack-quantized",
      "quantization_status":"compressed","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":4,
      "type":"int","symmetric":true,"strategy":"group","group_size":128}}},"ignore":["lm_head"]})"));
  CHECK(config_of("ct-pack4-asym")["config_groups"]["group_0"]["weights"]["symmetric"] == false);
  CHECK(config_of("ct-fp8") == json::parse(R"({"quant_method":"compressed-tensors","format":"float-quantized",
      "quantization_status":"compressed","config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,
      "type":"float","symmetric":true,"strategy":"channel"}}},"ignore":["lm_head"]})"));
}

TEST_CASE("synth --quant is deterministic in its options", "[synth][quant][scripts]") {
  const std::string quant = GENERATE(as<std::string>{}, "gptq3", "awq", "ct-pack4", "fp8-block", "ct-fp8");
  CAPTURE(quant);
  testing::ScratchDir a, b, c;
  REQUIRE(session::synthesize(a.path().string(), small_model(quant)));
  REQUIRE(session::synthesize(b.path().string(), small_model(quant)));
  auto other = small_model(quant);
  other.seed = 8;
  REQUIRE(session::synthesize(c.path().string(), other));
  for (const char* name : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json", "config.json"})
    CHECK(file_hash(a.file(name)) == file_hash(b.file(name)));
  CHECK(file_hash(a.file("model-00002-of-00002.safetensors")) != file_hash(c.file("model-00002-of-00002.safetensors")));
}

TEST_CASE("synth --quant rejects unknown schemes and sizes the scheme cannot pack", "[synth][quant][scripts]") {
  const auto error = [](session::SynthOptions o) {
    const Status s = session::validate(o);
    REQUIRE_FALSE(s);
    CHECK(s.error().code() == Errc::kInvalidArgument);
    return s.error().message();
  };
  using Catch::Matchers::Contains;
  CHECK_THAT(error(small_model("int3")), Contains("int3") && Contains("gptq4, gptq3") && Contains("ct-fp8"));
  auto o = small_model("gptq4");
  o.intermediate = 688;  // a multiple of 16, not of 128
  CHECK_THAT(error(o), Contains("group size 128") && Contains("intermediate is 688"));
  o.quant = "ct-pack4";
  CHECK_THAT(error(o), Contains("intermediate is 688"));
  o.quant = "fp8-block";  // FP8 takes any shape (partial edge blocks)
  CHECK(session::validate(o));
  auto awq = small_model("awq");
  awq.heads = 64;  // head_dim 4, 2 kv heads: k_proj / v_proj have 8 outputs, fine
  CHECK(session::validate(awq));
  awq.kv_heads = 1;  // 4 outputs
  CHECK_THAT(error(awq), Contains("multiple of 8") && Contains("kv_heads * head_dim") && Contains("is 4"));
  CHECK(session::validate(small_model("")));
}
