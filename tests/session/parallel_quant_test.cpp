// Tensor-parallel splits of quantized weights, on checkpoints written by `qload synth --quant`:
// every rank's parts, decoded by the CPU decoder as a weight of the shard's N and K (from
// Model::quantized()), equal the matching slice (llama_splits.hpp, an independent reference of
// the rules) of the unsplit weight decoded; packed words, groups and scale blocks are never
// cut, and splits that would cut one are refused by name. GPTQ's row-parallel shards keep
// the whole scales and zeros, their g_idx indexing them (QuantizedWeight params.groups).
// Weights dequantized or quantized on load under layouts are each copy's slice decoded or
// quantized alone.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "qload/formats/quant_codec.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/session/synth.hpp"
#include "support/llama_splits.hpp"
#include "support/scratch.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

constexpr std::uint64_t kHeads = 4, kKv = 2, kHeadDim = 128;

std::string synth(const ScratchDir& dir, const std::string& quant) {
  session::SynthOptions o;
  o.layers = 2;
  o.hidden = 512;
  o.intermediate = 1024;
  o.vocab = 512;
  o.heads = kHeads;
  o.kv_heads = kKv;
  o.quant = quant;
  const std::string out = dir.file(quant);
  const auto made = session::synthesize(out, o);
  if (!made) FAIL(made.error().to_string());
  return out;
}

// The weight decoded to f32 from the parts the model holds for it.
std::vector<float> decode(const Model& model, const QuantizedWeight& w) {
  formats::LogicalTensor t;
  t.name = w.name;
  t.params = w.params;
  t.rows = w.rows;
  t.cols = w.cols;
  std::vector<formats::PartBytes> parts;
  for (const auto& [role, index] : w.parts) {
    const DeviceTensor& part = model.tensors()[index];
    parts.push_back({.role = role, .dtype = part.dtype, .shape = part.shape, .bytes = part.bytes()});
  }
  std::vector<float> out(w.rows * w.cols);
  const Status st = formats::dequantize_rows(t, parts, 0, w.rows, DType::kF32, std::as_writable_bytes(std::span(out)));
  if (!st) FAIL(st.error().to_string());
  return out;
}

LoadOptions over(std::uint32_t tp) {
  LoadOptions o;
  o.plan.parallel.tensor = tp;
  o.plan.devices.clear();
  for (std::uint32_t i = 0; i < tp; ++i) o.plan.devices.push_back(Device{.index = static_cast<int>(i)});
  return o;
}

}  // namespace

TEST_CASE("parallel: quantized weights split along their packed dimensions decode to the unsplit weight's slices",
          "[scripts][parallel][quant]") {
  ScratchDir dir;
  for (const std::string quant : {"gptq4", "gptq8", "awq", "fp8-block", "fp8-channel", "fp8-tensor", "ct-pack4",
                                  "ct-pack4-asym", "ct-fp8", "ct-nvfp4"}) {
    const std::string path = synth(dir, quant);
    auto whole = load_source(path, LoadOptions{});
    REQUIRE(whole);
    std::map<std::string, std::vector<float>> full;
    for (const QuantizedWeight& w : whole->quantized()) full[w.name] = decode(*whole, w);
    REQUIRE(full.size() == 14);  // 7 linears in each of 2 layers
    for (const std::uint32_t tp : {2u, 4u}) {
      INFO(quant << " tp " << tp);
      LoadOptions o = over(tp);
      auto model = load_source(path, o);
      if (!model) FAIL(model.error().to_string());
      REQUIRE(model->quantized().size() == full.size() * tp);
      for (const QuantizedWeight& w : model->quantized()) {
        INFO(w.name << " on " << w.device);
        const std::uint64_t rank = w.device == "cpu" ? 0 : std::stoul(w.device.substr(4));
        const std::vector<float>& whole_weight = full.at(w.name);
        const QuantizedWeight& unsplit =
            *std::ranges::find_if(whole->quantized(), [&](const QuantizedWeight& u) { return u.name == w.name; });
        const SplitExpect e =
            expected_split(w.name, Shape{unsplit.rows, unsplit.cols}, rank, tp, {kHeads, kKv, kHeadDim});
        REQUIRE(w.rows == e.rows.size());
        REQUIRE(w.cols == e.col_end - e.col_begin);
        const std::vector<float> got = decode(*model, w);
        for (std::uint64_t i = 0; i < w.rows; ++i)
          for (std::uint64_t j = 0; j < w.cols; ++j) {
            const float want = whole_weight[e.rows[i] * unsplit.cols + e.col_begin + j];
            if (std::memcmp(&want, &got[i * w.cols + j], 4) != 0)
              FAIL(fmt::format("element ({}, {}) is {}, the unsplit weight has {}", i, j, got[i * w.cols + j], want));
          }
      }
    }
  }
}

