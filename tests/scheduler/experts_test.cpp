// Stacked MoE experts through a load: an FP8-block checkpoint whose expert weight is one
// [E, N, K] tensor (every part with a leading E, vLLM's fused-MoE layout) and a plain stacked
// bf16 one. The reference for each expert is the 2-D decoder on that expert's own parts, cut
// here from the file's bytes independently of the stacked path.
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

constexpr std::uint64_t kE = 4, kN = 512, kK = 256;
constexpr const char* kGateUp = "model.layers.0.mlp.experts.gate_up_proj.weight";
constexpr const char* kScale = "model.layers.0.mlp.experts.gate_up_proj.weight_scale_inv";
constexpr const char* kDown = "model.layers.0.mlp.experts.down_proj";  // plain bf16 [E, K, N / 2]

struct ExpertsCheckpoint {
  ScratchDir dir;
  std::vector<std::byte> weight, scale, down;  // as stored: [E, N, K] F8, [E, 4, 2] F32, [E, K, N/2] BF16
  formats::QuantizedLayout layout = formats::quantized_layout(kN, kK, formats::QuantizeTarget::kFp8Block).value();

  ExpertsCheckpoint() {
    std::mt19937 rng(17);
    std::normal_distribution<float> dist(0.0f, 0.1f);
    for (std::uint64_t e = 0; e < kE; ++e) {
      std::vector<float> w(kN * kK);
      for (float& x : w) x = dist(rng) * static_cast<float>(e + 1);  // each expert its own scale
      std::vector<std::byte> q(layout.weight_bytes), s(layout.scale_bytes);
      REQUIRE(formats::quantize(std::as_bytes(std::span(w)), DType::kF32, kN, kK, formats::QuantizeTarget::kFp8Block, q,
                                s));
      weight.insert(weight.end(), q.begin(), q.end());
      scale.insert(scale.end(), s.begin(), s.end());
    }
    down.resize(kE * kK * (kN / 2) * 2);
    for (std::size_t i = 0; i < down.size(); ++i) down[i] = static_cast<std::byte>(rng());
    const Shape s = layout.scale_shape;
    const std::vector<formats::WriterTensor> tensors = {{kGateUp, DType::kF8_E4M3, Shape{kE, kN, kK}, weight, {}},
                                                        {kScale, DType::kF32, Shape{kE, s[0], s[1]}, scale, {}},
                                                        {kDown, DType::kBF16, Shape{kE, kK, kN / 2}, down, {}}};
    REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), tensors));
    std::ofstream(dir.file("config.json"))
        << R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  }

  // Experts [first, first + count) dequantized to bf16, each by the 2-D decoder on its parts.
  std::vector<std::byte> reference(std::uint64_t first, std::uint64_t count) const {
    std::vector<std::byte> out;
    formats::LogicalTensor t{.name = kGateUp,
                             .params = {.scheme = formats::QuantScheme::kFp8,
                                        .bits = 8,
                                        .scale_layout = formats::ScaleLayout::kBlock,
                                        .block_rows = 128,
                                        .block_cols = 128,
                                        .weight_dtype = DType::kF8_E4M3,
                                        .scale_dtype = DType::kF32},
                             .rows = kN,
                             .cols = kK};
    for (std::uint64_t e = first; e < first + count; ++e) {
      const std::span<const std::byte> w(weight.data() + e * layout.weight_bytes, layout.weight_bytes);
      const std::span<const std::byte> s(scale.data() + e * layout.scale_bytes, layout.scale_bytes);
      const std::vector<formats::PartBytes> parts = {{"weight", DType::kF8_E4M3, Shape{kN, kK}, w},
                                                     {"weight_scale_inv", DType::kF32, layout.scale_shape, s}};
      std::vector<std::byte> rows(kN * kK * 2);
      REQUIRE(formats::dequantize_rows(t, parts, 0, kN, DType::kBF16, rows));
      out.insert(out.end(), rows.begin(), rows.end());
    }
    return out;
  }
};

