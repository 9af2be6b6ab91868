// Several devices and dtype conversion on load, on CPU devices: cpu:N are real, distinct host
// arenas planned and filled by the same code as GPU arenas (only the delivery differs), so
// placement, arena arithmetic and conversion are proven here without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include "io/io_test_support.hpp"
#include "qload/formats/convert.hpp"
#include "qload/io/digest.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

std::vector<Device> cpus(int n) {
  std::vector<Device> out;
  for (int i = 0; i < n; ++i) out.push_back(Device{.kind = Device::Kind::kCpu, .index = i});
  return out;
}

// What a tensor must hold after the load: its file bytes, converted by the codec when the
// policy applies (the codec itself is checked against an independent reference in
// tests/formats/convert_test.cpp).
std::vector<std::byte> expected_bytes(const SyntheticCheckpoint& ckpt, std::size_t i, std::optional<DType> policy) {
  const formats::TensorEntry& t = ckpt.catalog.tensors[i];
  const auto stored = ckpt.tensor_bytes(i);
  const bool floating = t.dtype == DType::kF16 || t.dtype == DType::kBF16 || t.dtype == DType::kF32;
  if (!policy || !floating) return {stored.begin(), stored.end()};
  std::vector<std::byte> out(formats::converted_bytes(stored.size(), t.dtype, *policy));
  REQUIRE(formats::convert(stored, t.dtype, out, *policy));
  return out;
}

}  // namespace

TEST_CASE("devices: round-robin over cpu:0..2 puts the i-th tensor in file order on device i % 3",
          "[scheduler][devices]") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    DYNAMIC_SECTION("seed " << seed) {
      SyntheticCheckpoint ckpt;
      make_synthetic(ckpt, seed * 13, {.large_bytes = 300000});
      LoadOptions options;
      options.plan.devices = cpus(3);
      options.plan.chunk_bytes = options.staging.slot_bytes = 64 << 10;
      options.plan.direct_min_bytes = seed % 2 == 0 ? 0 : 100000;
      auto model = load(ckpt.catalog, options);
      REQUIRE(model);
      // File order = (file, offset) order; the catalog of make_synthetic is already in it.
      std::map<std::string, std::pair<std::uintptr_t, std::uintptr_t>> extent;  // per device
      for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
        const DeviceTensor* t = model->find(ckpt.catalog.tensors[i].name);
        REQUIRE(t != nullptr);
        CHECK(t->device == Device{.index = static_cast<int>(i % 3)}.to_string());
        CHECK(t->host);
        const auto expected = ckpt.tensor_bytes(i);
        if (t->nbytes == 0) continue;
        CHECK(std::memcmp(t->data, expected.data(), expected.size()) == 0);
        auto [it, fresh] = extent.try_emplace(t->device, reinterpret_cast<std::uintptr_t>(t->data),
                                              reinterpret_cast<std::uintptr_t>(t->data) + t->nbytes);
        it->second.first = std::min(it->second.first, reinterpret_cast<std::uintptr_t>(t->data));
        it->second.second = std::max(it->second.second, reinterpret_cast<std::uintptr_t>(t->data) + t->nbytes);
      }
      // Distinct arenas: the devices' address ranges never overlap.
      for (const auto& [a, ra] : extent)
        for (const auto& [b, rb] : extent)
          if (a < b) CHECK((ra.second <= rb.first || rb.second <= ra.first));
    }
  }
}

TEST_CASE("devices: by-layer keeps whole layers together, embeddings first, head and norm last",
          "[scheduler][devices]") {
  ScratchDir dir;
  formats::Catalog catalog;
  catalog.format = "synthetic";
  const std::vector<std::string> names = {
      "model.embed_tokens.weight",  "model.layers.0.attn.weight", "model.layers.0.mlp.weight",
      "model.layers.1.attn.weight", "model.layers.2.attn.weight", "model.layers.3.mlp.weight",
      "transformer.h.3.ln.weight",  "model.norm.weight",          "lm_head.weight"};
  std::uint64_t offset = 0;
  for (const std::string& n : names) {
    catalog.tensors.push_back(formats::TensorEntry{
        .name = n, .file = 0, .offset = offset, .nbytes = 64, .dtype = DType::kU8, .shape = Shape{64}});
    offset += 64;
  }
  const std::string path = dir.file("w.bin");
  write_file(path, random_bytes(offset, 5));
  catalog.files.push_back(formats::CatalogFile{.path = path, .size = offset, .data_offset = 0});
  catalog.index_names();

  auto plan = make_plan(catalog, {.devices = cpus(2),
                                  .placement = Placement::kByLayer,
                                  .host_layout = HostLayout::kAligned});  // for the arithmetic below
  REQUIRE(plan);
  const std::vector<std::uint32_t> expected = {0, 0, 0, 0, 1, 1, 1, 1, 1};  // 4 layers over 2 devices
  for (std::size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    CHECK(plan->layout.tensors[i].region == expected[i]);
  }
  // Arena arithmetic: each device's arena ends at its last tensor, offsets aligned.
  REQUIRE(plan->layout.arenas.size() == 2);
  CHECK(plan->layout.arenas[0].bytes == 3 * 256 + 64);
  CHECK(plan->layout.arenas[1].bytes == 4 * 256 + 64);
  CHECK(plan->layout.arenas[1].device.to_string() == "cpu:1");

  auto four = make_plan(catalog, {.devices = cpus(4), .placement = Placement::kByLayer});
  REQUIRE(four);
  const std::vector<std::uint32_t> expected4 = {0, 0, 0, 1, 2, 3, 3, 3, 3};
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(four->layout.tensors[i].region == expected4[i]);
  CHECK(parse_placement("by-layer").value() == Placement::kByLayer);
  CHECK(parse_placement("round-robin").value() == Placement::kRoundRobin);
  CHECK(parse_placement("random").error().code() == Errc::kInvalidArgument);
}