TEST_CASE("parallel: quantized splits that would cut a word, group or block are refused by name",
          "[scripts][parallel][quant]") {
  ScratchDir dir;
  // FP8 128x128 blocks: splitting 512 rows 8 ways puts a boundary at 64, inside a block.
  LoadOptions rows8 = over(8);
  rows8.plan.split = [](std::string_view) -> Result<std::optional<Split>> {
    return std::optional<Split>(Split::kRows);
  };
  auto fp8 = load_source(synth(dir, "fp8-block"), rows8);
  REQUIRE_FALSE(fp8);
  CHECK_THAT(fp8.error().message(), Catch::Contains("falls inside a packed word, group or scale block"));
  // compressed-tensors groups of 128 along K: a row-parallel split of K 512 eight ways cuts them.
  LoadOptions cols8 = over(8);
  cols8.plan.split = [](std::string_view name) -> Result<std::optional<Split>> {
    if (name.find("_proj") == std::string_view::npos) return std::optional<Split>();
    return std::optional<Split>(Split::kCols);
  };
  auto ct = load_source(synth(dir, "ct-pack4-asym"), cols8);
  REQUIRE_FALSE(ct);
  CHECK_THAT(ct.error().message(), Catch::Contains("falls inside a packed word, group or scale block"));
  CHECK(ct.error().tensor().has_value());
}

TEST_CASE("parallel: compressed-tensors weight_shape says each shard's own N and K", "[scripts][parallel][quant]") {
  ScratchDir dir;
  auto model = load_source(synth(dir, "ct-pack4-asym"), over(2));
  if (!model) FAIL(model.error().to_string());
  // o_proj [512, 512] is row-parallel (K split), gate_proj [1024, 512] column-parallel (N split).
  for (const auto& [name, n, k] :
       {std::tuple{"model.layers.0.self_attn.o_proj", 512, 256}, std::tuple{"model.layers.1.mlp.gate_proj", 512, 512}})
    for (const std::string device : {"cpu:0", "cpu:1"}) {
      INFO(name << " on " << device);
      const DeviceTensor* shape = model->find(std::string(name) + ".weight_shape", device);
      REQUIRE(shape != nullptr);
      REQUIRE(shape->dtype == DType::kI64);
      std::int64_t dims[2];
      std::memcpy(dims, shape->data, sizeof dims);
      CHECK(dims[0] == n);
      CHECK(dims[1] == k);
    }
}

TEST_CASE("parallel: weights dequantized on load under tp, dp and several processes are the unsplit weight's slices",
          "[scripts][parallel][quant]") {
  ScratchDir dir;
  for (const std::string quant : {"gptq4", "awq", "fp8-block", "ct-pack4-asym", "ct-fp8", "ct-nvfp4"}) {
    const std::string path = synth(dir, quant);
    auto whole = load_source(path, LoadOptions{});
    REQUIRE(whole);
    std::map<std::string, std::vector<float>> full;
    for (const QuantizedWeight& w : whole->quantized()) full[w.name] = decode(*whole, w);
    for (const auto& [tp, dp, processes] : {std::tuple{2u, 1u, 1u}, std::tuple{4u, 1u, 1u}, std::tuple{2u, 2u, 1u},
                                            std::tuple{1u, 2u, 1u}, std::tuple{2u, 2u, 4u}, std::tuple{4u, 1u, 2u}}) {
      const std::uint32_t per_process = tp * dp / processes;
      for (std::uint32_t p = 0; p < processes; ++p) {
        INFO(quant << " tp " << tp << " dp " << dp << ", process " << p << " of " << processes);
        LoadOptions o = over(per_process);
        o.plan.parallel = {.tensor = tp, .data = dp, .processes = processes, .process = p};
        o.plan.dequantize = DType::kF32;
        auto model = load_source(path, o);
        if (!model) FAIL(model.error().to_string());
        CHECK(model->quantized().empty());
        for (const auto& [name, weight] : full) {
          const QuantizedWeight& unsplit =
              *std::ranges::find_if(whole->quantized(), [&](const QuantizedWeight& u) { return u.name == name; });
          for (std::uint32_t d = 0; d < dp; ++d)
            for (std::uint32_t r = 0; r < tp; ++r) {
              const std::uint32_t global = d * tp + r;
              const DeviceTensor* t =
                  model->find(name, Device{.index = static_cast<int>(global % per_process)}.to_string());
              if (global / per_process != p) continue;
              INFO(name << " rank " << r << " replica " << d);
              REQUIRE(t != nullptr);
              const SplitExpect e =
                  expected_split(name, Shape{unsplit.rows, unsplit.cols}, r, tp, {kHeads, kKv, kHeadDim});
              const std::uint64_t width = e.col_end - e.col_begin;
              REQUIRE(t->dtype == DType::kF32);
              REQUIRE(t->shape == Shape{e.rows.size(), width});
              for (std::uint64_t i = 0; i < e.rows.size(); ++i)
                for (std::uint64_t j = 0; j < width; ++j) {
                  float got;
                  std::memcpy(&got, t->data + (i * width + j) * 4, 4);
                  const float want = weight[e.rows[i] * unsplit.cols + e.col_begin + j];
                  if (std::memcmp(&want, &got, 4) != 0)
                    FAIL(fmt::format("element ({}, {}) is {}, the unsplit weight has {}", i, j, got, want));
                }
            }
          // Only this process's copies are here.
          std::size_t copies = 0;
          for (const DeviceTensor& t : model->tensors()) copies += t.name == name ? 1 : 0;
          CHECK(copies == per_process);
        }
      }
    }
  }
}

