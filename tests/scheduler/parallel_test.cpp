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
#include "support/llama_checkpoint.hpp"
#include "support/scratch.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

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
            for (const ReadChunk& chunk : plan->reads.chunks)
              for (const ChunkPiece& piece : chunk.pieces)
                for (std::uint64_t b = piece.tensor_offset; b < piece.tensor_offset + piece.bytes; ++b) {
                  if (seen[piece.tensor][b]) FAIL("byte " << b << " of tensor " << piece.tensor << " is read twice");
                  seen[piece.tensor][b] = true;
                }
            for (const auto& bytes : seen) CHECK(std::ranges::all_of(bytes, [](bool b) { return b; }));
            CHECK(model->report().io.bytes == plan->reads.read_bytes);
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
                  const std::string mismatch = copy_mismatch(m, name, *t, r, tp, convert);
                  if (!mismatch.empty()) FAIL(mismatch);
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
