// Requantize on load (PlanOptions::dequantize and ::quantize together): a quantized weight is
// decoded, then quantized from the decoded values, as converting twice would. The reference
// for each requantized weight is the codec run on what a dequantize-only load of the same
// checkpoint returns (itself checked against the writing libraries elsewhere).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"
#include "support/scratch.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

constexpr const char* kUp = "model.layers.0.mlp.up_proj.weight";
constexpr const char* kDown = "model.layers.0.mlp.down_proj.weight";

// An fbgemm FP8 (per-row) checkpoint: up_proj and down_proj quantized, plus lm_head quantized
// the same way (which requantizing leaves dequantized, as quantize-on-load leaves a plain
// lm_head), an embedding and a norm kept bf16.
struct Fp8Checkpoint {
  ScratchDir dir;
};

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) {
    const float f = dist(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = formats::f32_to_bf16_bits(bits);
  }
  return v;
}

void write_fp8_checkpoint(Fp8Checkpoint& c) {
  std::mt19937 rng(5);
  struct Plain {
    std::string name;
    Shape shape;
    std::vector<std::uint16_t> values;
  };
  const std::vector<Plain> plain = {
      {kUp, Shape{192, 160}, random_bf16(192 * 160, rng)},
      {kDown, Shape{160, 192}, random_bf16(160 * 192, rng)},
      {"lm_head.weight", Shape{96, 160}, random_bf16(96 * 160, rng)},
      {"model.embed_tokens.weight", Shape{96, 160}, random_bf16(96 * 160, rng)},
      {"model.norm.weight", Shape{160}, random_bf16(160, rng)},
  };
  std::vector<std::vector<std::byte>> storage;
  storage.reserve(8);  // the writer keeps spans into it
  std::vector<formats::WriterTensor> tensors;
  for (const Plain& p : plain) {
    const bool quantize = p.shape.rank() == 2 && p.name.find("embed") == std::string::npos;
    if (!quantize) {
      tensors.push_back({p.name, DType::kBF16, p.shape, std::as_bytes(std::span(p.values)), {}});
      continue;
    }
    const formats::QuantizedLayout layout =
        formats::quantized_layout(p.shape[0], p.shape[1], formats::QuantizeTarget::kFp8Row).value();
    auto& weight = storage.emplace_back(layout.weight_bytes);
    auto& scale = storage.emplace_back(layout.scale_bytes);
    REQUIRE(formats::quantize(std::as_bytes(std::span(p.values)), DType::kBF16, p.shape[0], p.shape[1],
                              formats::QuantizeTarget::kFp8Row, weight, scale));
    const std::string prefix = p.name.substr(0, p.name.size() - std::string_view("weight").size());
    tensors.push_back({p.name, layout.weight_dtype, p.shape, weight, {}});
    tensors.push_back({prefix + layout.scale_suffix, DType::kF32, layout.scale_shape, scale, {}});
  }
  REQUIRE(formats::write_safetensors(c.dir.file("model.safetensors"), tensors));
  std::ofstream(c.dir.file("config.json")) << R"({"quantization_config": {"quant_method": "fbgemm_fp8"}})";
}

// `decoded` (a weight of `dtype` as a dequantize-only load returned it) quantized by the codec.
void check_requantized(const Model& model, const DeviceTensor& decoded, formats::QuantizeTarget target) {
  INFO(decoded.name << " on " << decoded.device);
  const std::uint64_t rows = decoded.shape[0], cols = decoded.shape[1];
  const formats::QuantizedLayout layout = formats::quantized_layout(rows, cols, target).value();
  std::vector<std::byte> weight(layout.weight_bytes), scale(layout.scale_bytes);
  REQUIRE(formats::quantize(decoded.bytes(), decoded.dtype, rows, cols, target, weight, scale));
  const std::string prefix = decoded.name.substr(0, decoded.name.size() - std::string_view("weight").size());
  const DeviceTensor* w = model.find(decoded.name, decoded.device);
  const DeviceTensor* s = model.find(prefix + layout.scale_suffix, decoded.device);
  REQUIRE(w != nullptr);
  REQUIRE(s != nullptr);
  CHECK(w->dtype == layout.weight_dtype);
  CHECK(w->shape == decoded.shape);
  CHECK(s->shape == layout.scale_shape);
  REQUIRE(w->nbytes == weight.size());
  REQUIRE(s->nbytes == scale.size());
  CHECK(std::memcmp(w->data, weight.data(), weight.size()) == 0);
  CHECK(std::memcmp(s->data, scale.data(), scale.size()) == 0);
}

}  // namespace

