// Synthetic checkpoints: llama-shaped, valid, deterministic, sharded like HF exports.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qload/formats/driver.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"
#include "qload/session/synth.hpp"
#include "support/scratch.hpp"

using namespace qload;

namespace {

std::string file_hash(const std::string& path) {
  auto reader = io::make_reader({.engine = io::EngineKind::kPread}, Logger{}).value();
  return io::digest_file(*reader, reader->open_file(path).value()).value().xxh3_128.hex();
}

}  // namespace

TEST_CASE("synth writes a llama-shaped sharded checkpoint that opens as a catalog", "[scripts][synth]") {
  testing::ScratchDir dir;
  const session::SynthOptions o{.layers = 3,
                                .hidden = 64,
                                .intermediate = 160,
                                .vocab = 100,
                                .heads = 4,
                                .kv_heads = 2,
                                .shards = 3,
                                .dtype = DType::kBF16,
                                .seed = 5};
  const auto report = session::synthesize(dir.path().string(), o).value();
  CHECK(report.tensors == 1 + 9 * 3 + 2);
  CHECK(report.files == 3);

  const formats::Catalog catalog = formats::open_catalog(dir.path().string()).value();
  CHECK(catalog.format == "safetensors");
  CHECK(catalog.files.size() == 3);
  CHECK(catalog.tensors.size() == report.tensors);
  CHECK(catalog.total_tensor_bytes() == report.bytes);
  const auto* k = catalog.find("model.layers.2.self_attn.k_proj.weight");
  REQUIRE(k != nullptr);
  CHECK(k->shape == Shape{32, 64});  // kv_heads * head_dim = 2 * 16
  CHECK(k->dtype == DType::kBF16);
  const auto* down = catalog.find("model.layers.0.mlp.down_proj.weight");
  REQUIRE(down != nullptr);
  CHECK(down->shape == Shape{64, 160});
  CHECK(catalog.find("lm_head.weight")->shape == Shape{100, 64});

  const auto config = nlohmann::json::parse(catalog.config_json);
  CHECK(config["num_hidden_layers"] == 3);
  CHECK(config["num_key_value_heads"] == 2);
  CHECK(config["torch_dtype"] == "bfloat16");
}

TEST_CASE("synth is deterministic in its seed", "[scripts][synth]") {
  testing::ScratchDir a, b, c;
  const session::SynthOptions o{.layers = 1,
                                .hidden = 32,
                                .intermediate = 64,
                                .vocab = 50,
                                .heads = 2,
                                .kv_heads = 1,
                                .shards = 1,
                                .dtype = DType::kF16,
                                .seed = 9};
  REQUIRE(session::synthesize(a.path().string(), o));
  REQUIRE(session::synthesize(b.path().string(), o));
  auto other = o;
  other.seed = 10;
  REQUIRE(session::synthesize(c.path().string(), other));
  const auto path = [](const testing::ScratchDir& d) { return d.file("model.safetensors"); };
  CHECK(file_hash(path(a)) == file_hash(path(b)));
  CHECK(file_hash(path(a)) != file_hash(path(c)));
  CHECK_FALSE(std::filesystem::exists(a.file("model.safetensors.index.json")));  // one shard: no index
}

TEST_CASE("synth values are finite, small, and not constant", "[scripts][synth]") {
  testing::ScratchDir dir;
  const session::SynthOptions o{.layers = 1,
                                .hidden = 16,
                                .intermediate = 32,
                                .vocab = 8,
                                .heads = 2,
                                .kv_heads = 2,
                                .shards = 1,
                                .dtype = DType::kF32,
                                .seed = 1};
  REQUIRE(session::synthesize(dir.path().string(), o));
  const auto catalog = formats::open_catalog(dir.file("model.safetensors")).value();
  const auto* t = catalog.find("model.layers.0.mlp.up_proj.weight");
  REQUIRE(t != nullptr);
  std::vector<float> values(32 * 16);
  std::ifstream in(dir.file("model.safetensors"), std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t->offset));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(t->nbytes));
  REQUIRE(in);
  float lo = 1, hi = -1;
  for (float v : values) {
    REQUIRE(std::isfinite(v));
    REQUIRE(std::fabs(v) < 0.5f);
    REQUIRE(std::fabs(v) >= 1.0f / 128);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  CHECK(lo < 0);
  CHECK(hi > 0);
}

TEST_CASE("synth rejects impossible shapes", "[scripts][synth]") {
  CHECK_FALSE(session::validate({.hidden = 100, .heads = 3}));
  CHECK_FALSE(session::validate({.heads = 4, .kv_heads = 3}));
  CHECK_FALSE(session::validate({.dtype = DType::kI8}));
  CHECK_FALSE(session::validate({.layers = 1, .shards = 9}));
  CHECK(session::validate({}));
}
