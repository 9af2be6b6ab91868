// Loading synthetic checkpoints: every tensor's bytes equal the file's, with both I/O engines
// and mmap mode, random chunk and slot sizes, tensors larger than a slot, zero-size tensors
// and scalars; the staging budget is never exceeded; the report and trace say what happened.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "io/io_test_support.hpp"
#include "qload/formats/driver.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/page_cache.hpp"
#include "qload/runtime/unique_fd.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// Random chunking and staging within what the options allow.
LoadOptions random_options(std::mt19937_64& rng) {
  LoadOptions o;
  o.staging.slot_bytes = 4096 * (1 + rng() % 64);  // 4 KiB .. 256 KiB
  o.staging.total_bytes = o.staging.slot_bytes * (1 + rng() % 6);
  o.plan.chunk_bytes = 1 + rng() % o.staging.slot_bytes;
  o.plan.max_gap_bytes = rng() % 80000;
  o.plan.tensor_alignment = std::uint64_t{1} << (rng() % 10);
  o.plan.direct_min_bytes = rng() % 3 == 0 ? 0 : 1 + rng() % 300000;
  o.plan.host_layout = rng() % 2 ? HostLayout::kFileImage : HostLayout::kAligned;
  o.reads_in_flight = 1 + static_cast<std::uint32_t>(rng() % 8);
  o.cpu_workers = 1 + static_cast<std::uint32_t>(rng() % 3);
  o.digests = LoadOptions::Digests::kOn;  // each tensor's digest, however it was chunked, is checked too
  return o;
}

void check_model(const SyntheticCheckpoint& ckpt, const Model& model, const LoadOptions& options) {
  REQUIRE(model.size() == ckpt.catalog.tensors.size());
  const LoadReport& report = model.report();
  CHECK(report.tensors == ckpt.catalog.tensors.size());
  REQUIRE(report.digests.size() == ckpt.catalog.tensors.size());
  for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
    const formats::TensorEntry& entry = ckpt.catalog.tensors[i];
    const DeviceTensor* t = model.find(entry.name);
    REQUIRE(t != nullptr);
    CHECK(t->nbytes == entry.nbytes);
    CHECK(t->dtype == entry.dtype);
    CHECK(t->shape == entry.shape);
    CHECK(t->strides == entry.shape.contiguous_strides());
    CHECK(t->device == "cpu");
    const auto expected = ckpt.tensor_bytes(i);
    if (entry.nbytes > 0) {
      REQUIRE(t->data != nullptr);
      INFO("tensor " << entry.name << " of " << entry.nbytes << " bytes");
      CHECK(std::memcmp(t->data, expected.data(), expected.size()) == 0);
    }
    if (options.plan.mode == LoadMode::kRead) {
      // Aligned, or (file-image layout) congruent to its file offset modulo 4 KiB.
      const auto address = reinterpret_cast<std::uintptr_t>(t->data);
      const bool image = options.plan.host_layout == HostLayout::kFileImage &&
                         address % kFileImageAlignment == entry.offset % kFileImageAlignment;
      CHECK((image || address % options.plan.tensor_alignment == 0));
    }
    CHECK(report.digests[i].name == entry.name);
    CHECK(report.digests[i].xxh3_64 == io::xxh3_64(expected));
  }
  CHECK(report.peak_staging_bytes <= options.staging.total_bytes);
}

}  // namespace

TEST_CASE("load: every tensor's bytes equal the file's, with each engine, random chunks and slots",
          "[scheduler][load]") {
  for (const EngineCase& c : engine_cases()) {
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
      DYNAMIC_SECTION(c.label() << " seed " << seed) {
        SyntheticCheckpoint ckpt;
        make_synthetic(ckpt, seed * 7 + static_cast<std::uint64_t>(c.engine), {.large_bytes = 400000});
        std::mt19937_64 rng(seed);
        LoadOptions options = random_options(rng);
        options.io.engine = c.engine;
        options.io.direct = c.direct;
        const int fds_before = open_fd_count();
        {
          auto model = load(ckpt.catalog, options);
          INFO("chunk " << options.plan.chunk_bytes << ", slot " << options.staging.slot_bytes);
          REQUIRE(model);
          check_model(ckpt, *model, options);
          CHECK(model->report().engine == io::engine_name(c.engine));
          for (const DeviceTensor& t : model->tensors()) CHECK(t.writable);
        }
        CHECK(open_fd_count() == fds_before);
      }
    }
  }
}

