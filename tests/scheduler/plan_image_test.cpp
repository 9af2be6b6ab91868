// The host file-image layout (PlanOptions::host_layout): tensors kept as stored lie congruent
// to their file offsets modulo 4 KiB, spans of them are read whole into place in aligned reads,
// and a read's rounding writes only padding: never a byte of another tensor, nor a byte of one
// of its own tensors at a place other than that byte's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "qload/scheduler/plan.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// Where a direct chunk's read lands in its arena: [first, second).
std::pair<std::uint64_t, std::uint64_t> landing(const Plan& plan, const ReadChunk& c) {
  const ChunkPiece& p = c.pieces.front();
  const std::uint64_t at = plan.layout.tensors[p.tensor].offset + p.tensor_offset - p.chunk_offset;
  return {at, at + c.bytes};
}

// Every byte a direct read writes is padding, or the very byte of the file that a tensor
// placed there holds; no two reads write the same arena byte; reads stay inside the arena.
void check_reads_write_only_their_bytes(const formats::Catalog& catalog, const Plan& plan) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> written;
  for (const ReadChunk& c : plan.reads.chunks) {
    if (!c.direct) continue;
    const TensorPlacement& front = plan.layout.tensors[c.pieces.front().tensor];
    if (front.shard_count > 0) continue;  // sharded direct reads: parallel_test
    const auto [begin, end] = landing(plan, c);
    INFO("read of " << c.bytes << " bytes at file offset " << c.file_offset << " lands at " << begin);
    REQUIRE(end <= plan.layout.arenas[front.region].bytes);
    written.emplace_back(begin, end);
    for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
      const TensorPlacement& p = plan.layout.tensors[i];
      const formats::TensorEntry& t = catalog.tensors[i];
      if (p.region != front.region || p.shard_count > 0 || p.bytes == 0) continue;
      if (p.offset >= end || p.offset + p.bytes <= begin) continue;
      INFO("overlaps tensor " << t.name << " at " << p.offset);
      // The read puts file byte c.file_offset + k at begin + k; the tensor holds file byte
      // t.offset + k at p.offset + k: the same bytes only if the two maps agree.
      CHECK(t.file == c.file);
      CHECK(p.dtype == t.dtype);
      CHECK(p.offset + c.file_offset == begin + t.offset);
    }
  }
  std::ranges::sort(written);
  for (std::size_t i = 1; i < written.size(); ++i) CHECK(written[i - 1].second <= written[i].first);
}

}  // namespace

TEST_CASE("plan: file-image arenas keep each tensor at its file offset modulo 4 KiB and read spans whole, aligned",
          "[scheduler][plan]") {
  for (std::uint64_t seed = 1; seed <= 80; ++seed) {
    SyntheticCheckpoint ckpt;
    make_synthetic(ckpt, seed, {.large_bytes = 300000});
    if (seed % 3 == 0) mix_float_dtypes(ckpt);
    std::mt19937_64 rng(seed);
    PlanOptions options;
    options.chunk_bytes = seed % 2 ? (1 + rng() % 64) * 4096 : 1 + rng() % 200000;
    options.max_gap_bytes = rng() % 100000;
    options.read_alignment = rng() % 4 ? 4096 : 1;
    if (seed % 3 == 0) options.dtype = DType::kF32;  // converted tensors are placed aligned, between spans
    auto plan = make_plan(ckpt.catalog, options);
    INFO("seed " << seed << ": " << (plan ? "" : plan.error().to_string()));
    REQUIRE(plan);
    std::uint32_t images = 0;
    for (std::uint32_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
      const TensorPlacement& p = plan->layout.tensors[i];
      const formats::TensorEntry& t = ckpt.catalog.tensors[i];
      if (!p.image) continue;
      ++images;
      CHECK(p.direct);
      CHECK(p.offset % kFileImageAlignment == t.offset % kFileImageAlignment);
    }
    // A stored tensor at an offset its element allows, kept in its dtype, is always an image.
    for (std::uint32_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
      const formats::TensorEntry& t = ckpt.catalog.tensors[i];
      const std::uint64_t element = dtype_info(t.dtype).block_bytes;
      if (t.nbytes > 0 && t.offset % element == 0 && plan->layout.tensors[i].dtype == t.dtype)
        CHECK(plan->layout.tensors[i].image);
    }
    // Every tensor byte is read exactly once, each tensor's pieces in order.
    std::vector<std::uint64_t> covered(ckpt.catalog.tensors.size(), 0);
    for (const ReadChunk& c : plan->reads.chunks) {
      REQUIRE(!c.pieces.empty());
      CHECK(c.bytes <= options.chunk_bytes);
      CHECK(c.file_offset + c.bytes <= ckpt.catalog.files[c.file].size);
      const bool span = c.direct && plan->layout.tensors[c.pieces.front().tensor].image;
      // A span's reads start on an aligned offset (unless the alignment is off); only the
      // last one of a file may end short of a block.
      if (span && options.read_alignment == 4096 && options.chunk_bytes % 4096 == 0) {
        CHECK(c.file_offset % 4096 == 0);
        if (c.file_offset + c.bytes != ckpt.catalog.files[c.file].size) CHECK((c.file_offset + c.bytes) % 4096 == 0);
      }
      for (const ChunkPiece& p : c.pieces) {
        CHECK(c.file_offset + p.chunk_offset == ckpt.catalog.tensors[p.tensor].offset + p.tensor_offset);
        CHECK(p.tensor_offset == covered[p.tensor]);
        covered[p.tensor] += p.bytes;
        CHECK(plan->layout.tensors[p.tensor].image == span);
      }
    }
    for (std::uint32_t i = 0; i < ckpt.catalog.tensors.size(); ++i) CHECK(covered[i] == ckpt.catalog.tensors[i].nbytes);
    check_reads_write_only_their_bytes(ckpt.catalog, *plan);
    if (seed % 3 != 0) CHECK(images > 0);  // (a dtype policy may convert every tensor)
  }
}

