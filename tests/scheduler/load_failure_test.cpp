// Failed loads: an injected EIO, a wrong expected digest, a file that changed, conflicting
// options. Each returns a typed error naming file / tensor / offset, and releases every
// descriptor, staging slot and thread.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "io/io_test_support.hpp"
#include "qload/formats/driver.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/io/fault_injector.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"
#include "support/fifo.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// One file: a few small tensors, one spanning several chunks, one large enough to go direct,
// a zero-size one.
void make_fixture(SyntheticCheckpoint& ckpt) {
  const std::vector<std::uint64_t> sizes{1000, 300000, 20, 0, 2000000, 4000};
  std::uint64_t pos = 777;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    formats::TensorEntry t{.name = "t" + std::to_string(i),
                           .offset = pos,
                           .nbytes = sizes[i],
                           .dtype = DType::kU8,
                           .shape = Shape{sizes[i]}};
    ckpt.catalog.tensors.push_back(t);
    pos += sizes[i];
  }
  ckpt.bytes.push_back(random_bytes(pos + 100, 4242));
  write_file(ckpt.dir.file("m.bin"), ckpt.bytes[0]);
  ckpt.catalog.files.push_back({.path = ckpt.dir.file("m.bin"), .size = pos + 100});
  ckpt.catalog.index_names();
}

LoadOptions fixture_options() {
  LoadOptions o;
  o.plan.chunk_bytes = 65536;
  o.staging.slot_bytes = 65536;
  o.staging.total_bytes = 4 * 65536;
  o.plan.direct_min_bytes = 1 << 20;  // aligned layout: t4 goes direct, t1 spans staged chunks
  return o;
}

}  // namespace

TEST_CASE("load failure: an EIO cancels the load and releases fds, slots and threads", "[scheduler][failure]") {
  SyntheticCheckpoint ckpt;
  make_fixture(ckpt);
  auto pool = StagingPool::create({.slot_bytes = 65536, .total_bytes = 4 * 65536});
  REQUIRE(pool);
  const std::uint64_t staged_offset = ckpt.catalog.tensors[1].offset + 200000;   // inside t1
  const std::uint64_t direct_offset = ckpt.catalog.tensors[4].offset + 1000000;  // inside t4
  for (const EngineCase& c : engine_cases()) {
    for (const std::uint64_t offset : {staged_offset, direct_offset})
      for (const HostLayout layout : {HostLayout::kAligned, HostLayout::kFileImage}) {
        DYNAMIC_SECTION(c.label() << " EIO at " << offset
                                  << (layout == HostLayout::kAligned ? " aligned" : " file image")) {
          const int fds_before = open_fd_count();
          const int threads_before = thread_count();
          io::FaultInjector faults;
          faults.add({.kind = io::FaultKind::kEio, .offset = offset, .times = io::FaultRule::kAlways});
          LoadOptions options = fixture_options();
          options.plan.host_layout = layout;  // staged and direct reads, or one span read whole
          options.io.engine = c.engine;
          options.io.direct = c.direct;
          options.io.faults = &faults;
          options.staging_pool = &*pool;
          auto model = load(ckpt.catalog, options);
          REQUIRE(!model);
          CHECK(model.error().code() == Errc::kIo);
          CHECK(model.error().file() == ckpt.catalog.files[0].path);
          REQUIRE(model.error().offset());
          CHECK(*model.error().offset() <= offset);
          CHECK(faults.fired() >= 1);
          CHECK(pool->leased_bytes() == 0);
          CHECK(pool->peak_leased_bytes() <= pool->capacity_bytes());
          CHECK(open_fd_count() == fds_before);
          CHECK(thread_count() == threads_before);
        }
      }
  }
}

