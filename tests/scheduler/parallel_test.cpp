// Tensor, pipeline and data parallel placement on CPU devices (cpu:N are distinct arenas,
// planned and filled by the same code as GPUs). For every tensor-parallel rule and every
// tp x pp x dp layout up to 8 devices: each device's copy of each tensor holds exactly the
// elements an independent reference says it should (so the shards' union is the tensor, kv
// heads replicated where there are fewer than ranks), layers land on their pipeline stage,
// every data replica is whole, and the bytes read equal those of a plain single-device load.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "qload/formats/convert.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/scheduler/load.hpp"
#include "support/llama_splits.hpp"
#include "support/scratch.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// Geometry: 8 heads, 2 kv heads (replicated from tp 4 on), head_dim 4, hidden 32,
// intermediate 64, vocab 64, 2 layers; layer 1 uses fused qkv_proj and gate_up_proj.
constexpr std::uint64_t kHeads = 8, kKv = 2, kHd = 4, kHidden = 32, kInter = 64, kVocab = 64, kLayers = 2;

struct Llama {
  ScratchDir dir;
  std::map<std::string, Shape> shapes;
  std::map<std::string, std::vector<std::uint16_t>> values;  // bf16, row-major
};

void make_model(Llama& m) {
  std::mt19937 rng(5);
  const auto add = [&](const std::string& name, Shape shape) {
    std::vector<std::uint16_t> v(shape.numel().value());
    for (auto& x : v) x = static_cast<std::uint16_t>(0x3c00 + rng() % 0x0400);  // finite bf16
    m.values[name] = std::move(v);
    m.shapes[name] = std::move(shape);
  };
  add("model.embed_tokens.weight", {kVocab, kHidden});
  for (std::uint64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {kHidden});
    if (l == 0) {
      add(p + "self_attn.q_proj.weight", {kHeads * kHd, kHidden});
      add(p + "self_attn.q_proj.bias", {kHeads * kHd});
      add(p + "self_attn.k_proj.weight", {kKv * kHd, kHidden});
      add(p + "self_attn.v_proj.weight", {kKv * kHd, kHidden});
      add(p + "mlp.gate_proj.weight", {kInter, kHidden});
      add(p + "mlp.up_proj.weight", {kInter, kHidden});
    } else {
      add(p + "self_attn.qkv_proj.weight", {(kHeads + 2 * kKv) * kHd, kHidden});
      add(p + "mlp.gate_up_proj.weight", {2 * kInter, kHidden});
    }
    add(p + "self_attn.o_proj.weight", {kHidden, kHeads * kHd});
    add(p + "self_attn.o_proj.bias", {kHidden});
    add(p + "mlp.down_proj.weight", {kHidden, kInter});
  }
  add("model.norm.weight", {kHidden});
  add("lm_head.weight", {kVocab, kHidden});
  std::vector<formats::WriterTensor> tensors;
  for (const auto& [name, v] : m.values)
    tensors.push_back(
        {.name = name, .dtype = DType::kBF16, .shape = m.shapes[name], .bytes = std::as_bytes(std::span(v))});
  REQUIRE(formats::write_safetensors(m.dir.file("model.safetensors"), tensors));
  std::ofstream(m.dir.file("config.json")) << fmt::format(
      R"({{"num_hidden_layers": {}, "hidden_size": {}, "num_attention_heads": {}, "num_key_value_heads": {}}})",
      kLayers, kHidden, kHeads, kKv);
}