TEST_CASE("load: mmap mode points into private mappings with the file's bytes", "[scheduler][load][mmap]") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    SyntheticCheckpoint ckpt;
    make_synthetic(ckpt, seed * 3);
    LoadOptions options;
    options.plan.mode = LoadMode::kMmap;
    options.digests = LoadOptions::Digests::kOn;  // the verify tasks over the mappings, checked too
    const int fds_before = open_fd_count();
    auto model = load(ckpt.catalog, options);
    REQUIRE(model);
    check_model(ckpt, *model, options);
    CHECK(model->report().engine == "mmap");
    for (const DeviceTensor& t : model->tensors()) {
      CHECK(!t.writable);
      CHECK(t.mutable_data() == nullptr);
    }
    CHECK(open_fd_count() == fds_before);  // the mappings outlive their descriptors
    // A write through a tensor (what a framework's in-place op on a handed-out tensor does)
    // changes a private copy of the page: no fault, and the file keeps its bytes.
    for (const DeviceTensor& t : model->tensors())
      if (t.nbytes > 0) const_cast<std::byte*>(t.data)[0] ^= std::byte{0xff};
    auto again = load(ckpt.catalog, options);
    REQUIRE(again);
    check_model(ckpt, *again, options);
  }
}

TEST_CASE("load: a small staging budget is never exceeded, however many chunks", "[scheduler][load]") {
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 99, {.files_max = 1, .tensors_max = 200, .large_bytes = 100000});
  auto pool = StagingPool::create({.slot_bytes = 16384, .total_bytes = 3 * 16384});
  REQUIRE(pool);
  for (const EngineCase& c : engine_cases()) {
    DYNAMIC_SECTION(c.label()) {
      LoadOptions options;
      options.io.engine = c.engine;
      options.staging_pool = &*pool;
      options.plan.chunk_bytes = 16384;
      options.plan.direct_min_bytes = 0;
      options.reads_in_flight = 8;  // more than slots: staging is the limit
      auto model = load(ckpt.catalog, options);
      REQUIRE(model);
      CHECK(model->report().chunks > 50);
      CHECK(pool->peak_leased_bytes() <= pool->capacity_bytes());
      CHECK(pool->peak_leased_bytes() == pool->capacity_bytes());  // the budget really was the limit
      CHECK(model->report().peak_staging_bytes == pool->peak_leased_bytes());
      CHECK(pool->leased_bytes() == 0);
      for (const ResourceStats& r : model->report().resources) CHECK(r.peak <= r.capacity);
    }
  }
}

TEST_CASE("load: the report has per-stage busy time and the trace has read, verify and place lanes",
          "[scheduler][load]") {
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 5, {.files_max = 2, .tensors_max = 40, .large_bytes = 2 << 20});
  TraceRecorder trace;
  LoadOptions options;
  options.plan.direct_min_bytes = 1 << 20;
  options.plan.host_layout = HostLayout::kAligned;  // small tensors staged: a place lane
  options.digests = LoadOptions::Digests::kOn;      // the verify lane hashes
  auto model = load(ckpt.catalog, options, {.trace = &trace});
  REQUIRE(model);
  const LoadReport& r = model->report();
  CHECK(r.seconds > 0);
  CHECK(r.gb_per_s > 0);
  CHECK(r.read_bytes >= r.tensor_bytes);
  std::vector<std::string> lanes;
  for (const StageStats& s : r.stages) {
    lanes.push_back(s.lane);
    CHECK(s.busy_seconds > 0);
    CHECK(s.busy_seconds <= r.seconds);
    CHECK(s.task_seconds >= s.busy_seconds * 0.999);
  }
  CHECK(lanes == std::vector<std::string>{"read", "place", "verify"});
  const std::string json = trace.to_json();
  for (const char* lane : {"\"read\"", "\"verify\"", "\"place\""}) CHECK_THAT(json, Catch::Contains(lane));
  CHECK_THAT(r.summary(), Catch::Contains("GB/s"));
}

