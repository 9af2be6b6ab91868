// Plan arithmetic: aligned arena offsets, exact arena size, chunks that cover every tensor
// byte once in file order within the chunk size, mmap ranges, and overflow rejected.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <map>

#include "qload/scheduler/plan.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

formats::TensorEntry u8_tensor(std::string name, std::uint32_t file, std::uint64_t offset, std::uint64_t nbytes) {
  return formats::TensorEntry{.name = std::move(name),
                              .file = file,
                              .offset = offset,
                              .nbytes = nbytes,
                              .dtype = DType::kU8,
                              .shape = Shape{nbytes}};
}

formats::Catalog one_file_catalog(std::uint64_t file_size, std::vector<formats::TensorEntry> tensors) {
  formats::Catalog c;
  c.files.push_back(formats::CatalogFile{.path = "/nonexistent/model.bin", .size = file_size});
  c.tensors = std::move(tensors);
  return c;
}

// Every tensor byte is carried exactly once, pieces of a tensor in order, chunks in file order.
void check_chunks(const formats::Catalog& catalog, const Plan& plan, const PlanOptions& options) {
  std::map<std::uint32_t, std::uint64_t> covered;  // tensor -> bytes carried so far
  std::pair<std::uint32_t, std::uint64_t> last{0, 0};
  for (const ReadChunk& c : plan.reads.chunks) {
    REQUIRE(!c.pieces.empty());
    CHECK(c.bytes <= options.chunk_bytes);
    CHECK(c.file_offset + c.bytes <= catalog.files[c.file].size);
    // File order of the data (a read may be rounded down before a neighbour's data).
    const std::pair<std::uint32_t, std::uint64_t> data{c.file, c.file_offset + c.pieces.front().chunk_offset};
    CHECK(data >= last);
    last = data;
    if (c.direct && !plan.layout.tensors[c.pieces.front().tensor].image) CHECK(c.pieces.size() == 1);
    for (const ChunkPiece& p : c.pieces) {
      const formats::TensorEntry& t = catalog.tensors[p.tensor];
      CHECK(t.file == c.file);
      CHECK(p.bytes > 0);
      CHECK(p.chunk_offset + p.bytes <= c.bytes);
      CHECK(c.file_offset + p.chunk_offset == t.offset + p.tensor_offset);
      CHECK(p.tensor_offset == covered[p.tensor]);  // in order, no gap, no repeat
      covered[p.tensor] += p.bytes;
      CHECK(c.direct == plan.layout.tensors[p.tensor].direct);
      // A tensor that fits a chunk is never split.
      if (t.nbytes <= options.chunk_bytes && !c.direct) CHECK(p.bytes == t.nbytes);
    }
  }
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) CHECK(covered[i] == catalog.tensors[i].nbytes);
}

}  // namespace

TEST_CASE("plan: tensors sit at aligned, disjoint arena offsets and the arena is exactly as long as needed",
          "[scheduler][plan]") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SyntheticCheckpoint ckpt;
    make_synthetic(ckpt, seed, {.tensors_max = 30});
    PlanOptions options;
    options.host_layout = HostLayout::kAligned;                  // plan_image_test: the file-image layout
    options.tensor_alignment = std::uint64_t{1} << (seed % 13);  // 1 .. 4096
    options.direct_min_bytes = seed % 2 ? 0 : 300000;
    auto plan = make_plan(ckpt.catalog, options);
    INFO("seed " << seed << ": " << (plan ? "" : plan.error().to_string()));
    REQUIRE(plan);
    REQUIRE(plan->layout.arenas.size() == 1);
    std::uint64_t end = 0, sum = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
      const TensorPlacement& p = plan->layout.tensors[i];
      const std::uint64_t n = ckpt.catalog.tensors[i].nbytes;
      CHECK(p.offset % options.tensor_alignment == 0);
      end = std::max(end, p.offset + n);
      sum += n;
      if (n > 0) spans.emplace_back(p.offset, p.offset + n);
    }
    CHECK(plan->layout.arenas[0].bytes == end);
    CHECK(plan->layout.tensor_bytes == sum);
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);
  }
}

TEST_CASE("plan: chunks carry every tensor byte once, in file order, within the chunk size", "[scheduler][plan]") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    SyntheticCheckpoint ckpt;
    make_synthetic(ckpt, seed, {.large_bytes = 300000});
    std::mt19937_64 rng(seed);
    PlanOptions options;
    options.chunk_bytes = 1 + rng() % 200000;
    options.max_gap_bytes = rng() % 100000;
    options.read_alignment = rng() % 2 ? 4096 : 1;
    options.direct_min_bytes = rng() % 3 == 0 ? 100000 : 0;
    auto plan = make_plan(ckpt.catalog, options);
    INFO("seed " << seed << ": " << (plan ? "" : plan.error().to_string()));
    REQUIRE(plan);
    check_chunks(ckpt.catalog, *plan, options);
  }
}