// Tensor parallel over `ranks` host devices, stacked experts split by `split`.
LoadOptions expert_parallel(std::uint32_t ranks, Split split) {
  LoadOptions o = host_devices(static_cast<int>(ranks));
  o.plan.parallel = {.tensor = ranks};
  o.plan.split = [split](std::string_view name) -> Result<std::optional<Split>> {
    if (name.find(".experts.") != std::string_view::npos) return std::optional<Split>(split);
    return std::optional<Split>();
  };
  return o;
}

// Rank r of 2's part of a stacked [E, A, B] tensor (`element` bytes each) under a split inside
// every expert, cut independently of the plan: A in halves (rows), A's two halves each in
// halves (halves), or B in halves (cols).
std::vector<std::byte> inside_experts(std::span<const std::byte> bytes, std::uint64_t a, std::uint64_t b, Split split,
                                      std::uint32_t r) {
  const std::uint64_t e = kE, element = bytes.size() / (e * a * b);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rows = {{r * a / 2, (r + 1) * a / 2}};
  if (split == Split::kExpertHalves)
    rows = {{r * a / 4, (r + 1) * a / 4}, {a / 2 + r * a / 4, a / 2 + (r + 1) * a / 4}};
  if (split == Split::kExpertCols) rows = {{0, a}};
  const std::uint64_t c0 = split == Split::kExpertCols ? r * b / 2 : 0,
                      c1 = split == Split::kExpertCols ? c0 + b / 2 : b;
  std::vector<std::byte> out;
  for (std::uint64_t x = 0; x < e; ++x)
    for (const auto& [first, last] : rows)
      for (std::uint64_t row = first; row < last; ++row) {
        const std::byte* p = bytes.data() + ((x * a + row) * b) * element;
        out.insert(out.end(), p + c0 * element, p + c1 * element);
      }
  return out;
}

bool same_bytes(const DeviceTensor& t, std::span<const std::byte> want) {
  return t.nbytes == want.size() && std::memcmp(t.data, want.data(), want.size()) == 0;
}

}  // namespace

TEST_CASE("experts: a stacked FP8-block weight is one weight of E experts, dequantized expert by expert",
          "[scheduler][experts]") {
  const ExpertsCheckpoint c;
  LoadOptions o = host_devices(1);
  auto kept = load_source(c.dir.path().string(), o);
  if (!kept) FAIL(kept.error().to_string());
  REQUIRE(kept->quantized().size() == 1);
  const QuantizedWeight& q = kept->quantized().front();
  CHECK((q.experts == kE && q.rows == kE * kN && q.cols == kK));
  o.plan.dequantize = DType::kBF16;
  auto model = load_source(c.dir.path().string(), o);
  if (!model) FAIL(model.error().to_string());
  const DeviceTensor* w = model->find(kGateUp);
  REQUIRE(w != nullptr);
  CHECK(w->shape == Shape{kE, kN, kK});
  CHECK(same_bytes(*w, c.reference(0, kE)));
  CHECK(model->find(kScale) == nullptr);
}

TEST_CASE("experts: split `experts` gives each rank whole experts of every part, kept or dequantized",
          "[scheduler][experts][parallel]") {
  const ExpertsCheckpoint c;
  for (const std::uint32_t ranks : {2u, 4u}) {
    DYNAMIC_SECTION("tp " << ranks) {
      const std::uint64_t per = kE / ranks;
      auto kept = load_source(c.dir.path().string(), expert_parallel(ranks, Split::kExperts));
      if (!kept) FAIL(kept.error().to_string());
      REQUIRE(kept->quantized().size() == ranks);
      for (const QuantizedWeight& q : kept->quantized()) {
        INFO(q.device);
        CHECK((q.experts == per && q.rows == per * kN && q.cols == kK));
      }
      LoadOptions d = expert_parallel(ranks, Split::kExperts);
      d.plan.dequantize = DType::kBF16;
      auto decoded = load_source(c.dir.path().string(), d);
      if (!decoded) FAIL(decoded.error().to_string());
      for (std::uint32_t r = 0; r < ranks; ++r) {
        const std::string device = Device{.index = static_cast<int>(r)}.to_string();
        INFO(device);
        const DeviceTensor* w = kept->find(kGateUp, device);
        const DeviceTensor* s = kept->find(kScale, device);
        const DeviceTensor* down = kept->find(kDown, device);
        REQUIRE((w != nullptr && s != nullptr && down != nullptr));
        CHECK(w->shape == Shape{per, kN, kK});
        CHECK(
            same_bytes(*w, std::span(c.weight).subspan(r * per * c.layout.weight_bytes, per * c.layout.weight_bytes)));
        CHECK(same_bytes(*s, std::span(c.scale).subspan(r * per * c.layout.scale_bytes, per * c.layout.scale_bytes)));
        const std::uint64_t down_bytes = c.down.size() / kE * per;
        CHECK(same_bytes(*down, std::span(c.down).subspan(r * down_bytes, down_bytes)));
        const DeviceTensor* dw = decoded->find(kGateUp, device);
        REQUIRE(dw != nullptr);
        CHECK(dw->shape == Shape{per, kN, kK});
        CHECK(same_bytes(*dw, c.reference(r * per, per)));
      }
    }
  }
}