TEST_CASE("parallel: weights repacked on load under tp, dp and several processes decode to the unsplit weight's slices",
          "[scripts][parallel][quant]") {
  ScratchDir dir;
  // gptq4 / gptq8: GPTQ v1 with g_idx (zeros to v2, columns sorted by group with a perm); awq:
  // AWQ GEMM to GPTQ v2.
  for (const std::string quant : {"gptq4", "gptq8", "awq"}) {
    const std::string path = synth(dir, quant);
    auto whole = load_source(path, LoadOptions{});
    REQUIRE(whole);
    std::map<std::string, std::vector<float>> full;
    for (const QuantizedWeight& w : whole->quantized()) full[w.name] = decode(*whole, w);
    for (const auto& [tp, dp, processes] : {std::tuple{2u, 1u, 1u}, std::tuple{4u, 1u, 1u}, std::tuple{2u, 2u, 4u}}) {
      const std::uint32_t per_process = tp * dp / processes;
      for (std::uint32_t p = 0; p < processes; ++p) {
        INFO(quant << " tp " << tp << " dp " << dp << ", process " << p);
        LoadOptions o = over(per_process);
        o.plan.parallel = {.tensor = tp, .data = dp, .processes = processes, .process = p};
        o.plan.repack = true;
        auto model = load_source(path, o);
        if (!model) FAIL(model.error().to_string());
        REQUIRE(model->quantized().size() == full.size() * per_process);
        for (const QuantizedWeight& w : model->quantized()) {
          INFO(w.name << " on " << w.device);
          CHECK(w.params.scheme == formats::QuantScheme::kGptq);
          CHECK(w.params.gptq_version == 2);
          const std::uint32_t global = p * per_process + (w.device == "cpu" ? 0 : std::stoul(w.device.substr(4)));
          const std::uint32_t rank = global % tp;
          const QuantizedWeight& unsplit =
              *std::ranges::find_if(whole->quantized(), [&](const QuantizedWeight& u) { return u.name == w.name; });
          const SplitExpect e =
              expected_split(w.name, Shape{unsplit.rows, unsplit.cols}, rank, tp, {kHeads, kKv, kHeadDim});
          REQUIRE(w.rows == e.rows.size());
          REQUIRE(w.cols == e.col_end - e.col_begin);
          // Column k of the repacked shard is column perm[k] of the shard (perm: identity without one).
          QuantizedWeight packed = w;
          std::vector<std::int32_t> perm(w.cols);
          std::iota(perm.begin(), perm.end(), 0);
          std::erase_if(packed.parts, [&](const auto& part) {
            if (part.first != "perm") return false;
            std::memcpy(perm.data(), model->tensors()[part.second].data, perm.size() * 4);
            return true;
          });
          const std::vector<float> got = decode(*model, packed);
          const std::vector<float>& weight = full.at(w.name);
          for (std::uint64_t i = 0; i < w.rows; ++i)
            for (std::uint64_t j = 0; j < w.cols; ++j) {
              const float want = weight[e.rows[i] * unsplit.cols + e.col_begin + static_cast<std::uint64_t>(perm[j])];
              if (std::memcmp(&want, &got[i * w.cols + j], 4) != 0)
                FAIL(fmt::format("element ({}, {}) is {}, the unsplit weight has {}", i, j, got[i * w.cols + j], want));
            }
        }
      }
    }
  }
}