TEST_CASE("plan: neighbours coalesce into one read, a wide gap or a full chunk starts another", "[scheduler][plan]") {
  auto catalog = one_file_catalog(1 << 20, {u8_tensor("a", 0, 100, 1000), u8_tensor("b", 0, 1100, 1000),
                                            u8_tensor("c", 0, 2100 + 5000, 1000),          // 5000-byte gap
                                            u8_tensor("d", 0, 3100 + 5000 + 90000, 10)});  // 90000-byte gap
  PlanOptions options{.chunk_bytes = 64 << 10, .max_gap_bytes = 8192, .read_alignment = 1};
  auto plan = make_plan(catalog, options);
  REQUIRE(plan);
  REQUIRE(plan->reads.chunks.size() == 2);
  CHECK(plan->reads.chunks[0].pieces.size() == 3);  // a, b and (across the small gap) c
  CHECK(plan->reads.chunks[0].file_offset == 100);
  CHECK(plan->reads.chunks[0].bytes == 8100 - 100);
  CHECK(plan->reads.chunks[1].pieces.size() == 1);

  options.chunk_bytes = 2000;  // a and b fill a chunk: c starts the next
  plan = make_plan(catalog, options);
  REQUIRE(plan);
  REQUIRE(plan->reads.chunks.size() == 3);
  CHECK(plan->reads.chunks[0].pieces.size() == 2);
}

TEST_CASE("plan: reads start on a 4 KiB boundary when the chunk allows, so O_DIRECT can take their body",
          "[scheduler][plan]") {
  auto catalog = one_file_catalog(1 << 20, {u8_tensor("a", 0, 5000, 3000), u8_tensor("big", 0, 8000, 100000)});
  auto plan = make_plan(catalog, {.chunk_bytes = 32768, .read_alignment = 4096, .direct_min_bytes = 0});
  REQUIRE(plan);
  CHECK(plan->reads.chunks[0].file_offset == 4096);
  CHECK(plan->reads.chunks[0].pieces[0].chunk_offset == 5000 - 4096);
  for (std::size_t i = 1; i < plan->reads.chunks.size(); ++i) CHECK(plan->reads.chunks[i].file_offset % 4096 == 0);
  for (const ReadChunk& c : plan->reads.chunks)
    if (c.file_offset + c.bytes != (1u << 20)) CHECK((c.file_offset + c.bytes) % 4096 == 0);
}

TEST_CASE("plan: a tensor larger than a chunk spans several; large tensors can go straight to the arena",
          "[scheduler][plan]") {
  auto catalog = one_file_catalog(
      1 << 22, {u8_tensor("small", 0, 0, 10), u8_tensor("big", 0, 10, 1000000), u8_tensor("tail", 0, 1000010, 10)});
  PlanOptions options{.chunk_bytes = 262144, .read_alignment = 1, .direct_min_bytes = 0};
  auto plan = make_plan(catalog, options);
  REQUIRE(plan);
  REQUIRE(plan->reads.chunks.size() == 5);  // small | big x4 (the last shared with tail)
  CHECK(plan->reads.chunks.back().pieces.size() == 2);
  CHECK(plan->reads.direct_tensors == 0);
  check_chunks(catalog, *plan, options);

  options.direct_min_bytes = 500000;
  options.host_layout = HostLayout::kAligned;  // (file images read every tensor straight in)
  plan = make_plan(catalog, options);
  REQUIRE(plan);
  CHECK(plan->reads.direct_tensors == 1);
  CHECK(plan->layout.tensors[1].direct);
  CHECK(std::count_if(plan->reads.chunks.begin(), plan->reads.chunks.end(),
                      [](const ReadChunk& c) { return c.direct; }) == 4);
  CHECK(plan->reads.max_staged_chunk_bytes == 10);
  check_chunks(catalog, *plan, options);
}

TEST_CASE("plan: zero-size tensors and scalars get placements but no zero-length reads", "[scheduler][plan]") {
  formats::TensorEntry empty{.name = "empty", .offset = 8, .nbytes = 0, .dtype = DType::kF32, .shape = Shape{0, 7}};
  formats::TensorEntry scalar{.name = "scalar", .offset = 8, .nbytes = 4, .dtype = DType::kF32, .shape = Shape{}};
  auto catalog = one_file_catalog(12, {empty, scalar});
  PlanOptions options;
  options.host_layout = HostLayout::kAligned;
  auto plan = make_plan(catalog, options);
  REQUIRE(plan);
  REQUIRE(plan->reads.chunks.size() == 1);
  CHECK(plan->reads.chunks[0].pieces.size() == 1);
  CHECK(plan->layout.arenas[0].bytes == 4);
  CHECK(plan->layout.tensors[0].offset == 0);
  CHECK(plan->layout.tensors[1].offset == 0);

  plan = make_plan(catalog, {});  // a file image: the scalar at its file offset, the file read whole
  REQUIRE(plan);
  REQUIRE(plan->reads.chunks.size() == 1);
  CHECK(plan->reads.chunks[0].file_offset == 0);
  CHECK(plan->reads.chunks[0].bytes == 12);
  CHECK(plan->layout.tensors[1].offset == 8);
  CHECK(plan->layout.arenas[0].bytes == 4096);
}