TEST_CASE("plan: a file's neighbouring tensors are one span: one aligned read per chunk, gaps read through",
          "[scheduler][plan]") {
  formats::Catalog catalog;
  catalog.files.push_back(formats::CatalogFile{.path = "/nonexistent/a", .size = 200000});
  const auto tensor = [](std::string name, std::uint64_t offset, std::uint64_t bytes) {
    return formats::TensorEntry{
        .name = std::move(name), .file = 0, .offset = offset, .nbytes = bytes, .dtype = DType::kU8, .shape = {bytes}};
  };
  catalog.tensors = {tensor("a", 100, 5000), tensor("b", 5100, 20000), tensor("c", 25100 + 1000, 3000),
                     tensor("far", 150000, 1000)};  // c after a 1000-byte gap; far after a wide one
  catalog.index_names();
  PlanOptions options{.chunk_bytes = 16384, .max_gap_bytes = 4096};
  auto plan = make_plan(catalog, options);
  REQUIRE(plan);
  const std::vector<TensorPlacement>& p = plan->layout.tensors;
  CHECK(p[0].offset == 100);  // the arena's first block: its head is free for the rounded read
  CHECK(p[1].offset == 5100);
  CHECK(p[2].offset == 26100);  // the gap keeps its place
  CHECK((p[0].starts_span && !p[1].starts_span && !p[2].starts_span && p[3].starts_span));
  CHECK(p[3].offset % 4096 == 150000 % 4096);
  CHECK(p[3].offset >= 32768);  // a new span starts on a fresh block after the last one's rounded end
  REQUIRE(plan->reads.chunks.size() == 3);
  CHECK(plan->reads.chunks[0].file_offset == 0);  // 100 rounded down
  CHECK(plan->reads.chunks[0].bytes == 16384);
  CHECK(plan->reads.chunks[1].file_offset == 16384);
  CHECK(plan->reads.chunks[1].bytes == 32768 - 16384);  // 29100 rounded up
  CHECK(plan->reads.chunks[2].file_offset == 147456);
  CHECK(plan->reads.chunks[2].bytes == 4096);
  CHECK(plan->reads.chunks[0].pieces.size() == 2);  // a, and b's head
  CHECK(plan->reads.chunks[1].pieces.size() == 2);  // b's tail, c
  CHECK(plan->layout.arenas[0].bytes % 4096 == 0);

  options.host_layout = HostLayout::kAligned;  // the other layout: 256-byte offsets, staged small tensors
  plan = make_plan(catalog, options);
  REQUIRE(plan);
  CHECK(plan->layout.tensors[1].offset == 5120);
  CHECK(plan->reads.direct_tensors == 0);
}

TEST_CASE("plan: a tensor off its element's alignment, or converted, is placed aligned and ends the span",
          "[scheduler][plan]") {
  formats::Catalog catalog;
  catalog.files.push_back(formats::CatalogFile{.path = "/nonexistent/a", .size = 100000});
  catalog.tensors = {
      formats::TensorEntry{.name = "a", .offset = 8, .nbytes = 4000, .dtype = DType::kF32, .shape = {1000}},
      formats::TensorEntry{.name = "odd", .offset = 4010, .nbytes = 4000, .dtype = DType::kF32, .shape = {1000}},
      formats::TensorEntry{.name = "b", .offset = 8016, .nbytes = 4000, .dtype = DType::kF32, .shape = {1000}}};
  catalog.index_names();
  auto plan = make_plan(catalog, PlanOptions{});
  REQUIRE(plan);
  const std::vector<TensorPlacement>& p = plan->layout.tensors;
  CHECK(p[0].image);
  CHECK(!p[1].image);
  CHECK(p[1].offset % 256 == 0);
  CHECK(p[1].offset >= 4096);  // after a's span, rounded to its block
  CHECK(p[2].image);
  CHECK(p[2].starts_span);
  CHECK(p[2].offset % 4096 == 8016 % 4096);
  check_reads_write_only_their_bytes(catalog, *plan);
}
