// Loads into file-image host arenas (issue 48): files whose size and data offset are multiples
// of nothing, tiny files, spans over many reads, reads the kernel cuts short, each through
// both engines with O_DIRECT where the file system takes it. Every tensor's bytes equal the
// file's, every tensor lies at its file offset modulo 4 KiB, and O_DIRECT carried the bodies.
#include <catch2/catch.hpp>

#include <cstring>

#include "io/io_test_support.hpp"
#include "qload/io/fault_injector.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// One file per (header, tensor bytes) pair: a header of odd length before the data, a tensor
// or two, and a few trailing bytes, so that neither the data offset nor the file size is a
// multiple of anything.
void make_odd_files(SyntheticCheckpoint& ckpt) {
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> files{
      {0, 1}, {1, 7}, {8, 4088}, {4095, 4097}, {4100, 65537}, {13, 1000003}, {4096, 3 * 4096}, {777, 2500000}};
  for (std::uint32_t f = 0; f < files.size(); ++f) {
    const auto [header, bytes] = files[f];
    const std::uint64_t half = bytes / 2;
    std::uint64_t pos = header;
    for (const std::uint64_t n : {half, bytes - half}) {
      if (n == 0) continue;
      ckpt.catalog.tensors.push_back(formats::TensorEntry{.name = "f" + std::to_string(f) + ".t" + std::to_string(pos),
                                                          .file = f,
                                                          .offset = pos,
                                                          .nbytes = n,
                                                          .dtype = DType::kU8,
                                                          .shape = Shape{n}});
      pos += n;
    }
    const std::uint64_t size = pos + f % 3;  // 0, 1 or 2 trailing bytes
    const std::string path = ckpt.dir.file("odd" + std::to_string(f) + ".bin");
    ckpt.bytes.push_back(random_bytes(size, 1000 + f));
    write_file(path, ckpt.bytes.back());
    ckpt.catalog.files.push_back(formats::CatalogFile{.path = path, .size = size, .data_offset = header});
  }
  ckpt.catalog.index_names();
}

void check_bytes(const SyntheticCheckpoint& ckpt, const Model& model) {
  for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
    const formats::TensorEntry& entry = ckpt.catalog.tensors[i];
    const DeviceTensor* t = model.find(entry.name);
    REQUIRE(t != nullptr);
    INFO(entry.name << ": " << entry.nbytes << " bytes at file offset " << entry.offset);
    REQUIRE(t->nbytes == entry.nbytes);
    CHECK(std::memcmp(t->data, ckpt.tensor_bytes(i).data(), entry.nbytes) == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(t->data) % kFileImageAlignment == entry.offset % kFileImageAlignment);
  }
}

}  // namespace

TEST_CASE("file image: odd sizes and offsets, tiny files and long spans load exactly, their bodies via O_DIRECT",
          "[scheduler][load][image]") {
  SyntheticCheckpoint ckpt;
  make_odd_files(ckpt);
  for (const EngineCase& c : engine_cases()) {
    for (const std::uint64_t chunk : {std::uint64_t{4096}, std::uint64_t{65536}, std::uint64_t{1} << 20}) {
      DYNAMIC_SECTION(c.label() << ", reads of " << chunk) {
        LoadOptions options;
        options.io.engine = c.engine;
        options.io.direct = c.direct;
        options.plan.chunk_bytes = options.staging.slot_bytes = chunk;
        auto model = load(ckpt.catalog, options);
        REQUIRE(model);
        check_bytes(ckpt, *model);
        const LoadReport& report = model->report();
        CHECK(report.direct_tensors == ckpt.catalog.tensors.size());
        CHECK(report.peak_staging_bytes == 0);  // nothing staged
        if (c.direct == io::DirectMode::kOn) {
          // Everything but each file's last partial block (and a tiny file) goes O_DIRECT:
          // at least the sum over files of their size rounded down to a block.
          std::uint64_t bodies = 0;
          for (const formats::CatalogFile& f : ckpt.catalog.files) bodies += f.size / 4096 * 4096;
          CHECK(report.io.direct_bytes >= bodies - 8 * 4096);  // a file's first block may hold no tensor
          CHECK(report.io.direct_bytes > 0);
        } else {
          CHECK(report.io.direct_bytes == 0);
        }
      }
    }
  }
}

TEST_CASE("file image: reads the kernel cuts short, direct or buffered, are resumed to the exact bytes",
          "[scheduler][load][image]") {
  SyntheticCheckpoint ckpt;
  make_odd_files(ckpt);
  const formats::TensorEntry& big = ckpt.catalog.tensors.back();  // 1.25 MB, over several reads
  for (const EngineCase& c : engine_cases()) {
    DYNAMIC_SECTION(c.label()) {
      io::FaultInjector faults;
      for (const std::uint64_t at : {big.offset + 1, big.offset + 70000, big.offset + big.nbytes - 3})
        faults.add({.kind = io::FaultKind::kShortRead, .file = big.file, .offset = at, .times = 3});
      faults.add({.kind = io::FaultKind::kShortRead, .offset = std::nullopt, .nth_op = 2, .short_bytes = 5});
      LoadOptions options;
      options.io.engine = c.engine;
      options.io.direct = c.direct;
      options.io.faults = &faults;
      options.plan.chunk_bytes = options.staging.slot_bytes = 65536;
      auto model = load(ckpt.catalog, options);
      REQUIRE(model);
      CHECK(faults.fired() >= 3);
      CHECK(model->report().io.short_reads >= 3);
      check_bytes(ckpt, *model);
    }
  }
}
