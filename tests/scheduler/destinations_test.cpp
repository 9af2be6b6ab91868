// Caller-owned destinations (PlanOptions::destinations, load_into): each tensor, region or fused
// part lands in memory the caller allocated, byte for byte (or converted), nothing is written
// around it, nothing else is allocated for it, and destinations the load cannot honour are
// refused at plan time, before any byte is read, naming the tensor.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/safetensors_writer.hpp"
#include "qload/scheduler/load.hpp"
#include "support/llama_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

constexpr std::byte kGuard{0xAB};
constexpr std::size_t kGuardBytes = 64;

// The caller's memory: one allocation holding every destination, each with guard bytes before
// and after it, as separately allocated parameters would be surrounded by someone else's bytes.
struct CallerMemory {
  std::vector<std::byte> bytes;
  std::map<std::string, std::pair<std::size_t, std::size_t>> at;  // name -> offset, size

  std::byte* slot(const std::string& name) { return bytes.data() + at.at(name).first; }
  // Whether every byte outside the destinations still holds the guard.
  bool guards_intact() const {
    std::vector<bool> inside(bytes.size(), false);
    for (const auto& [name, where] : at)
      for (std::size_t i = 0; i < where.second; ++i) inside[where.first + i] = true;
    for (std::size_t i = 0; i < bytes.size(); ++i)
      if (!inside[i] && bytes[i] != kGuard) return false;
    return true;
  }
};

// Room for each named size, 64-byte aligned, guards between.
CallerMemory lay_out(const std::map<std::string, std::size_t>& sizes) {
  CallerMemory m;
  std::size_t cursor = kGuardBytes;
  for (const auto& [name, size] : sizes) {
    m.at[name] = {cursor, size};
    cursor = (cursor + size + kGuardBytes + 63) / 64 * 64;
  }
  m.bytes.assign(cursor + kGuardBytes + 64, kGuard);
  // Offsets relative to a 64-byte-aligned start inside the vector.
  const auto misalign = reinterpret_cast<std::uintptr_t>(m.bytes.data()) % 64;
  const std::size_t shift = misalign == 0 ? 0 : 64 - misalign;
  for (auto& [name, where] : m.at) where.first += shift;
  return m;
}

Destination into(CallerMemory& memory, const std::string& slot, DType dtype, std::size_t offset = 0) {
  const auto [at, size] = memory.at.at(slot);
  return Destination{.address = reinterpret_cast<std::uintptr_t>(memory.bytes.data() + at + offset),
                     .bytes = size - offset,
                     .dtype = dtype};
}

std::size_t bf16_bytes(const Llama& m, const std::string& name) {
  return m.values.at(name).size() * 2;
}

LoadOptions small_chunks(std::uint64_t direct) {
  LoadOptions o;
  o.plan.chunk_bytes = o.staging.slot_bytes = 4096;  // tensors span chunks
  o.staging.total_bytes = 8 * 4096;
  o.plan.direct_min_bytes = direct;
  o.digests = LoadOptions::Digests::kOn;  // the digests of what lands in the caller's memory are checked too
  return o;
}

