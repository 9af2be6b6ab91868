// Loading to GPUs: device bytes equal file bytes (copied back), conversions on the GPU equal
// the CPU path bit for bit, and every failure leaves device memory where it was. Skipped with
// a message when no GPU is visible (bench/gpu.sh runs them on a lent machine).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <span>

#include "gpu_memory.hpp"
#include "io/io_test_support.hpp"
#include "qload/io/fault_injector.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/scheduler/load.hpp"
#include "scheduler/scheduler_test_support.hpp"
#include "scheduler/strided_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// The visible GPUs, or empty after a WARN saying why the test is skipped.
std::vector<Device> gpus() {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return {};
  }
  std::vector<Device> out;
  for (const CudaDevice& d : info.devices) out.push_back(Device{.kind = Device::Kind::kCuda, .index = d.index});
  return out;
}

std::vector<std::byte> read_back(const Model& model, const DeviceTensor& t) {
  std::vector<std::byte> out(static_cast<std::size_t>(t.nbytes));
  REQUIRE(model.copy_to_host(t, 0, out));
  return out;
}

}  // namespace

TEST_CASE("gpu load: every tensor's device bytes equal the file's, on one GPU and round-robin over all", "[gpu]") {
  const std::vector<Device> devices = gpus();
  if (devices.empty()) return;
  for (const bool all : {false, true}) {
    DYNAMIC_SECTION((all ? "all GPUs" : "cuda:0")) {
      SyntheticCheckpoint ckpt;
      make_synthetic(ckpt, all ? 41 : 42, {.large_bytes = 3 << 20});
      LoadOptions options;
      options.plan.devices = all ? devices : std::vector<Device>{devices.front()};
      options.staging = {.slot_bytes = 1 << 20, .total_bytes = 8 << 20};
      options.plan.chunk_bytes = 1 << 20;
      const std::size_t before = free_bytes(0);
      {
        auto model = load(ckpt.catalog, options);
        REQUIRE(model);
        for (std::size_t i = 0; i < ckpt.catalog.tensors.size(); ++i) {
          const DeviceTensor* t = model->find(ckpt.catalog.tensors[i].name);
          REQUIRE(t != nullptr);
          CHECK_FALSE(t->host);
          CHECK(t->device.starts_with("cuda:"));
          const auto want = ckpt.tensor_bytes(i);
          const std::vector<std::byte> got = read_back(*model, *t);
          INFO(t->name << " on " << t->device);
          CHECK(std::ranges::equal(got, want));  // (memcmp would be handed null for an empty tensor)
          CHECK(reinterpret_cast<std::uintptr_t>(t->data) % 256 == 0);
        }
        CHECK(model->report().peak_staging_bytes <= options.staging.total_bytes);
      }
      CHECK(free_bytes_moved(free_bytes(0), before) <= kDriverSlack);  // the model's arenas went back
    }
  }
}

TEST_CASE("gpu load: tensors handed over while loading outlive the model in the arena they hold", "[gpu]") {
  // What qload.stream(device="cuda:0") relies on: each tensor's keep_alive owns qload's device
  // arena, so its bytes stay on the GPU after the load's Model is gone, and go back with the
  // last holder.
  const std::vector<Device> devices = gpus();
  if (devices.empty()) return;
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 43, {.large_bytes = 12 << 20});  // an arena well over kDriverSlack
  struct Handed {
    std::uint32_t index;
    DeviceTensor tensor;
    std::shared_ptr<const void> keep_alive;
  };
  std::vector<Handed> handed;
  LoadOptions options;
  options.plan.devices = {devices.front()};
  options.staging = {.slot_bytes = 1 << 20, .total_bytes = 8 << 20};
  options.plan.chunk_bytes = 1 << 20;
  LoadContext context;
  context.on_tensor = [&](std::uint32_t index, const DeviceTensor& t, const std::shared_ptr<const void>& keep_alive) {
    handed.push_back({index, t, keep_alive});
    return Status{};
  };
  const std::size_t before = free_bytes(0);
  {
    auto model = load(ckpt.catalog, options, context);
    REQUIRE(model);
  }
  REQUIRE(handed.size() == ckpt.catalog.tensors.size());
  CHECK(free_bytes_moved(free_bytes(0), before) > kDriverSlack);  // still held by the handed tensors
  for (const Handed& h : handed) {
    INFO(h.tensor.name);
    CHECK_FALSE(h.tensor.host);
    REQUIRE(h.keep_alive != nullptr);
    std::vector<std::byte> got(static_cast<std::size_t>(h.tensor.nbytes));
    if (!got.empty()) REQUIRE(cuda::copy_to_host(got.data(), h.tensor.data, got.size(), devices.front().index));
    CHECK(std::ranges::equal(got, ckpt.tensor_bytes(h.index)));
  }
  handed.clear();
  CHECK(free_bytes_moved(free_bytes(0), before) <= kDriverSlack);  // the last holder gave it back
}

