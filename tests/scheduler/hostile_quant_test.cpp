// Issue 45, findings 1, 2 and 7: quantize / dequantize on load of zero-element weights whose
// other dims are huge. Such a weight is 0 bytes in the file, so nothing but the planner bounds
// its dims: every product is checked, no buffer is sized by a dim, no loop runs over its rows,
// and the load ends quickly in empty outputs or in one error naming the weight.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "formats/gguf_bytes.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/scheduler/load.hpp"
#include "support/scratch.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

constexpr const char* kWeight = "model.layers.0.mlp.up_proj.weight";

// A safetensors file of one F32 weight of `shape` and no data (about 100 bytes).
void write_empty_weight(const ScratchDir& dir, std::uint64_t rows, std::uint64_t cols) {
  const std::string header = std::string(R"({")") + kWeight + R"(": {"dtype": "F32", "shape": [)" +
                             std::to_string(rows) + ", " + std::to_string(cols) + R"(], "data_offsets": [0, 0]}})";
  std::vector<std::byte> bytes(8);
  const std::uint64_t size = header.size();
  std::memcpy(bytes.data(), &size, 8);
  for (const char c : header) bytes.push_back(static_cast<std::byte>(c));
  write_file(dir.file("model.safetensors"), bytes);
  std::ofstream(dir.file("config.json")) << R"({"model_type": "llama"})";
}

LoadOptions on_host() {
  LoadOptions o;
  o.plan.devices = {Device{}};
  return o;
}

void check_all_ones(const DeviceTensor& scale) {
  const float one = 1.0f;
  for (std::uint64_t i = 0; i < scale.nbytes / 4; ++i)
    REQUIRE(std::memcmp(static_cast<const std::byte*>(scale.data) + i * 4, &one, 4) == 0);
}

// A GGUF of one Q8_0 (or F32) weight [rows, 0]: 0 bytes of blocks, and a small norm.
void write_gguf(const ScratchDir& dir, std::uint64_t rows, std::uint32_t ggml_type) {
  constexpr std::uint32_t kF32 = 0;
  GgufBytes g;
  g.header(2, 0).tensor("output_norm.weight", {4}, kF32, 0).tensor("blk.0.ffn_down.weight", {0, rows}, ggml_type, 32);
  g.pad_to(32).data(std::vector<std::byte>(32, std::byte{0}));
  write_file(dir.file("m.gguf"), g.bytes);
}

constexpr std::uint32_t kQ8_0 = 8;

}  // namespace

TEST_CASE("decode: quantize on load of zero-element weights gives empty outputs or one error naming the weight",
          "[scheduler][decode]") {
  struct Case {
    std::uint64_t rows, cols;
  };
  // [2^62 + 16, 0]: rows * 4 wrapped to a 64-byte scale buffer; [0, 2^63], [0, 2^33], [0, 2^28]:
  // a row buffer of 2^63, 2^33, 2^28 floats; [2^40, 0]: a loop over 2^40 empty rows.
  const std::vector<Case> cases = {{(std::uint64_t{1} << 62) + 16, 0}, {0, std::uint64_t{1} << 63},
                                   {0, std::uint64_t{1} << 33},        {0, std::uint64_t{1} << 28},
                                   {std::uint64_t{1} << 40, 0},        {1000, 0}};
  for (const Case& c : cases)
    for (const auto target : {formats::QuantizeTarget::kInt8Row, formats::QuantizeTarget::kFp8Row,
                              formats::QuantizeTarget::kFp8Tensor, formats::QuantizeTarget::kFp8Block}) {
      INFO("[" << c.rows << ", " << c.cols << "] to " << formats::quantize_target_name(target));
      ScratchDir dir;
      write_empty_weight(dir, c.rows, c.cols);
      LoadOptions options = on_host();
      options.plan.quantize = target;
      auto model = load_source(dir.path().string(), options);
      const bool per_row = target == formats::QuantizeTarget::kInt8Row || target == formats::QuantizeTarget::kFp8Row;
      if (per_row && c.rows > formats::kMaxScalesBeyondElements) {
        REQUIRE_FALSE(model);
        CHECK(model.error().code() == Errc::kUnsupported);
        CHECK(model.error().tensor() == kWeight);
        continue;
      }
      if (!model) FAIL(model.error().to_string());
      const auto layout = formats::quantized_layout(c.rows, c.cols, target).value();
      const DeviceTensor* w = model->find(kWeight);
      REQUIRE(w != nullptr);
      CHECK(w->shape == Shape{c.rows, c.cols});
      CHECK(w->nbytes == 0);
      const DeviceTensor* s =
          model->find(std::string(kWeight).substr(0, std::strlen(kWeight) - 6) + layout.scale_suffix);
      REQUIRE(s != nullptr);
      CHECK(s->shape == layout.scale_shape);
      CHECK(s->nbytes == layout.scale_bytes);
      check_all_ones(*s);
    }
}

TEST_CASE("decode: a GGUF weight of 0 bytes and 2^62 rows dequantizes in one task, requantizes or is refused",
          "[scheduler][decode]") {
  const std::uint64_t rows = std::uint64_t{1} << 62;
  ScratchDir dir;
  write_gguf(dir, rows, kQ8_0);
  LoadOptions options = on_host();
  options.plan.dequantize = DType::kF32;
  SECTION("dequantize") {
    auto model = load_source(dir.file("m.gguf"), options);
    if (!model) FAIL(model.error().to_string());
    const DeviceTensor* w = model->find("blk.0.ffn_down.weight");
    REQUIRE(w != nullptr);
    CHECK(w->shape == Shape{rows, 0});
    CHECK(w->nbytes == 0);
  }
  SECTION("requantize per channel: 2^62 scales are refused") {
    options.plan.quantize = formats::QuantizeTarget::kFp8Row;
    auto model = load_source(dir.file("m.gguf"), options);
    REQUIRE_FALSE(model);
    CHECK(model.error().code() == Errc::kUnsupported);
    CHECK(model.error().tensor() == "blk.0.ffn_down.weight");
  }
  SECTION("requantize per tensor: one scale of 1") {
    options.plan.quantize = formats::QuantizeTarget::kFp8Tensor;
    auto model = load_source(dir.file("m.gguf"), options);
    if (!model) FAIL(model.error().to_string());
    const DeviceTensor* s = model->find("blk.0.ffn_down.weight_scale");
    REQUIRE(s != nullptr);
    CHECK(s->nbytes == 4);
    check_all_ones(*s);
  }
}

TEST_CASE("decode: quantize on load of a GGUF F32 weight [2^62 + 16, 0] is one error naming it",
          "[scheduler][decode]") {
  ScratchDir dir;
  write_gguf(dir, (std::uint64_t{1} << 62) + 16, /*F32*/ 0);
  for (const auto target : {formats::QuantizeTarget::kInt8Row, formats::QuantizeTarget::kFp8Row}) {
    LoadOptions options = on_host();
    options.plan.quantize = target;
    auto model = load_source(dir.file("m.gguf"), options);
    REQUIRE_FALSE(model);
    CHECK(model.error().code() == Errc::kUnsupported);
    CHECK(model.error().tensor() == "blk.0.ffn_down.weight");
  }
}