TEST_CASE("load: with digests off, or by default with nothing to check them against, nothing is hashed or reported",
          "[scheduler][load]") {
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 8);
  CHECK(LoadOptions{}.digests == LoadOptions::Digests::kAuto);
  for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap})
    for (const LoadOptions::Digests digests : {LoadOptions::Digests::kOff, LoadOptions::Digests::kAuto}) {
      INFO(load_mode_name(mode) << (digests == LoadOptions::Digests::kOff ? " off" : " auto"));
      LoadOptions options;
      options.plan.mode = mode;
      options.digests = digests;
      CHECK_FALSE(options.computes_digests());
      auto model = load(ckpt.catalog, options);
      REQUIRE(model);
      CHECK(model->report().digests.empty());
      for (const StageStats& s : model->report().stages) CHECK(s.lane != "verify");
      for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i)
        if (ckpt.catalog.tensors[i].nbytes > 0)
          CHECK(std::memcmp(model->tensors()[i].data, ckpt.tensor_bytes(i).data(), ckpt.catalog.tensors[i].nbytes) ==
                0);
    }
}

TEST_CASE("load: auto mode maps a checkpoint the page cache holds and reads one it does not",
          "[scheduler][load][mmap]") {
  ScratchDir dir;
  const std::vector<std::byte> big = random_bytes(4 << 20, 91);
  const std::vector<formats::WriterTensor> tensors{
      {.name = "big", .dtype = DType::kF32, .shape = Shape{big.size() / 4}, .bytes = big}};
  const std::string path = dir.file("model.safetensors");
  REQUIRE(formats::write_safetensors(path, tensors));
  const auto load_auto = [&](std::optional<DType> dtype) {
    LoadOptions options;
    options.plan.mode = LoadMode::kAuto;
    options.plan.dtype = dtype;
    auto model = load_source(path, options);
    REQUIRE(model);
    if (!dtype) CHECK(std::memcmp(model->find("big")->data, big.data(), big.size()) == 0);
    return model->report().engine == "mmap" ? LoadMode::kMmap : LoadMode::kRead;
  };
  // Just written: the page cache holds it.
  CHECK(load_auto(std::nullopt) == LoadMode::kMmap);
  // A conversion mmap mode cannot do: read, warm or not.
  CHECK(load_auto(DType::kF16) == LoadMode::kRead);
  // Written back and dropped from the page cache: read (with O_DIRECT where it can).
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd);
  ::fdatasync(fd.get());
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  if (io::page_cache_resident_fraction(fd.get(), std::filesystem::file_size(path)).value() > 0.1) {
    WARN("this file system keeps the pages after POSIX_FADV_DONTNEED; the cold case is not exercised");
  } else {
    CHECK(load_auto(std::nullopt) == LoadMode::kRead);
  }
}

TEST_CASE(
    "load: a warm load into the caller's host memory reads with the pread pool, which fills its fresh pages; a cold "
    "one, or one into qload's own arenas, uses io_uring",
    "[scheduler][load][page_fill]") {
  ScratchDir dir;
  const std::vector<std::byte> a = random_bytes((3u << 20) + 6, 92), b = random_bytes(5u << 20, 93);
  const std::vector<formats::WriterTensor> tensors{
      {.name = "a", .dtype = DType::kU8, .shape = Shape{a.size()}, .bytes = a},
      {.name = "b", .dtype = DType::kU8, .shape = Shape{b.size()}, .bytes = b}};
  const std::string path = dir.file("model.safetensors");
  REQUIRE(formats::write_safetensors(path, tensors));
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // Into memory never touched, as a framework's freshly allocated parameters are: a and b side
  // by side at an odd address, the bytes around them left zero.
  const auto load_fresh = [&](std::string_view engine) {
    const std::size_t bytes = a.size() + b.size() + 3 * page;
    void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(mapped != MAP_FAILED);
    const std::unique_ptr<void, std::function<void(void*)>> owner(mapped, [&](void* p) { ::munmap(p, bytes); });
    const std::span<std::byte> memory(static_cast<std::byte*>(mapped), bytes);
    LoadOptions options;
    options.plan.destinations["a"] = {.address = reinterpret_cast<std::uintptr_t>(memory.data() + page + 100),
                                      .bytes = a.size(),
                                      .dtype = DType::kU8};
    options.plan.destinations["b"] = {
        .address = reinterpret_cast<std::uintptr_t>(memory.data() + page + 100 + a.size()),
        .bytes = b.size(),
        .dtype = DType::kU8};
    options.plan.destinations_only = true;
    auto model = load_source(path, options);
    REQUIRE(model);
    CHECK(model->report().engine == engine);
    CHECK(std::memcmp(memory.data() + page + 100, a.data(), a.size()) == 0);
    CHECK(std::memcmp(memory.data() + page + 100 + a.size(), b.data(), b.size()) == 0);
    const std::span<const std::byte> before = memory.first(page + 100),
                                     after = memory.subspan(page + 100 + a.size() + b.size());
    CHECK(std::ranges::all_of(before, [](std::byte x) { return x == std::byte{0}; }));
    CHECK(std::ranges::all_of(after, [](std::byte x) { return x == std::byte{0}; }));
    return model->report().io.filled_bytes;
  };
  // Just written: the page cache holds it.
  const std::uint64_t filled = load_fresh("pread");
  if (io::page_filling_available()) {
    CHECK(filled >= a.size() + b.size() - 3 * page);  // all but the pages the tensors share with their neighbours
  } else {
    WARN("userfaultfd is unavailable here: the pread pool faulted the pages in, filling is not exercised");
    CHECK(filled == 0);
  }
  {  // qload's own arenas are huge-page memory: never filled, and read with io_uring
    LoadOptions own;
    own.plan.mode = LoadMode::kRead;
    auto model = load_source(path, own);
    REQUIRE(model);
    CHECK(model->report().io.filled_bytes == 0);
    if (io::probe_uring().usable) CHECK(model->report().engine == "io_uring");
    CHECK(std::memcmp(model->find("b")->data, b.data(), b.size()) == 0);
  }
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd);
  ::fdatasync(fd.get());
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  if (io::page_cache_resident_fraction(fd.get(), std::filesystem::file_size(path)).value() > 0.1 ||
      !io::probe_uring().usable) {
    WARN(
        "the file stays in the page cache after POSIX_FADV_DONTNEED, or io_uring is unavailable: the cold case is "
        "not exercised");
  } else {
    CHECK(load_fresh("io_uring") == 0);
  }
}

