// Destinations whose rows are a pitch apart (Destination::row_pitch): some columns of a larger
// row-major parameter, as a server's fused parameter holds each projection's column-parallel
// part ([K/8, N_q + N_k + N_v] for GPTQ's packed words). Each part lands in its columns of
// every row, converted where asked, whatever the staged pieces' cuts; the columns between the
// parts keep the caller's bytes; parts that interleave without sharing a byte are accepted and
// those that share one are refused at plan time, naming both.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "qload/scheduler/load.hpp"
#include "support/llama_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

constexpr std::byte kGuard{0xAB};

// The caller's memory, every byte the guard, and what each byte should hold after the load.
struct Pitched {
  std::vector<std::byte> bytes;
  std::vector<std::byte> want;
  explicit Pitched(std::size_t size) : bytes(size + 64, kGuard), want(size + 64, kGuard) {}
  std::byte* at(std::size_t offset) { return bytes.data() + 64 + offset; }  // 64 guard bytes first
  std::uintptr_t address(std::size_t offset) { return reinterpret_cast<std::uintptr_t>(at(offset)); }
  void expect(std::size_t offset, const void* value, std::size_t size) {
    std::memcpy(want.data() + 64 + offset, value, size);
  }
};

std::uint64_t rows_of(const Llama& m, const std::string& name) {
  return m.shapes.at(name)[0];
}
std::uint64_t cols_of(const Llama& m, const std::string& name) {
  return m.shapes.at(name)[1];
}

}  // namespace

TEST_CASE(
    "destinations a row pitch apart: column parts of a fused parameter, a whole tensor, rows converted or "
    "permuted land in their columns of every row and nothing between them is written",
    "[scheduler][destinations]") {
  Llama m;
  make_model(m);
  const std::string o0 = "model.layers.0.self_attn.o_proj.weight", down = "model.layers.0.mlp.down_proj.weight",
                    o1 = "model.layers.1.self_attn.o_proj.weight", k = "model.layers.0.self_attn.k_proj.weight";
  // A bf16 "fused parameter" [32, 92]: 4 guard columns, o0's columns [8, 24), 4 guard columns,
  // all of down [32, 64], 4 guard columns. Then an f32 one [16, 40] for o1's rows [4, 20)
  // converted, and a bf16 one [8, 40] for k's rows reversed.
  const std::uint64_t fused_pitch = 92 * 2, f32_pitch = 40 * 4, k_pitch = 40 * 2;
  const std::uint64_t f32_at = 32 * fused_pitch + 64, k_at = f32_at + 16 * f32_pitch + 64;
  const std::uint64_t total = k_at + rows_of(m, k) * k_pitch;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> reversed;
  for (std::uint64_t r = rows_of(m, k); r-- > 0;) reversed.emplace_back(r, r + 1);
  // Pieces cut inside rows and across them, read staged or straight in.
  for (const std::uint64_t chunk : {std::uint64_t{256}, std::uint64_t{1000}, std::uint64_t{65536}})
    for (const std::uint64_t direct : {std::uint64_t{0}, std::uint64_t{512}}) {
      INFO("chunk " << chunk << ", direct from " << direct);
      Pitched memory(total);
      LoadOptions o;
      o.plan.chunk_bytes = chunk;
      o.staging.slot_bytes = (chunk + 4095) / 4096 * 4096;
      o.staging.total_bytes = 8 * o.staging.slot_bytes;
      o.plan.direct_min_bytes = direct;
      o.digests = LoadOptions::Digests::kOn;
      o.plan.destinations[o0] = {.address = memory.address(4 * 2),
                                 .bytes = 32 * 16 * 2,
                                 .row_pitch = fused_pitch,
                                 .dtype = DType::kBF16,
                                 .region = TensorRegion{.dim = 1, .begin = 8, .end = 24}};
      o.plan.destinations[down] = {
          .address = memory.address(24 * 2), .bytes = 32 * 64 * 2, .row_pitch = fused_pitch, .dtype = DType::kBF16};
      o.plan.destinations[o1] = {.address = memory.address(f32_at),
                                 .bytes = 16 * 32 * 4,
                                 .row_pitch = f32_pitch,
                                 .dtype = DType::kF32,
                                 .region = TensorRegion{.dim = 0, .begin = 4, .end = 20}};
      o.plan.destinations[k] = {.address = memory.address(k_at),
                                .bytes = rows_of(m, k) * cols_of(m, k) * 2,
                                .row_pitch = k_pitch,
                                .dtype = DType::kBF16,
                                .rows = reversed};
      o.plan.destinations_only = true;
      auto model = load_source(m.dir.path().string(), o);
      if (!model) FAIL(model.error().to_string());
      for (std::uint64_t r = 0; r < 32; ++r) {
        for (std::uint64_t c = 8; c < 24; ++c) {
          const std::uint16_t v = stored(m, o0, r, c);
          memory.expect(r * fused_pitch + (4 + c - 8) * 2, &v, 2);
        }
        for (std::uint64_t c = 0; c < 64; ++c) {
          const std::uint16_t v = stored(m, down, r, c);
          memory.expect(r * fused_pitch + (24 + c) * 2, &v, 2);
        }
      }
      for (std::uint64_t r = 4; r < 20; ++r)
        for (std::uint64_t c = 0; c < 32; ++c) {
          const float v = as_float(stored(m, o1, r, c));
          memory.expect(f32_at + (r - 4) * f32_pitch + c * 4, &v, 4);
        }
      for (std::uint64_t j = 0; j < rows_of(m, k); ++j)
        for (std::uint64_t c = 0; c < cols_of(m, k); ++c) {
          const std::uint16_t v = stored(m, k, rows_of(m, k) - 1 - j, c);
          memory.expect(k_at + j * k_pitch + c * 2, &v, 2);
        }
      REQUIRE(memory.bytes == memory.want);  // every part in place, every other byte the guard
      // The model describes each as the caller's strided view: its rows `row_pitch` apart.
      const DeviceTensor* t = model->find(o0);
      REQUIRE(t != nullptr);
      CHECK(t->caller_owned);
      CHECK(t->shape == Shape{32, 16});
      CHECK(t->strides == std::vector<std::int64_t>{92, 1});
      REQUIRE(model->find(o1) != nullptr);
      CHECK(model->find(o1)->strides == std::vector<std::int64_t>{40, 1});
      CHECK(model->report().converted_tensors == 1);
    }
}