TEST_CASE("load failure: a wrong expected digest is a checksum mismatch naming file, tensor and offset",
          "[scheduler][failure]") {
  SyntheticCheckpoint ckpt;
  make_fixture(ckpt);
  // t0 whole in a chunk, t1 streamed across chunks, t3 zero-size, t4 read directly.
  for (const char* name : {"t0", "t1", "t3", "t4"}) {
    for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap}) {
      DYNAMIC_SECTION(name << " " << load_mode_name(mode)) {
        LoadOptions options = fixture_options();
        options.plan.mode = mode;
        LoadOptions hashed = options;
        hashed.digests = LoadOptions::Digests::kOn;
        auto good = load(ckpt.catalog, hashed);
        REQUIRE(good);
        REQUIRE(good->report().digests.size() == ckpt.catalog.tensors.size());
        // The right digests pass, checked with digests left at their default (auto: hashed,
        // since there is something to check them against)...
        for (const TensorDigest& d : good->report().digests) options.expected_xxh3_64[d.name] = d.xxh3_64;
        REQUIRE(options.digests == LoadOptions::Digests::kAuto);
        auto checked = load(ckpt.catalog, options);
        REQUIRE(checked);
        CHECK(checked->report().digests.size() == ckpt.catalog.tensors.size());
        // ...one wrong digest fails.
        options.expected_xxh3_64[name] ^= 1;
        const int fds_before = open_fd_count();
        auto bad = load(ckpt.catalog, options);
        REQUIRE(!bad);
        CHECK(bad.error().code() == Errc::kChecksumMismatch);
        CHECK(bad.error().tensor() == name);
        CHECK(bad.error().file() == ckpt.catalog.files[0].path);
        CHECK(bad.error().offset() == ckpt.catalog.find(name)->offset);
        CHECK(open_fd_count() == fds_before);
      }
    }
  }
}

TEST_CASE("load failure: an expected digest for a tensor the checkpoint lacks is refused", "[scheduler][failure]") {
  SyntheticCheckpoint ckpt;
  make_fixture(ckpt);
  LoadOptions options = fixture_options();
  options.expected_xxh3_64["not.there"] = 1;
  auto model = load(ckpt.catalog, options);
  REQUIRE(!model);
  CHECK(model.error().code() == Errc::kNotFound);
  CHECK(model.error().tensor() == "not.there");
}

TEST_CASE("load failure: a file whose size differs from its catalog is a changed file", "[scheduler][failure]") {
  SyntheticCheckpoint ckpt;
  make_fixture(ckpt);
  ckpt.bytes[0].push_back(std::byte{1});
  write_file(ckpt.catalog.files[0].path, ckpt.bytes[0]);
  for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap}) {
    LoadOptions options = fixture_options();
    options.plan.mode = mode;
    auto model = load(ckpt.catalog, options);
    REQUIRE(!model);
    CHECK(model.error().code() == Errc::kFileChanged);
    CHECK(model.error().file() == ckpt.catalog.files[0].path);
  }
}

TEST_CASE("load failure: a file modified during the load fails the identity check at the end", "[scheduler][failure]") {
  SyntheticCheckpoint ckpt;
  make_fixture(ckpt);
  // mtime follows the kernel's coarse clock (a few ms per tick), so the load must last longer
  // than a tick: one read answered EAGAIN 900 times in a row (retried, then it succeeds)
  // keeps it busy for tens of milliseconds while a thread keeps touching the file.
  io::FaultInjector faults;
  faults.add({.kind = io::FaultKind::kEagain, .offset = ckpt.catalog.tensors[4].offset + 5, .times = 900});
  LoadOptions options = fixture_options();
  options.plan.chunk_bytes = options.staging.slot_bytes = options.staging.total_bytes = 1 << 20;
  options.plan.direct_min_bytes = 0;
  options.io.faults = &faults;
  std::atomic<bool> stop{false};
  std::jthread toucher([&] {
    const timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
    while (!stop) ::utimensat(AT_FDCWD, ckpt.catalog.files[0].path.c_str(), now, 0);
  });
  auto model = load(ckpt.catalog, options);
  stop = true;
  CHECK(faults.fired() == 900);
  REQUIRE(!model);
  CHECK(model.error().code() == Errc::kFileChanged);
  CHECK_THAT(model.error().message(), Catch::Contains("while loading"));  // the check at the end
  CHECK(model.error().file() == ckpt.catalog.files[0].path);
}