TEST_CASE("load: a safetensors file end to end, through open_source and by name", "[scheduler][load]") {
  ScratchDir dir;
  const std::vector<float> values{1.5f, -2.0f, 3.25f, 0.0f, 42.0f, -0.5f};
  const std::vector<std::byte> big = random_bytes(3 << 20, 77);
  std::vector<formats::WriterTensor> tensors{
      {.name = "w", .dtype = DType::kF32, .shape = Shape{2, 3}, .bytes = std::as_bytes(std::span(values))},
      {.name = "big", .dtype = DType::kU8, .shape = Shape{big.size()}, .bytes = big},
      {.name = "empty", .dtype = DType::kF32, .shape = Shape{0}, .bytes = {}}};
  REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), tensors));
  for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap}) {
    LoadOptions options;
    options.plan.mode = mode;
    options.plan.direct_min_bytes = 1 << 20;
    auto model = load_source(dir.file("model.safetensors"), options);
    REQUIRE(model);
    auto w = model->get("w");
    REQUIRE(w);
    CHECK((*w)->strides == std::vector<std::int64_t>{3, 1});
    CHECK(std::memcmp((*w)->data, values.data(), 24) == 0);
    CHECK(std::memcmp(model->find("big")->data, big.data(), big.size()) == 0);
    CHECK(model->get("nope").error().code() == Errc::kNotFound);
    model->release();
    CHECK(model->size() == 0);
  }
}

TEST_CASE("load: a Hugging Face cache snapshot's shards, symlinks into its blobs, load", "[scheduler][load]") {
  ScratchDir cache;
  const std::filesystem::path repo = cache.path() / "models--org--tiny";
  const std::filesystem::path snapshot = repo / "snapshots" / "abc123";
  std::filesystem::create_directories(repo / "blobs");
  std::filesystem::create_directories(snapshot);
  const std::vector<std::byte> bytes = random_bytes(256 << 10, 17);
  const std::vector<formats::WriterTensor> tensors{
      {.name = "w", .dtype = DType::kF32, .shape = Shape{bytes.size() / 4}, .bytes = bytes}};
  REQUIRE(formats::write_safetensors((repo / "blobs" / "0a1b").string(), tensors));
  std::filesystem::create_symlink("../../blobs/0a1b", snapshot / "model.safetensors");
  for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap, LoadMode::kAuto}) {
    LoadOptions options;
    options.plan.mode = mode;
    auto model = load_source(snapshot.string(), options);
    if (!model) FAIL(model.error().to_string());
    REQUIRE(model->find("w") != nullptr);
    CHECK(std::memcmp(model->find("w")->data, bytes.data(), bytes.size()) == 0);
  }
}