// The stored bf16 values of `name`, as bf16 bytes or converted to f32.
std::vector<std::byte> expected_bytes(const Llama& m, const std::string& name, bool f32) {
  const std::vector<std::uint16_t>& v = m.values.at(name);
  std::vector<std::byte> out(v.size() * (f32 ? 4 : 2));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (f32) {
      const float x = as_float(v[i]);
      std::memcpy(out.data() + 4 * i, &x, 4);
    } else {
      std::memcpy(out.data() + 2 * i, &v[i], 2);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("destinations: every tensor lands in the caller's memory, converted where asked, nothing around it written",
          "[scheduler][destinations]") {
  Llama m;
  make_model(m);
  // Direct reads straight into the destinations, and staged reads copied in.
  for (const std::uint64_t direct : {std::uint64_t{0}, std::uint64_t{512}}) {
    INFO("direct from " << direct);
    std::map<std::string, std::size_t> sizes;
    for (const auto& [name, v] : m.values) sizes[name] = v.size() * (name.find("norm") != std::string::npos ? 4 : 2);
    CallerMemory memory = lay_out(sizes);
    LoadOptions o = small_chunks(direct);
    for (const auto& [name, size] : sizes)
      o.plan.destinations[name] =
          into(memory, name, name.find("norm") != std::string::npos ? DType::kF32 : DType::kBF16);
    o.plan.destinations_only = true;
    auto model = load_source(m.dir.path().string(), o);
    if (!model) FAIL(model.error().to_string());
    for (const auto& [name, size] : sizes) {
      INFO(name);
      const std::vector<std::byte> want = expected_bytes(m, name, name.find("norm") != std::string::npos);
      REQUIRE(want.size() == size);
      CHECK(std::memcmp(memory.slot(name), want.data(), size) == 0);
      const DeviceTensor* t = model->find(name);
      REQUIRE(t != nullptr);
      CHECK(t->caller_owned);
      CHECK(t->data == memory.slot(name));
    }
    CHECK(memory.guards_intact());
    CHECK(model->report().tensors == m.values.size());
    CHECK(model->report().converted_tensors == 3);  // two input norms and the final norm
    CHECK(model->report().digests.size() == m.values.size());
    if (direct != 0) CHECK(model->report().direct_tensors > 0);
  }
}

TEST_CASE(
    "destinations: fused q/k/v and gate/up parts go at offsets of one parameter; regions keep their rows or "
    "columns; the rest loads into arenas or is skipped",
    "[scheduler][destinations]") {
  Llama m;
  make_model(m);
  const std::string q = "model.layers.0.self_attn.q_proj.weight", k = "model.layers.0.self_attn.k_proj.weight",
                    v = "model.layers.0.self_attn.v_proj.weight", o_proj = "model.layers.0.self_attn.o_proj.weight",
                    embed = "model.embed_tokens.weight";
  const std::size_t qkv = bf16_bytes(m, q) + bf16_bytes(m, k) + bf16_bytes(m, v);
  // o_proj columns [8, 24) (a row-parallel rank's part), embeddings rows [16, 48).
  CallerMemory memory = lay_out({{"qkv", qkv}, {"o_cols", kHidden * 16 * 2}, {"embed_rows", 32 * kHidden * 2}});
  for (const bool only : {true, false}) {
    INFO((only ? "destinations only" : "the rest in arenas"));
    std::ranges::fill(memory.bytes, kGuard);
    LoadOptions opts = small_chunks(256);
    opts.plan.destinations[q] = into(memory, "qkv", DType::kBF16);
    opts.plan.destinations[q].bytes = bf16_bytes(m, q);
    opts.plan.destinations[k] = into(memory, "qkv", DType::kBF16, bf16_bytes(m, q));
    opts.plan.destinations[k].bytes = bf16_bytes(m, k);
    opts.plan.destinations[v] = into(memory, "qkv", DType::kBF16, bf16_bytes(m, q) + bf16_bytes(m, k));
    opts.plan.destinations[o_proj] = into(memory, "o_cols", DType::kBF16);
    opts.plan.destinations[o_proj].region = TensorRegion{.dim = 1, .begin = 8, .end = 24};
    opts.plan.destinations[embed] = into(memory, "embed_rows", DType::kBF16);
    opts.plan.destinations[embed].region = TensorRegion{.dim = 0, .begin = 16, .end = 48};
    opts.plan.destinations_only = only;
    auto model = load_source(m.dir.path().string(), opts);
    if (!model) FAIL(model.error().to_string());
    std::vector<std::byte> fused;
    for (const std::string& name : {q, k, v}) {
      const std::vector<std::byte> part = expected_bytes(m, name, false);
      fused.insert(fused.end(), part.begin(), part.end());
    }
    CHECK(std::memcmp(memory.slot("qkv"), fused.data(), qkv) == 0);
    for (std::uint64_t r = 0; r < kHidden; ++r)
      for (std::uint64_t c = 8; c < 24; ++c) {
        std::uint16_t got;
        std::memcpy(&got, memory.slot("o_cols") + (r * 16 + c - 8) * 2, 2);
        REQUIRE(got == stored(m, o_proj, r, c));
      }
    for (std::uint64_t r = 16; r < 48; ++r)
      for (std::uint64_t c = 0; c < kHidden; ++c) {
        std::uint16_t got;
        std::memcpy(&got, memory.slot("embed_rows") + ((r - 16) * kHidden + c) * 2, 2);
        REQUIRE(got == stored(m, embed, r, c));
      }
    CHECK(memory.guards_intact());
    const DeviceTensor* region = model->find(o_proj);
    REQUIRE(region != nullptr);
    CHECK(region->shape == Shape{kHidden, 16});
    CHECK(region->caller_owned);
    if (only) {
      CHECK(model->size() == 5);
      CHECK(model->find("lm_head.weight") == nullptr);
      // Only the destinations' bytes were read (regions in part), at most a gap more per chunk.
      CHECK(model->report().tensor_bytes < bf16_bytes(m, embed) + bf16_bytes(m, o_proj) + qkv);
    } else {
      CHECK(model->size() == m.values.size());
      const DeviceTensor* head = model->find("lm_head.weight");
      REQUIRE(head != nullptr);
      CHECK_FALSE(head->caller_owned);
      CHECK(std::memcmp(head->data, expected_bytes(m, "lm_head.weight", false).data(), head->nbytes) == 0);
    }
  }
}

TEST_CASE("destinations the load cannot honour are refused at plan time, naming the tensor",
          "[scheduler][destinations]") {
  Llama m;
  make_model(m);
  auto catalog = open_source(m.dir.path().string());
  REQUIRE(catalog);
  const std::string norm = "model.norm.weight", head = "lm_head.weight";
  CallerMemory memory = lay_out({{"a", 4096}, {"b", 4096}});
  const auto refused = [&](PlanOptions options, Errc code, std::string_view tensor, std::string_view words) {
    auto plan = make_plan(*catalog, options);
    REQUIRE_FALSE(plan);
    INFO(plan.error().to_string());
    CHECK(plan.error().code() == code);
    CHECK(plan.error().to_string().find(tensor) != std::string::npos);
    CHECK(plan.error().to_string().find(words) != std::string::npos);
  };
  const auto sized = [&](const std::string& slot, DType dtype, std::size_t bytes, std::size_t offset = 0) {
    Destination d = into(memory, slot, dtype, offset);
    d.bytes = bytes;
    return d;
  };
  PlanOptions o;
  o.destinations["model.nope.weight"] = sized("a", DType::kBF16, 64);
  refused(o, Errc::kNotFound, "model.nope.weight", "does not have");
  o = {};
  o.destinations[norm] = sized("a", DType::kBF16, kHidden * 2 + 2);
  refused(o, Errc::kInvalidArgument, norm, "holds 66 bytes");
  o.destinations[norm] = sized("a", DType::kI32, kHidden * 4);
  refused(o, Errc::kInvalidArgument, norm, "convert");
  o.destinations[norm] = sized("a", DType::kF32, kHidden * 4, 2);
  refused(o, Errc::kInvalidArgument, norm, "not aligned");
  o.destinations[norm] = sized("a", DType::kBF16, kHidden * 2);
  o.destinations[head] = sized("a", DType::kBF16, kVocab * kHidden * 2, 32);
  refused(o, Errc::kInvalidArgument, "overlaps", norm);
  o.destinations.erase(head);
  o.destinations[norm].region = TensorRegion{.dim = 0, .begin = 0, .end = kHidden + 1};
  refused(o, Errc::kInvalidArgument, norm, "");
  o.destinations[norm].region.reset();
  o.mode = LoadMode::kMmap;
  refused(o, Errc::kUnsupported, "", "read mode");
  o.mode = LoadMode::kRead;
  o.devices = {Device{}, Device{.index = 1}};
  o.parallel.tensor = 2;
  refused(o, Errc::kUnsupported, "", "parallel layout");
  // A plan that fails writes nothing: the caller's memory still holds the guard everywhere.
  CHECK(std::ranges::all_of(memory.bytes, [](std::byte b) { return b == kGuard; }));
  // Two destinations that touch but do not overlap are fine.
  o = {};
  o.destinations[norm] = sized("a", DType::kBF16, kHidden * 2);
  o.destinations["model.layers.0.input_layernorm.weight"] = sized("a", DType::kBF16, kHidden * 2, kHidden * 2);
  CHECK(make_plan(*catalog, o));
}

TEST_CASE("destinations: rows in the caller's order (a RoPE-style interleave, repeats, none) land one after another",
          "[scheduler][destinations]") {
  Llama m;
  make_model(m);
  const std::string q = "model.layers.0.self_attn.q_proj.weight", k = "model.layers.0.self_attn.k_proj.weight";
  const std::uint64_t row = kHidden * 2;
  // q: FMS's hf-to-fms RoPE order within each head (row h*hd + 2j + c <- h*hd + c*hd/2 + j);
  // k: rows 7, 0..3, 7 again and nothing of [4, 7).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> q_rows;
  std::vector<std::uint64_t> q_order;
  for (std::uint64_t h = 0; h < kHeads; ++h)
    for (std::uint64_t j = 0; j < kHd / 2; ++j)
      for (std::uint64_t c = 0; c < 2; ++c) {
        const std::uint64_t r = h * kHd + c * kHd / 2 + j;
        q_rows.emplace_back(r, r + 1);
        q_order.push_back(r);
      }
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> k_rows = {{7, 8}, {0, 4}, {7, 8}};
  const std::vector<std::uint64_t> k_order = {7, 0, 1, 2, 3, 7};
  CallerMemory memory = lay_out({{"q", q_order.size() * row}, {"k", k_order.size() * row * 2}});
  for (const bool convert : {false, true})
    for (const std::uint64_t direct : {std::uint64_t{0}, std::uint64_t{64}}) {
      INFO((convert ? "f32" : "bf16") << ", direct from " << direct);
      std::ranges::fill(memory.bytes, kGuard);
      LoadOptions o = small_chunks(direct);
      o.plan.destinations[q] = into(memory, "q", DType::kBF16);
      o.plan.destinations[q].rows = q_rows;
      o.plan.destinations[k] = into(memory, "k", convert ? DType::kF32 : DType::kBF16);
      o.plan.destinations[k].rows = k_rows;
      if (!convert) o.plan.destinations[k].bytes /= 2;
      o.plan.destinations_only = true;
      auto model = load_source(m.dir.path().string(), o);
      if (!model) FAIL(model.error().to_string());
      for (std::size_t i = 0; i < q_order.size(); ++i)
        for (std::uint64_t c = 0; c < kHidden; ++c) {
          std::uint16_t got;
          std::memcpy(&got, memory.slot("q") + (i * kHidden + c) * 2, 2);
          REQUIRE(got == stored(m, q, q_order[i], c));
        }
      for (std::size_t i = 0; i < k_order.size(); ++i)
        for (std::uint64_t c = 0; c < kHidden; ++c) {
          const std::byte* at = memory.slot("k") + (i * kHidden + c) * (convert ? 4 : 2);
          if (convert) {
            float got;
            std::memcpy(&got, at, 4);
            REQUIRE(got == as_float(stored(m, k, k_order[i], c)));
          } else {
            std::uint16_t got;
            std::memcpy(&got, at, 2);
            REQUIRE(got == stored(m, k, k_order[i], c));
          }
        }
      // The unconverted k destination is half the slot: the rest keeps its guard.
      const std::size_t used = k_order.size() * row * (convert ? 2 : 1);
      memory.at["k"].second = used;
      CHECK(memory.guards_intact());
      memory.at["k"].second = k_order.size() * row * 2;
      CHECK(model->find(q)->shape == Shape{q_order.size(), kHidden});
    }
  // Rows out of bounds, or rows and a region together, are refused naming the tensor.
  auto catalog = open_source(m.dir.path().string());
  REQUIRE(catalog);
  PlanOptions o;
  o.destinations[k] = into(memory, "k", DType::kBF16);
  o.destinations[k].bytes = row;
  o.destinations[k].rows = {{8, 9}};
  auto plan = make_plan(*catalog, o);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().to_string().find("out of bounds") != std::string::npos);
  o.destinations[k].rows = {{0, 1}};
  o.destinations[k].region = TensorRegion{.dim = 0, .begin = 0, .end = 1};
  plan = make_plan(*catalog, o);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().to_string().find(k) != std::string::npos);
}