TEST_CASE("plan: mmap maps from the page holding the first tensor byte to exactly the last", "[scheduler][plan]") {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  auto catalog = one_file_catalog(
      100000, {u8_tensor("a", 0, 5000, 100), u8_tensor("b", 0, 9000, 20000),
               formats::TensorEntry{.name = "z", .offset = 99000, .dtype = DType::kU8, .shape = Shape{0}}});
  auto plan = make_plan(catalog, {.mode = LoadMode::kMmap});
  REQUIRE(plan);
  REQUIRE(plan->layout.mappings.size() == 1);
  CHECK(plan->layout.mappings[0].offset == 5000 / page * page);
  CHECK(plan->layout.mappings[0].offset + plan->layout.mappings[0].bytes == 29000);
  CHECK(plan->layout.tensors[1].offset == 9000 - plan->layout.mappings[0].offset);
  CHECK(plan->layout.tensors[2].region == kNoRegion);
  CHECK(plan->reads.chunks.empty());
}

TEST_CASE("plan: overflowing offsets, oversized arenas and inconsistent tensors are rejected", "[scheduler][plan]") {
  SECTION("offset + nbytes overflows") {
    auto catalog = one_file_catalog(UINT64_MAX, {u8_tensor("x", 0, UINT64_MAX - 10, 100)});
    auto plan = make_plan(catalog, {});
    REQUIRE(!plan);
    CHECK(plan.error().code() == Errc::kOverflow);
    CHECK(plan.error().tensor() == "x");
  }
  SECTION("the arena would pass 2^64 bytes") {
    formats::Catalog catalog;
    catalog.files = {{.path = "a", .size = UINT64_MAX}, {.path = "b", .size = UINT64_MAX}};
    const std::uint64_t half = std::uint64_t{1} << 63;
    // Bytes sum to 2^64 - 1, but aligning b after a pushes its end to 2^64.
    catalog.tensors = {u8_tensor("a", 0, 0, half - 1), u8_tensor("b", 1, 0, half)};
    auto plan = make_plan(catalog, {.max_arena_bytes = UINT64_MAX});
    REQUIRE(!plan);
    CHECK(plan.error().code() == Errc::kOverflow);
    CHECK(plan.error().tensor() == "b");
  }
  SECTION("the arena exceeds its budget") {
    auto catalog = one_file_catalog(1 << 20, {u8_tensor("a", 0, 0, 1000), u8_tensor("b", 0, 1000, 1000)});
    auto plan = make_plan(catalog, {.max_arena_bytes = 1500});
    REQUIRE(!plan);
    CHECK(plan.error().code() == Errc::kOutOfMemory);
  }
  SECTION("a tensor past the end of its file") {
    auto plan = make_plan(one_file_catalog(1000, {u8_tensor("x", 0, 900, 101)}), {});
    REQUIRE(!plan);
    CHECK(plan.error().code() == Errc::kTruncated);
    CHECK(plan.error().file() == "/nonexistent/model.bin");
  }
  SECTION("bytes disagree with dtype x shape") {
    auto catalog = one_file_catalog(1000, {u8_tensor("x", 0, 0, 100)});
    catalog.tensors[0].dtype = DType::kF32;
    auto plan = make_plan(catalog, {});
    REQUIRE(!plan);
    CHECK(plan.error().code() == Errc::kCorrupt);
  }
  SECTION("an unknown file index") {
    auto plan = make_plan(one_file_catalog(1000, {u8_tensor("x", 3, 0, 1)}), {});
    REQUIRE(!plan);
    CHECK(plan.error().code() == Errc::kCorrupt);
  }
  SECTION("bad options") {
    auto catalog = one_file_catalog(1000, {});
    CHECK(make_plan(catalog, {.tensor_alignment = 48}).error().code() == Errc::kInvalidArgument);
    CHECK(make_plan(catalog, {.chunk_bytes = 0}).error().code() == Errc::kInvalidArgument);
    CHECK(make_plan(catalog, {.devices = {}}).error().code() == Errc::kInvalidArgument);
    const Device cpu1{.kind = Device::Kind::kCpu, .index = 1};
    CHECK(make_plan(catalog, {.devices = {cpu1, cpu1}}).error().code() == Errc::kInvalidArgument);
    const Device gpu{.kind = Device::Kind::kCuda, .index = 0};
    CHECK(make_plan(catalog, {.mode = LoadMode::kMmap, .devices = {gpu}}).error().code() == Errc::kUnsupported);
    CHECK(make_plan(catalog, {.mode = LoadMode::kMmap, .dtype = DType::kF16}).error().code() == Errc::kInvalidArgument);
    CHECK(make_plan(catalog, {.dtype = DType::kI8}).error().code() == Errc::kInvalidArgument);
  }
}
