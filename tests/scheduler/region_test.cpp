// Tensor regions (PlanOptions::region): a load asks for rows or columns of some tensors, as a
// server that cuts each tensor itself does (vLLM's weight loaders under tensor parallelism).
// Each region holds exactly the reference's elements, every other tensor is whole, only the
// regions' bytes are read unless whole_tensor_reads, and regions the load cannot honour are
// refused before anything is read, naming the tensor.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>

#include <fmt/format.h>

#include "qload/scheduler/load.hpp"
#include "support/llama_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// Empty if `t` holds rows [r0, r1) x columns [c0, c1) of tensor `name` (bf16, or converted to
// f32), else what differs.
std::string region_mismatch(const Llama& m, const std::string& name, const DeviceTensor& t, std::uint64_t r0,
                            std::uint64_t r1, std::uint64_t c0, std::uint64_t c1, bool convert) {
  const Shape& whole = m.shapes.at(name);
  const std::uint64_t width = c1 - c0;
  const Shape want = whole.rank() == 1 ? Shape{r1 - r0} : Shape{r1 - r0, width};
  if (t.shape != want) return fmt::format("shape {}, expected {}", t.shape.to_string(), want.to_string());
  if (t.dtype != (convert ? DType::kF32 : DType::kBF16)) return "dtype";
  // Element (i, j) by the tensor's strides: a mapped column region is a view with the stored
  // tensor's row stride.
  const std::uint64_t row_stride = t.shape.rank() == 2 ? static_cast<std::uint64_t>(t.strides.at(0)) : 1;
  if (t.shape.rank() == 2 && t.strides.at(1) != 1) return "column stride";
  for (std::uint64_t i = 0; i < r1 - r0; ++i)
    for (std::uint64_t j = 0; j < width; ++j) {
      const std::uint16_t expected = stored(m, name, r0 + i, c0 + j);
      const std::uint64_t at = i * row_stride + j;
      if (convert) {
        float got;
        std::memcpy(&got, t.data + at * 4, 4);
        if (got != as_float(expected)) return fmt::format("element ({}, {}) differs", i, j);
      } else {
        std::uint16_t got;
        std::memcpy(&got, t.data + at * 2, 2);
        if (got != expected) return fmt::format("element ({}, {}) differs", i, j);
      }
    }
  return {};
}

struct Cut {
  std::uint32_t dim;
  std::uint64_t begin, end;
};

// What vLLM's rank 1 of 2 keeps of the first layer (and of the embeddings, unevenly, as its
// vocabulary padding does), plus a 1-D region.
const std::map<std::string, Cut> kCuts = {
    {"model.embed_tokens.weight", {0, 40, 64}},
    {"model.layers.0.self_attn.q_proj.weight", {0, 16, 32}},
    {"model.layers.0.self_attn.q_proj.bias", {0, 16, 32}},
    {"model.layers.0.self_attn.k_proj.weight", {0, 4, 8}},
    {"model.layers.0.self_attn.o_proj.weight", {1, 16, 32}},
    {"model.layers.0.mlp.down_proj.weight", {1, 5, 37}},  // any columns, not only a rank's
    {"model.layers.1.mlp.down_proj.weight", {1, 9, 9}},   // none: an empty tensor, nothing read
    {"model.norm.weight", {0, 32, 32}},
};

LoadOptions small_chunks(std::uint64_t direct) {
  LoadOptions o;
  o.plan.chunk_bytes = o.staging.slot_bytes = 4096;  // tensors span chunks
  o.staging.total_bytes = 8 * 4096;
  o.plan.direct_min_bytes = direct;
  o.plan.max_gap_bytes = 0;  // read nothing but tensor bytes, so that reads can be counted
  o.plan.read_alignment = 1;
  o.digests = LoadOptions::Digests::kOn;  // which tensors get a digest is part of what is checked
  return o;
}

void ask(LoadOptions& o, const std::map<std::string, Cut>& cuts) {
  o.plan.region = [cuts](std::string_view name) -> Result<std::optional<TensorRegion>> {
    const auto it = cuts.find(std::string(name));
    if (it == cuts.end()) return std::nullopt;
    return TensorRegion{.dim = it->second.dim, .begin = it->second.begin, .end = it->second.end};
  };
}