TEST_CASE(
    "destinations: a permutation of every row is read straight into place, hashed in file order, then "
    "permuted there",
    "[scheduler][destinations]") {
  ScratchDir dir;
  constexpr std::uint64_t kRows = 96, kCols = 128;  // 512-byte rows
  std::vector<float> values(kRows * kCols);
  std::mt19937 rng(3);
  for (float& v : values) v = static_cast<float>(rng() % 100000) / 7.0f;
  const std::vector<formats::WriterTensor> tensors = {
      {.name = "w", .dtype = DType::kF32, .shape = Shape{kRows, kCols}, .bytes = std::as_bytes(std::span(values))}};
  REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), tensors));
  // Cycles of every length: rows reversed in the first half, rotated by 5 in the second, row
  // 95 left where it is.
  std::vector<std::uint64_t> source;
  for (std::uint64_t j = 0; j < 48; ++j) source.push_back(47 - j);
  for (std::uint64_t j = 48; j < 95; ++j) source.push_back(48 + (j - 48 + 5) % 47);
  source.push_back(95);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rows;
  for (const std::uint64_t r : source) rows.emplace_back(r, r + 1);
  LoadOptions hashed;
  hashed.digests = LoadOptions::Digests::kOn;
  auto whole = load_source(dir.path().string(), hashed);
  REQUIRE(whole);
  for (const bool streamed : {false, true}) {
    INFO((streamed ? "streamed" : "not streamed"));
    std::vector<float> dest(kRows * kCols + 32, -1.0f);  // 16 guard floats each side
    LoadOptions o = hashed;
    o.plan.direct_min_bytes = 4096;
    o.plan.chunk_bytes = o.staging.slot_bytes = 8192;  // several direct reads, hashed as a stream
    o.staging.total_bytes = 4 * 8192;
    o.plan.destinations["w"] = {.address = reinterpret_cast<std::uintptr_t>(dest.data() + 16),
                                .bytes = kRows * kCols * 4,
                                .dtype = DType::kF32,
                                .rows = rows};
    std::vector<float> handed;
    LoadContext context;
    if (streamed)
      context.on_tensor = [&](std::uint32_t, const DeviceTensor& t, const std::shared_ptr<const void>&) -> Status {
        handed.assign(reinterpret_cast<const float*>(t.data), reinterpret_cast<const float*>(t.data) + kRows * kCols);
        return {};
      };
    auto model = load_source(dir.path().string(), o, context);
    if (!model) FAIL(model.error().to_string());
    CHECK(model->report().direct_tensors == 1);
    CHECK(model->report().digests.at(0).xxh3_64 == whole->report().digests.at(0).xxh3_64);
    for (std::uint64_t j = 0; j < kRows; ++j)
      REQUIRE(std::memcmp(dest.data() + 16 + j * kCols, values.data() + source[j] * kCols, kCols * 4) == 0);
    for (std::size_t g = 0; g < 16; ++g) CHECK((dest[g] == -1.0f && dest[16 + kRows * kCols + g] == -1.0f));
    if (streamed) CHECK(std::memcmp(handed.data(), dest.data() + 16, kRows * kCols * 4) == 0);  // after the move
  }
}