TEST_CASE("devices: a dtype policy converts floating tensors as they are placed, however they are chunked",
          "[scheduler][devices][convert]") {
  for (const DType policy : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      DYNAMIC_SECTION(dtype_name(policy) << " seed " << seed) {
        SyntheticCheckpoint ckpt;
        make_synthetic(ckpt, seed * 31 + static_cast<std::uint64_t>(policy), {.large_bytes = 400000});
        mix_float_dtypes(ckpt);
        std::mt19937_64 rng(seed);
        LoadOptions options;
        options.digests = LoadOptions::Digests::kOn;
        options.plan.dtype = policy;
        options.plan.devices = cpus(1 + static_cast<int>(seed % 2));
        options.staging.slot_bytes = 4096 * (1 + rng() % 32);
        options.staging.total_bytes = options.staging.slot_bytes * (1 + rng() % 4);
        options.plan.chunk_bytes = 64 + rng() % (options.staging.slot_bytes - 63);  // odd sizes split tensors
        options.plan.tensor_alignment = std::uint64_t{1} << (rng() % 9);
        options.cpu_workers = 1 + static_cast<std::uint32_t>(rng() % 3);
        auto plan = make_plan(ckpt.catalog, options.plan);
        REQUIRE(plan);
        auto model = load(ckpt.catalog, *plan, options);
        REQUIRE(model);
        std::uint64_t placed = 0;
        for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
          const formats::TensorEntry& entry = ckpt.catalog.tensors[i];
          const DeviceTensor* t = model->find(entry.name);
          REQUIRE(t != nullptr);
          const std::vector<std::byte> want = expected_bytes(ckpt, i, policy);
          INFO(entry.name << " " << dtype_name(entry.dtype) << " -> " << dtype_name(t->dtype) << ", " << entry.nbytes
                          << " bytes stored, chunk " << options.plan.chunk_bytes);
          const bool floating = entry.dtype == DType::kF16 || entry.dtype == DType::kBF16 || entry.dtype == DType::kF32;
          CHECK(t->dtype == (floating ? policy : entry.dtype));
          CHECK(t->shape == entry.shape);
          REQUIRE(t->nbytes == want.size());
          CHECK(plan->layout.tensors[i].bytes == want.size());
          // Aligned, or a file image's tensor at its file offset modulo 4 KiB.
          const TensorPlacement& where = plan->layout.tensors[i];
          CHECK((where.image ? where.offset % 4096 == entry.offset % 4096
                             : where.offset % options.plan.tensor_alignment == 0));
          if (!want.empty()) CHECK(std::memcmp(t->data, want.data(), want.size()) == 0);
          // Digests are of the stored bytes, whatever was placed: they match the files.
          CHECK(model->report().digests[i].xxh3_64 == io::xxh3_64(ckpt.tensor_bytes(i)));
          placed += want.size();
        }
        CHECK(model->report().placed_bytes == placed);
        CHECK(model->report().tensor_bytes == plan->layout.tensor_bytes);
      }
    }
  }
}

TEST_CASE("devices: asking for a GPU that is not there fails cleanly before reading", "[scheduler][devices]") {
  const CudaInfo info = probe_cuda();
  if (!info.devices.empty()) {
    WARN("SKIPPED: a GPU is visible; tests/gpu covers loading to it");
    return;
  }
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 3);
  LoadOptions options;
  options.plan.devices = {Device{}, Device{.kind = Device::Kind::kCuda, .index = 0}};
  const int fds_before = open_fd_count();
  const int threads_before = thread_count();
  auto model = load(ckpt.catalog, options);
  REQUIRE_FALSE(model);
  CHECK(model.error().code() == Errc::kUnsupported);
  CHECK_THAT(model.error().message(), Catch::Contains("cuda:0"));
  CHECK(open_fd_count() == fds_before);
  CHECK(thread_count() == threads_before);
}