// Every tensor of `model` holds what kCuts asks of it (the whole tensor when nothing).
void check_cuts(const Llama& m, const Model& model, bool convert) {
  for (const auto& [name, shape] : m.shapes) {
    INFO(name);
    const DeviceTensor* t = model.find(name);
    REQUIRE(t != nullptr);
    const std::uint64_t rows = shape[0], cols = shape.rank() == 2 ? shape[1] : 1;
    const auto cut = kCuts.find(name);
    if (cut == kCuts.end()) {
      CHECK(region_mismatch(m, name, *t, 0, rows, 0, cols, convert).empty());
    } else if (cut->second.dim == 0) {
      CHECK(region_mismatch(m, name, *t, cut->second.begin, cut->second.end, 0, cols, convert).empty());
    } else {
      CHECK(region_mismatch(m, name, *t, 0, rows, cut->second.begin, cut->second.end, convert).empty());
    }
  }
}

// A tensor read in part has no digest, unless whole reads were asked for; every digest is the
// whole load's.
void check_digests(const Llama& m, const Model& model, const Model& whole, bool whole_reads) {
  std::map<std::string, std::uint64_t> digests;
  for (const TensorDigest& d : whole.report().digests) digests[d.name] = d.xxh3_64;
  std::size_t checked = 0;
  for (const TensorDigest& d : model.report().digests) {
    CHECK(d.xxh3_64 == digests.at(d.name));
    if (!whole_reads) CHECK_FALSE(kCuts.contains(d.name));
    ++checked;
  }
  CHECK(checked == (whole_reads ? m.shapes.size() : m.shapes.size() - kCuts.size()));
}

}  // namespace

TEST_CASE("regions: each asked tensor holds exactly its rows or columns, the others are whole",
          "[scheduler][regions]") {
  Llama m;
  make_model(m);
  auto whole = load_source(m.dir.path().string(), small_chunks(0));
  if (!whole) FAIL(whole.error().to_string());
  for (const bool convert : {false, true})
    for (const std::uint64_t direct : {std::uint64_t{0}, std::uint64_t{512}})
      for (const bool whole_reads : {false, true}) {
        INFO((convert ? "f32" : "bf16") << ", direct from " << direct << (whole_reads ? ", whole reads" : ""));
        LoadOptions o = small_chunks(direct);
        if (convert) o.plan.dtype = DType::kF32;
        o.plan.whole_tensor_reads = whole_reads;
        ask(o, kCuts);
        auto model = load_source(m.dir.path().string(), o);
        if (!model) FAIL(model.error().to_string());
        CHECK(model->tensors().size() == m.shapes.size());
        check_cuts(m, *model, convert);
        // Only the regions' bytes are read, unless digests need whole tensors.
        // Exactly (no gaps read, no alignment): a row region's rows, a column region's columns.
        std::uint64_t stored_bytes = 0, region_bytes = 0;
        for (const auto& [name, shape] : m.shapes) {
          stored_bytes += shape.numel().value() * 2;
          const auto cut = kCuts.find(name);
          const std::uint64_t cols = shape.rank() == 2 ? shape[1] : 1;
          if (cut == kCuts.end()) {
            region_bytes += shape.numel().value() * 2;
          } else if (cut->second.dim == 0) {
            region_bytes += (cut->second.end - cut->second.begin) * cols * 2;
          } else {  // each row's columns alone: the bytes between them exceed max_gap_bytes (0)
            region_bytes += shape[0] * (cut->second.end - cut->second.begin) * 2;
          }
        }
        CHECK(model->report().read_bytes == (whole_reads ? stored_bytes : region_bytes));
        CHECK(region_bytes < stored_bytes);
        check_digests(m, *model, *whole, whole_reads);
      }
}

TEST_CASE("regions: mapped, each region is a view of exactly its rows or columns and is not hashed",
          "[scheduler][regions]") {
  Llama m;
  make_model(m);
  auto whole = load_source(m.dir.path().string(), small_chunks(0));
  if (!whole) FAIL(whole.error().to_string());
  for (const bool whole_reads : {false, true}) {
    INFO((whole_reads ? "whole reads" : "regions alone"));
    LoadOptions o = small_chunks(0);
    o.plan.mode = LoadMode::kMmap;
    o.plan.whole_tensor_reads = whole_reads;
    ask(o, kCuts);
    auto model = load_source(m.dir.path().string(), o);
    if (!model) FAIL(model.error().to_string());
    CHECK(model->report().engine == "mmap");
    // The report counts what the views hand out, a region its own elements: the part touched.
    std::uint64_t view_bytes = 0;
    for (const DeviceTensor& t : model->tensors()) {
      CHECK_FALSE(t.writable);
      view_bytes += t.shape.numel().value() * dtype_info(t.dtype).block_bytes;
    }
    CHECK(model->report().tensor_bytes == view_bytes);
    CHECK(model->report().placed_bytes == view_bytes);
    CHECK(view_bytes < whole->report().tensor_bytes);
    CHECK(model->report().read_bytes == 0);
    check_cuts(m, *model, false);
    check_digests(m, *model, *whole, whole_reads);
  }
}