TEST_CASE("requantize: dequantize + quantize quantize the decoded weights; excluded names stay decoded",
          "[scheduler][decode][requantize]") {
  Fp8Checkpoint c;
  write_fp8_checkpoint(c);
  for (const DType through : {DType::kF32, DType::kBF16}) {
    for (const auto target :
         {formats::QuantizeTarget::kFp8Tensor, formats::QuantizeTarget::kFp8Block, formats::QuantizeTarget::kInt8Row}) {
      DYNAMIC_SECTION(dtype_name(through) << " -> " << formats::quantize_target_name(target)) {
        LoadOptions d = host_devices(2);
        d.plan.dequantize = through;
        auto decoded = load_source(c.dir.path().string(), d);
        REQUIRE(decoded);
        LoadOptions r = d;
        r.plan.quantize = target;
        auto model = load_source(c.dir.path().string(), r);
        if (!model) FAIL(model.error().to_string());
        CHECK(model->report().decoded_tensors == 3);  // up, down requantized; lm_head dequantized
        CHECK(model->quantized().empty());            // no packed weight left to describe
        for (const char* name : {kUp, kDown}) check_requantized(*model, *decoded->find(name), target);
        // lm_head: what a dequantize-only load gives, with no scale beside it.
        const DeviceTensor* head = model->find("lm_head.weight");
        REQUIRE(head != nullptr);
        CHECK(head->dtype == through);
        CHECK(std::memcmp(head->data, decoded->find("lm_head.weight")->data, head->nbytes) == 0);
        CHECK(model->find("lm_head.weight_scale") == nullptr);
        CHECK(model->find("model.embed_tokens.weight")->dtype == DType::kBF16);
      }
    }
  }
}

TEST_CASE("requantize: under tensor parallelism each rank quantizes its own decoded shard",
          "[scheduler][decode][requantize][parallel]") {
  Fp8Checkpoint c;
  write_fp8_checkpoint(c);
  LoadOptions d = host_devices(2);
  d.plan.parallel = {.tensor = 2};
  d.plan.dequantize = DType::kF32;
  auto decoded = load_source(c.dir.path().string(), d);
  if (!decoded) FAIL(decoded.error().to_string());
  LoadOptions r = d;
  r.plan.quantize = formats::QuantizeTarget::kFp8Tensor;  // a per-tensor scale: each shard has its own
  auto model = load_source(c.dir.path().string(), r);
  if (!model) FAIL(model.error().to_string());
  int shards = 0;
  for (const DeviceTensor& t : decoded->tensors()) {
    if (t.name != kUp && t.name != kDown) continue;
    CHECK(t.shape.rank() == 2);
    CHECK(t.shape.numel().value() == (t.name == kUp ? 192 * 160 / 2 : 160 * 192 / 2));
    check_requantized(*model, t, formats::QuantizeTarget::kFp8Tensor);
    ++shards;
  }
  CHECK(shards == 4);
}

TEST_CASE("requantize: a rule with both actions requantizes one weight, the flags leave the others",
          "[scheduler][decode][requantize]") {
  Fp8Checkpoint c;
  write_fp8_checkpoint(c);
  LoadOptions d = host_devices(1);
  d.plan.dequantize = DType::kF32;
  auto decoded = load_source(c.dir.path().string(), d);
  REQUIRE(decoded);
  LoadOptions r = host_devices(1);
  r.plan.weight_policy = [](std::string_view name) -> Result<std::optional<WeightPolicy>> {
    if (name != kUp) return std::optional<WeightPolicy>();
    return WeightPolicy{
        .action = WeightPolicy::Action::kRequantize, .dtype = DType::kF32, .target = formats::QuantizeTarget::kInt8Row};
  };
  auto model = load_source(c.dir.path().string(), r);
  if (!model) FAIL(model.error().to_string());
  check_requantized(*model, *decoded->find(kUp), formats::QuantizeTarget::kInt8Row);
  // down_proj and lm_head kept packed as stored, described for a server's kernels.
  CHECK(model->find(kDown)->dtype == DType::kF8_E4M3);
  CHECK(model->quantized().size() == 2);
}