TEST_CASE("experts: by default stacked experts stay whole; splits inside experts or uneven ones are refused",
          "[scheduler][experts][parallel]") {
  const ExpertsCheckpoint c;
  LoadOptions o = host_devices(2);
  o.plan.parallel = {.tensor = 2};
  auto whole = load_source(c.dir.path().string(), o);
  if (!whole) FAIL(whole.error().to_string());
  for (const char* device : {"cpu:0", "cpu:1"}) {
    const DeviceTensor* w = whole->find(kGateUp, device);
    REQUIRE(w != nullptr);
    CHECK(same_bytes(*w, c.weight));
  }
  auto inside = load_source(c.dir.path().string(), expert_parallel(2, Split::kCols));
  REQUIRE_FALSE(inside);
  CHECK(inside.error().code() == Errc::kUnsupported);
  CHECK_THAT(inside.error().message(), Catch::Contains("a split by cols of its 4 stacked experts is not supported"));
  CHECK(inside.error().tensor() == std::optional<std::string_view>(kGateUp));
  auto uneven = load_source(c.dir.path().string(), expert_parallel(3, Split::kExperts));
  REQUIRE_FALSE(uneven);
  CHECK_THAT(uneven.error().message(), Catch::Contains("cannot split 4 stacked experts over 3 ranks"));
}

TEST_CASE("experts: splits inside every expert give each rank its slice of every part, kept or dequantized",
          "[scheduler][experts][parallel]") {
  const ExpertsCheckpoint c;
  const std::vector<std::byte> decoded = c.reference(0, kE);
  const Shape s = c.layout.scale_shape;
  for (const Split split : {Split::kExpertRows, Split::kExpertHalves, Split::kExpertCols}) {
    DYNAMIC_SECTION(split_name(split)) {
      auto kept = load_source(c.dir.path().string(), expert_parallel(2, split));
      if (!kept) FAIL(kept.error().to_string());
      LoadOptions d = expert_parallel(2, split);
      d.plan.dequantize = DType::kBF16;
      auto model = load_source(c.dir.path().string(), d);
      if (!model) FAIL(model.error().to_string());
      for (std::uint32_t r = 0; r < 2; ++r) {
        const std::string device = Device{.index = static_cast<int>(r)}.to_string();
        INFO(device);
        const DeviceTensor* w = kept->find(kGateUp, device);
        const DeviceTensor* sc = kept->find(kScale, device);
        const DeviceTensor* down = kept->find(kDown, device);
        REQUIRE((w != nullptr && sc != nullptr && down != nullptr));
        CHECK(w->shape == (split == Split::kExpertCols ? Shape{kE, kN, kK / 2} : Shape{kE, kN / 2, kK}));
        CHECK(same_bytes(*w, inside_experts(c.weight, kN, kK, split, r)));
        CHECK(same_bytes(*sc, inside_experts(c.scale, s[0], s[1], split, r)));
        CHECK(same_bytes(*down, inside_experts(c.down, kK, kN / 2, split, r)));
        const DeviceTensor* dw = model->find(kGateUp, device);
        REQUIRE(dw != nullptr);
        CHECK(same_bytes(*dw, inside_experts(decoded, kN, kK, split, r)));
      }
      for (const QuantizedWeight& q : kept->quantized())
        CHECK((q.experts == kE && q.rows * q.cols == kE * kN * kK / 2));
    }
  }
}