bool has(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// The pipeline stage of a tensor: layer L on stage L * pp / layers; embeddings first, the rest
// of the layer-less tensors last.
std::uint64_t stage_of(const std::string& name, std::uint64_t pp) {
  for (std::uint64_t l = 0; l < kLayers; ++l)
    if (has(name, fmt::format(".layers.{}.", l))) return l * pp / kLayers;
  return has(name, "embed") ? 0 : pp - 1;
}

std::uint16_t stored(const Llama& m, const std::string& name, std::uint64_t row, std::uint64_t col) {
  const Shape& s = m.shapes.at(name);
  const std::uint64_t rest = s.rank() == 2 ? s[1] : 1;
  return m.values.at(name)[row * rest + col];
}

float as_float(std::uint16_t bf16) {
  const std::uint32_t bits = std::uint32_t{bf16} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

TEST_CASE("parallel: every tp x pp x dp layout up to 8 devices places exactly the reference's elements",
          "[scheduler][parallel]") {
  Llama m;
  make_model(m);
  LoadOptions single;
  single.plan.chunk_bytes = single.staging.slot_bytes = 4096;  // tensors span chunks
  single.staging.total_bytes = 8 * 4096;
  single.plan.direct_min_bytes = 0;
  auto baseline = load_source(m.dir.path().string(), single);
  if (!baseline) FAIL(baseline.error().to_string());

  for (std::uint32_t tp : {1u, 2u, 4u, 8u})
    for (std::uint32_t pp : {1u, 2u})
      for (std::uint32_t dp : {1u, 2u}) {
        if (tp * pp * dp > 8 || tp * pp * dp == 1) continue;
        for (const bool convert : {false, true})
          for (const std::uint64_t direct : {std::uint64_t{0}, std::uint64_t{1024}}) {
            INFO("tp " << tp << " pp " << pp << " dp " << dp << (convert ? " f32" : " bf16") << " direct from "
                       << direct);
            LoadOptions o = single;
            o.plan.direct_min_bytes = direct;  // 1024: row-split shards of >= 1 KiB tensors read straight in
            o.plan.parallel = {.tensor = tp, .pipeline = pp, .data = dp};
            o.plan.devices.clear();
            for (std::uint32_t i = 0; i < tp * pp * dp; ++i)
              o.plan.devices.push_back(Device{.kind = Device::Kind::kCpu, .index = static_cast<int>(i)});
            if (convert) o.plan.dtype = DType::kF32;
            auto model = load_source(m.dir.path().string(), o);
            if (!model) FAIL(model.error().to_string());
            // Unconverted, undivided row splits go straight in (tp > 1, no replicas).
            if (direct > 0 && !convert && dp == 1 && tp > 1) CHECK(model->report().direct_tensors > 0);
            if (direct == 0 || convert || dp > 1) CHECK(model->report().direct_tensors == 0);
            // Every byte read once, whatever the layout: each tensor byte is in exactly one read
            // piece of the plan, and the I/O layer read what the plan says (with staging only,
            // exactly what a single-device load reads).
            auto catalog = open_source(m.dir.path().string());
            REQUIRE(catalog);
            auto plan = make_plan(*catalog, o.plan);
            REQUIRE(plan);
            std::vector<std::vector<bool>> seen(catalog->tensors.size());
            for (std::size_t t = 0; t < seen.size(); ++t) seen[t].assign(catalog->tensors[t].nbytes, false);
            for (const ReadChunk& chunk : plan->chunks)
              for (const ChunkPiece& piece : chunk.pieces)
                for (std::uint64_t b = piece.tensor_offset; b < piece.tensor_offset + piece.bytes; ++b) {
                  if (seen[piece.tensor][b]) FAIL("byte " << b << " of tensor " << piece.tensor << " is read twice");
                  seen[piece.tensor][b] = true;
                }
            for (const auto& bytes : seen) CHECK(std::ranges::all_of(bytes, [](bool b) { return b; }));
            CHECK(model->report().io.bytes == plan->read_bytes);
            if (direct == 0) CHECK(model->report().io.bytes == baseline->report().io.bytes);
            CHECK(model->report().tensors == m.values.size() * tp * dp);
            for (const auto& [name, shape] : m.shapes) {
              INFO(name);
              const std::uint64_t stage = stage_of(name, pp);
              for (std::uint32_t d = 0; d < dp; ++d)
                for (std::uint32_t r = 0; r < tp; ++r) {
                  const std::uint32_t device = (d * pp + static_cast<std::uint32_t>(stage)) * tp + r;
                  const DeviceTensor* t = model->find(name, Device{.index = static_cast<int>(device)}.to_string());
                  INFO("rank " << r << " replica " << d << " on cpu:" << device);
                  REQUIRE(t != nullptr);
                  const SplitExpect e = expected_split(name, shape, r, tp, {kHeads, kKv, kHd});
                  const std::uint64_t width = e.col_end - e.col_begin;
                  REQUIRE(t->shape.numel().value() == e.rows.size() * width);
                  CHECK(t->shape[0] == e.rows.size());
                  CHECK(t->dtype == (convert ? DType::kF32 : DType::kBF16));
                  for (std::uint64_t i = 0; i < e.rows.size(); ++i)
                    for (std::uint64_t j = 0; j < width; ++j) {
                      const std::uint16_t want = stored(m, name, e.rows[i], e.col_begin + j);
                      const std::uint64_t at = i * width + j;
                      bool same = false;
                      if (convert) {
                        float got;
                        std::memcpy(&got, t->data + at * 4, 4);
                        same = got == as_float(want);
                      } else {
                        std::uint16_t got;
                        std::memcpy(&got, t->data + at * 2, 2);
                        same = got == want;
                      }
                      if (!same) FAIL("element (" << i << ", " << j << ") differs");
                    }
                }
              // No other device holds it.
              std::size_t copies = 0;
              for (const DeviceTensor& t : model->tensors()) copies += t.name == name ? 1 : 0;
              CHECK(copies == std::size_t{tp} * dp);
            }
          }
      }
}

TEST_CASE("parallel: splits that do not fit, and layouts that cannot work, are refused by name",
          "[scheduler][parallel]") {
  Llama m;
  make_model(m);
  const auto plan_with = [&](ParallelLayout layout, std::size_t devices, auto&& tweak) {
    LoadOptions o;
    o.plan.parallel = layout;
    o.plan.devices.clear();
    for (std::size_t i = 0; i < devices; ++i) o.plan.devices.push_back(Device{.index = static_cast<int>(i)});
    tweak(o);
    return load_source(m.dir.path().string(), o);
  };
  const auto none = [](LoadOptions&) {};
  auto wrong_count = plan_with({.tensor = 2, .pipeline = 2}, 3, none);
  REQUIRE_FALSE(wrong_count);
  CHECK_THAT(wrong_count.error().message(), Catch::Contains("needs 4 devices, 3 given"));

  // 16 ranks: 8 heads cannot be split 16 ways.
  auto too_many = plan_with({.tensor = 16}, 16, none);
  REQUIRE_FALSE(too_many);
  CHECK_THAT(too_many.error().message(), Catch::Contains("cannot split 8 attention heads over 16 ranks"));
  CHECK(too_many.error().tensor().has_value());

  // A rule splitting the norm's 32 rows over 3 ranks is refused, naming sizes.
  auto uneven = plan_with({.tensor = 2}, 2, [](LoadOptions& o) {
    o.plan.split = [](std::string_view name) -> Result<std::optional<Split>> {
      if (name == "model.norm.weight") return std::optional<Split>(Split::kCols);
      return std::optional<Split>();
    };
  });
  REQUIRE_FALSE(uneven);
  CHECK(uneven.error().tensor() == std::optional<std::string_view>("model.norm.weight"));
  CHECK_THAT(uneven.error().message(), Catch::Contains("cannot split dim 1 of [32]"));

  auto mmap = plan_with({.data = 2}, 2, [](LoadOptions& o) { o.plan.mode = LoadMode::kMmap; });
  REQUIRE_FALSE(mmap);
  CHECK(mmap.error().code() == Errc::kUnsupported);
}

TEST_CASE("parallel: a rule can override the default split", "[scheduler][parallel]") {
  Llama m;
  make_model(m);
  LoadOptions o;
  o.plan.parallel = {.tensor = 2};
  o.plan.devices = {Device{.index = 0}, Device{.index = 1}};
  o.plan.split = [](std::string_view name) -> Result<std::optional<Split>> {
    if (name == "lm_head.weight") return std::optional<Split>(Split::kReplicate);
    if (name == "model.norm.weight") return std::optional<Split>(Split::kRows);
    return std::optional<Split>();
  };
  auto model = load_source(m.dir.path().string(), o);
  REQUIRE(model);
  CHECK(model->find("lm_head.weight", "cpu:1")->shape == Shape{kVocab, kHidden});
  CHECK(model->find("model.norm.weight", "cpu:1")->shape == Shape{kHidden / 2});
  const std::uint16_t first_of_second_half = m.values.at("model.norm.weight")[kHidden / 2];
  std::uint16_t got;
  std::memcpy(&got, model->find("model.norm.weight", "cpu:1")->data, 2);
  CHECK(got == first_of_second_half);
}