TEST_CASE("gpu load: conversion on the GPU equals the CPU path bit for bit", "[gpu]") {
  const std::vector<Device> devices = gpus();
  if (devices.empty()) return;
  for (const DType policy : {DType::kBF16, DType::kF16, DType::kF32}) {
    DYNAMIC_SECTION(dtype_name(policy)) {
      SyntheticCheckpoint ckpt;
      make_synthetic(ckpt, 50 + static_cast<std::uint64_t>(policy), {.large_bytes = 2 << 20});
      mix_float_dtypes(ckpt);
      LoadOptions options;
      options.plan.dtype = policy;
      options.staging = {.slot_bytes = 256 << 10, .total_bytes = 2 << 20};
      options.plan.chunk_bytes = (256 << 10) - 6;  // odd: large tensors split mid-way
      auto on_cpu = load(ckpt.catalog, options);
      REQUIRE(on_cpu);
      options.plan.devices = {devices.front()};
      auto on_gpu = load(ckpt.catalog, options);
      REQUIRE(on_gpu);
      CHECK(on_gpu->report().converted_tensors == on_cpu->report().converted_tensors);
      for (const DeviceTensor& c : on_cpu->tensors()) {
        const DeviceTensor* g = on_gpu->find(c.name);
        REQUIRE(g != nullptr);
        CHECK(g->dtype == c.dtype);
        const std::vector<std::byte> got = read_back(*on_gpu, *g);
        INFO(c.name << " " << dtype_name(c.dtype));
        CHECK(std::ranges::equal(got, std::span(c.data, static_cast<std::size_t>(c.nbytes))));
      }
    }
  }
}

TEST_CASE("gpu load: a read error mid-load frees every device byte, slot and fd", "[gpu]") {
  const std::vector<Device> devices = gpus();
  if (devices.empty()) return;
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 77, {.files_max = 1, .tensors_max = 30, .large_bytes = 4 << 20});
  REQUIRE(ckpt.catalog.tensors.size() > 4);
  io::FaultInjector faults;
  const auto& late = ckpt.catalog.tensors[ckpt.catalog.tensors.size() * 3 / 4];
  faults.add({.kind = io::FaultKind::kEio, .offset = late.offset, .times = io::FaultRule::kAlways});
  LoadOptions options;
  options.plan.devices = {devices.front()};
  options.plan.dtype = DType::kBF16;  // scratch buffers too
  options.io.faults = &faults;
  auto pool = StagingPool::create({.slot_bytes = 1 << 20, .total_bytes = 4 << 20});
  REQUIRE(pool);
  options.staging_pool = &*pool;
  options.plan.chunk_bytes = 1 << 20;
  const std::size_t before = free_bytes(0);
  const int fds_before = open_fd_count();
  auto model = load(ckpt.catalog, options);
  REQUIRE_FALSE(model);
  CHECK(model.error().code() == Errc::kIo);
  CHECK(faults.fired() >= 1);
  CHECK(pool->leased_bytes() == 0);
  CHECK(free_bytes_moved(free_bytes(0), before) <= kDriverSlack);
  CHECK(open_fd_count() == fds_before);
}