TEST_CASE("destinations a row pitch apart that share a byte, or whose pitch cannot hold a row, are refused",
          "[scheduler][destinations]") {
  Llama m;
  make_model(m);
  auto catalog = open_source(m.dir.path().string());
  REQUIRE(catalog);
  const std::string o0 = "model.layers.0.self_attn.o_proj.weight", down = "model.layers.0.mlp.down_proj.weight",
                    norm = "model.norm.weight";
  Pitched memory(32 * 200 + 4096);
  const auto refused = [&](const PlanOptions& options, std::string_view tensor, std::string_view words) {
    auto plan = make_plan(*catalog, options);
    REQUIRE_FALSE(plan);
    INFO(plan.error().to_string());
    CHECK(plan.error().code() == Errc::kInvalidArgument);
    CHECK(plan.error().to_string().find(tensor) != std::string::npos);
    CHECK(plan.error().to_string().find(words) != std::string::npos);
  };
  // o0's 16 columns at column 4 and down's 64 at column 20 of 92-column rows: side by side.
  const std::uint64_t pitch = 92 * 2;
  PlanOptions o;
  o.destinations[o0] = {.address = memory.address(8),
                        .bytes = 32 * 16 * 2,
                        .row_pitch = pitch,
                        .dtype = DType::kBF16,
                        .region = TensorRegion{.dim = 1, .begin = 8, .end = 24}};
  o.destinations[down] = {
      .address = memory.address(40), .bytes = 32 * 64 * 2, .row_pitch = pitch, .dtype = DType::kBF16};
  CHECK(make_plan(*catalog, o));
  // A packed part (24 bytes of the norm) after the last row's columns, and one filling the gap
  // between row 3's last column and row 4's first exactly; two bytes later, it takes row 4's
  // first o0 element.
  o.destinations[norm] = {.address = memory.address(31 * pitch + 168),
                          .bytes = 12 * 2,
                          .dtype = DType::kBF16,
                          .region = TensorRegion{.dim = 0, .begin = 0, .end = 12}};
  CHECK(make_plan(*catalog, o));
  o.destinations[norm].address = memory.address(3 * pitch + 168);
  CHECK(make_plan(*catalog, o));
  o.destinations[norm].address = memory.address(3 * pitch + 170);
  refused(o, "overlaps", norm);
  o.destinations.erase(norm);
  // down one column to the left: its first column is o0's last in every row.
  o.destinations[down].address = memory.address(38);
  refused(o, "overlaps", o0);
  o.destinations[down].address = memory.address(40);
  o.destinations[down].row_pitch = 64 * 2 - 2;
  refused(o, down, "would overlap");
  o.destinations[down].row_pitch = pitch + 1;
  refused(o, down, "whole number");
  // Nothing was written by a plan, accepted or refused.
  CHECK(memory.bytes == memory.want);
}