TEST_CASE("regions: rows of a column region closer than the read alignment are read once, as one span",
          "[scheduler][regions]") {
  // o_proj's rows are 64 bytes; its right half leaves 32-byte gaps, over max_gap_bytes (0), so
  // each row's columns are a range of their own. Reads are rounded out to 256 bytes: were each
  // row a read of its own, each would take its 256 bytes, four times the row. Joined where the
  // rounding reads the gap anyway, the region costs no more than the whole tensor.
  Llama m;
  make_model(m);
  LoadOptions o = small_chunks(0);
  o.plan.read_alignment = 256;
  auto whole = load_source(m.dir.path().string(), o);
  if (!whole) FAIL(whole.error().to_string());
  ask(o, {{"model.layers.0.self_attn.o_proj.weight", {1, 16, 32}}});
  auto model = load_source(m.dir.path().string(), o);
  if (!model) FAIL(model.error().to_string());
  CHECK(model->report().read_bytes <= whole->report().read_bytes);
  const DeviceTensor* t = model->find("model.layers.0.self_attn.o_proj.weight");
  REQUIRE(t != nullptr);
  CHECK(region_mismatch(m, t->name, *t, 0, 32, 16, 32, false).empty());
}

TEST_CASE("regions: what cannot be honoured is refused before anything is read, naming the tensor",
          "[scheduler][regions]") {
  Llama m;
  make_model(m);
  const std::string norm = "model.norm.weight", o_proj = "model.layers.0.self_attn.o_proj.weight";
  const auto refused = [&](const LoadOptions& o, Errc code, std::string_view says) {
    auto model = load_source(m.dir.path().string(), o);
    REQUIRE_FALSE(model);
    INFO(model.error().to_string());
    CHECK(model.error().code() == code);
    CHECK(model.error().to_string().find(says) != std::string::npos);
  };
  for (const auto& [name, cut, says] : {
           std::tuple{o_proj, Cut{2, 0, 1}, "only dim 0, or dim 1 of a 2-D tensor"},
           std::tuple{norm, Cut{1, 0, 1}, "only dim 0, or dim 1 of a 2-D tensor"},
           std::tuple{o_proj, Cut{1, 0, 33}, "out of bounds"},
           std::tuple{o_proj, Cut{0, 7, 6}, "out of bounds"},
           std::tuple{o_proj, Cut{0, 33, 33}, "out of bounds"},
       }) {
    INFO(name << " dim " << cut.dim << " [" << cut.begin << ", " << cut.end << ")");
    LoadOptions o = small_chunks(0);
    ask(o, {{name, cut}});
    refused(o, Errc::kInvalidArgument, says);
    refused(o, Errc::kInvalidArgument, name);
  }
  LoadOptions o = small_chunks(0);
  ask(o, {{o_proj, Cut{0, 0, 8}}});
  LoadOptions two = o;
  two.plan.devices = {Device{.kind = Device::Kind::kCpu, .index = 0}, Device{.kind = Device::Kind::kCpu, .index = 1}};
  refused(two, Errc::kUnsupported, "one device");
  LoadOptions mapped = o;
  mapped.plan.mode = LoadMode::kMmap;
  mapped.plan.dtype = DType::kF32;
  refused(mapped, Errc::kInvalidArgument, "mmap mode cannot convert");
  LoadOptions decoded = o;
  decoded.plan.dequantize = DType::kF32;
  refused(decoded, Errc::kUnsupported, "nothing is decoded");
  LoadOptions layout = o;
  layout.plan.parallel.tensor = 2;
  layout.plan.devices = two.plan.devices;
  refused(layout, Errc::kUnsupported, "no parallel layout");
  LoadOptions failing = small_chunks(0);
  failing.plan.region = [](std::string_view) -> Result<std::optional<TensorRegion>> {
    return fail(Errc::kInvalidArgument, "the server's hook failed");
  };
  refused(failing, Errc::kInvalidArgument, "the server's hook failed");
}