TEST_CASE("gpu load: running out of device memory names the device and the bytes, and frees everything", "[gpu]") {
  const std::vector<Device> devices = gpus();
  if (devices.empty()) return;
  SyntheticCheckpoint ckpt;
  make_synthetic(ckpt, 78, {.files_max = 1, .tensors_max = 10, .large_bytes = 40 << 20});
  auto plan = make_plan(ckpt.catalog, {.devices = {devices.front()}});
  REQUIRE(plan);
  REQUIRE(plan->layout.arenas[0].bytes >= 2 * kDriverSlack);  // "it went back" must mean something
  // Take all but half an arena of the free memory, so the arena cannot fit.
  const std::size_t before = free_bytes(0);
  const std::size_t leave = static_cast<std::size_t>(plan->layout.arenas[0].bytes) / 2;
  auto hog = cuda::DeviceBuffer::allocate(0, before - leave);
  REQUIRE(hog);
  const std::size_t with_hog = free_bytes(0);
  LoadOptions options;
  options.plan = {.devices = {devices.front()}};
  auto model = load(ckpt.catalog, *plan, options);
  REQUIRE_FALSE(model);
  CHECK(model.error().code() == Errc::kOutOfMemory);
  CHECK_THAT(model.error().to_string(), Catch::Contains("cuda:0"));
  CHECK(free_bytes_moved(free_bytes(0), with_hog) <= kDriverSlack);
  hog->reset();
  CHECK(free_bytes_moved(free_bytes(0), before) <= kDriverSlack);
}

TEST_CASE("gpu load: strided views arrive row-major on a GPU, converted, or cut per tensor rank", "[gpu]") {
  const std::vector<Device> devices = gpus();
  if (devices.empty()) return;
  using namespace strided_views;
  const StridedCheckpoint c;
  for (const bool f32 : {false, true}) {
    DYNAMIC_SECTION((f32 ? "as f32" : "as stored")) {
      LoadOptions options;
      options.plan.devices = {devices.front()};
      if (f32) options.plan.dtype = DType::kF32;
      auto model = load(c.catalog, options);
      if (!model) FAIL(model.error().to_string());
      for (const char* name : {kQ, kO, kNorm, kGate}) {
        INFO(name);
        const DeviceTensor* t = model->find(name);
        REQUIRE(t != nullptr);
        std::vector<std::byte> want = c.dense(name);
        if (f32) {
          std::vector<std::byte> wide(want.size() * 2);
          REQUIRE(formats::convert(want, DType::kBF16, wide, DType::kF32));
          want = std::move(wide);
        }
        CHECK(read_back(*model, *t) == want);
      }
    }
  }
  if (devices.size() < 2) {
    WARN("SKIPPED [gpu]: the tensor-parallel part needs 2 GPUs, " << devices.size() << " visible");
    return;
  }
  LoadOptions options;
  options.plan.devices = {devices[0], devices[1]};
  options.plan.parallel = {.tensor = 2};
  options.plan.split = [](std::string_view name) -> Result<std::optional<Split>> {
    return name == kQ ? std::optional<Split>(Split::kRows) : std::optional<Split>();
  };
  auto model = load(c.catalog, options);
  if (!model) FAIL(model.error().to_string());
  for (std::uint64_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const DeviceTensor* q = model->find(kQ, devices[r].to_string());
    const DeviceTensor* o = model->find(kO, devices[r].to_string());
    REQUIRE((q != nullptr && o != nullptr));
    CHECK(read_back(*model, *q) == c.dense(kQ, r * kCols / 2, (r + 1) * kCols / 2));
    CHECK(read_back(*model, *o) == c.dense(kO, 0, UINT64_MAX, r * kCols / 4, (r + 1) * kCols / 4));
  }
}