TEST_CASE("load failure: a shard replaced by a FIFO after the catalog fails cleanly without hanging",
          "[scheduler][failure][security]") {
  for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap, LoadMode::kAuto}) {
    SyntheticCheckpoint ckpt;
    make_fixture(ckpt);
    const std::string path = ckpt.catalog.files[0].path;
    plant_fifo(path);
    LoadOptions options = fixture_options();
    options.plan.mode = mode;
    std::optional<Result<Model>> model;
    REQUIRE(returns_within([&] { model.emplace(load(ckpt.catalog, options)); }, path));
    REQUIRE(!*model);
    CHECK((*model).error().code() == Errc::kInvalidArgument);
    CHECK_THAT((*model).error().message(), Catch::Contains("not a regular file"));
    CHECK((*model).error().file() == path);
  }
}

TEST_CASE("load failure: a same-size symlink to an outside file renamed over a shard after the catalog is refused",
          "[scheduler][failure][security]") {
  ScratchDir model_dir, outside;
  const std::vector<std::byte> inside_bytes = random_bytes(64 << 10, 1), outside_bytes = random_bytes(64 << 10, 2);
  const auto write = [](const std::string& path, const std::vector<std::byte>& bytes) {
    const std::vector<formats::WriterTensor> tensors{
        {.name = "w", .dtype = DType::kF32, .shape = Shape{bytes.size() / 4}, .bytes = bytes}};
    REQUIRE(formats::write_safetensors(path, tensors));
  };
  const std::string shard = model_dir.file("model.safetensors");
  write(shard, inside_bytes);
  const auto catalog = formats::open_catalog(model_dir.path().string());
  REQUIRE(catalog);
  REQUIRE(catalog->files.at(0).identity.has_value());
  // Same tensor, same size, other bytes: the catalog's size check alone would pass it.
  write(outside.file("secret.safetensors"), outside_bytes);
  REQUIRE(std::filesystem::file_size(outside.file("secret.safetensors")) == catalog->files[0].size);
  std::filesystem::create_symlink(outside.file("secret.safetensors"), model_dir.file("swap"));
  std::filesystem::rename(model_dir.file("swap"), shard);
  for (const LoadMode mode : {LoadMode::kRead, LoadMode::kMmap, LoadMode::kAuto}) {
    LoadOptions options;
    options.plan.mode = mode;
    auto model = load(*catalog, options);
    REQUIRE(!model);  // no tensor, so no outside byte, comes back
    CHECK(model.error().code() == Errc::kFileChanged);
    CHECK(model.error().file() == shard);
  }
}

TEST_CASE("load failure: conflicting or invalid options are refused before anything is opened",
          "[scheduler][failure]") {
  SyntheticCheckpoint ckpt;
  make_fixture(ckpt);
  LoadOptions options = fixture_options();
  options.plan.chunk_bytes = options.staging.slot_bytes + 1;  // a chunk must fit a slot
  CHECK(load(ckpt.catalog, options).error().code() == Errc::kInvalidArgument);
  options = fixture_options();
  options.digests = LoadOptions::Digests::kOff;  // expected digests are never skipped silently
  options.expected_xxh3_64["t0"] = 0;
  CHECK(load(ckpt.catalog, options).error().code() == Errc::kInvalidArgument);
  options = fixture_options();
  options.reads_in_flight = 0;
  CHECK(load(ckpt.catalog, options).error().code() == Errc::kInvalidArgument);
  options = fixture_options();
  auto plan = make_plan(ckpt.catalog, options.plan);
  REQUIRE(plan);
  plan->layout.tensors.pop_back();
  CHECK(load(ckpt.catalog, *plan, options).error().code() == Errc::kInvalidArgument);
}