TEST_CASE("parallel: weights quantized on load under tp, dp and several processes are each copy's slice quantized",
          "[scripts][parallel][quant]") {
  ScratchDir dir;
  const std::string path = synth(dir, "");  // plain bf16 linears
  auto whole = load_source(path, LoadOptions{});
  REQUIRE(whole);
  using formats::QuantizeTarget;
  for (const QuantizeTarget target :
       {QuantizeTarget::kFp8Tensor, QuantizeTarget::kFp8Row, QuantizeTarget::kFp8Block, QuantizeTarget::kInt8Row}) {
    const formats::QuantizedLayout names = formats::quantized_layout(1, 1, target).value();
    for (const auto& [tp, dp, processes] : {std::tuple{2u, 1u, 1u}, std::tuple{4u, 1u, 1u}, std::tuple{2u, 2u, 4u}}) {
      const std::uint32_t per_process = tp * dp / processes;
      for (std::uint32_t p = 0; p < processes; ++p) {
        INFO(formats::quantize_target_name(target) << " tp " << tp << " dp " << dp << ", process " << p);
        LoadOptions o = over(per_process);
        o.plan.parallel = {.tensor = tp, .data = dp, .processes = processes, .process = p};
        o.plan.quantize = target;
        auto model = load_source(path, o);
        if (!model) FAIL(model.error().to_string());
        std::size_t weights = 0;
        for (const DeviceTensor& plain : whole->tensors()) {
          if (plain.name.find("_proj.weight") == std::string::npos) continue;
          ++weights;
          for (std::uint32_t d = 0; d < dp; ++d)
            for (std::uint32_t r = 0; r < tp; ++r) {
              const std::uint32_t global = d * tp + r;
              if (global / per_process != p) continue;
              const std::string device = Device{.index = static_cast<int>(global % per_process)}.to_string();
              INFO(plain.name << " rank " << r << " replica " << d);
              // The reference: the rank's slice (llama_splits.hpp) of the plain weight, quantized alone.
              const SplitExpect e = expected_split(plain.name, plain.shape, r, tp, {kHeads, kKv, kHeadDim});
              const std::uint64_t width = e.col_end - e.col_begin, row_bytes = plain.shape[1] * 2;
              std::vector<std::byte> slice;
              for (const std::uint64_t row : e.rows) {
                const std::byte* from = plain.data + row * row_bytes + e.col_begin * 2;
                slice.insert(slice.end(), from, from + width * 2);
              }
              const formats::QuantizedLayout layout = formats::quantized_layout(e.rows.size(), width, target).value();
              std::vector<std::byte> want_weight(layout.weight_bytes), want_scale(layout.scale_bytes);
              REQUIRE(formats::quantize(slice, DType::kBF16, e.rows.size(), width, target, want_weight, want_scale));
              const DeviceTensor* weight = model->find(plain.name, device);
              const std::string scale_name =
                  plain.name.substr(0, plain.name.size() - std::string_view("weight").size()) + names.scale_suffix;
              const DeviceTensor* scale = model->find(scale_name, device);
              REQUIRE(weight != nullptr);
              REQUIRE(scale != nullptr);
              CHECK(weight->dtype == layout.weight_dtype);
              CHECK(weight->shape == Shape{e.rows.size(), width});
              CHECK(scale->shape == layout.scale_shape);
              CHECK(std::ranges::equal(weight->bytes(), want_weight));
              CHECK(std::ranges::equal(scale->bytes(), want_scale));
            }
        }
        CHECK(weights == 14);
      }
    }
  }
}

TEST_CASE("weights a rule dequantizes become plain tensors; the kept ones are still described", "[scripts][quant]") {
  ScratchDir dir;
  const std::string path = synth(dir, "gptq4");
  for (const std::uint32_t tp : {1u, 2u}) {
    INFO("tp " << tp);
    LoadOptions o = over(tp);
    o.plan.weight_policy = [](std::string_view name) -> Result<std::optional<WeightPolicy>> {
      if (name.find(".mlp.") != std::string_view::npos)
        return std::optional<WeightPolicy>(
            WeightPolicy{.action = WeightPolicy::Action::kDequantize, .dtype = DType::kBF16});
      return std::optional<WeightPolicy>();  // kept packed
    };
    auto model = load_source(path, o);
    if (!model) FAIL(model.error().to_string());
    // 2 layers x 4 attention projections kept, one description per device.
    REQUIRE(model->quantized().size() == 8 * tp);
    for (const QuantizedWeight& w : model->quantized()) {
      INFO(w.name);
      CHECK(w.name.find(".mlp.") == std::string::npos);
      for (const auto& [role, index] : w.parts) CHECK(model->tensors()[index].device == w.device);
    }
    const DeviceTensor* down = model->find("model.layers.1.mlp.down_proj.weight");
    REQUIRE(down != nullptr);
    CHECK(down->dtype == DType::kBF16);
  }
}
