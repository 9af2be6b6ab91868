// Dequantizing on load onto a GPU (FP8 safetensors, GGUF blocks): the packed parts go from the (unpinned) scratch arena
// through each copy lane's bounded pinned bounce buffers to the kernel, and the weights equal
// the CPU's dequantization byte for byte. On the simulated runtime, also: the most host memory
// pinned at once stays within the staging pool and the bounce buffers, however large the
// packed weights (it used to pin the whole scratch arena).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "formats/gguf_bytes.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/scheduler/load.hpp"
#include "support/scratch.hpp"
#if defined(QLOAD_CUDA_SIM)
#include "qload/cudasim/control.hpp"
#endif

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// 24 MiB of FP8 weights, 12 MiB each: more than a lane's two bounce halves, so they are reused
// within one weight.
constexpr std::uint64_t kRows = 3072, kCols = 4096, kWeights = 2;

// An FP8 checkpoint with 128x128 block scales, as transformers' fine-grained FP8 writes it:
// random E4M3 codes (NaN excluded) and scales around 0.01.
void write_fp8_checkpoint(const ScratchDir& dir) {
  std::mt19937 rng(7);
  std::vector<std::vector<std::uint8_t>> codes(kWeights, std::vector<std::uint8_t>(kRows * kCols));
  std::vector<std::vector<float>> scales(kWeights, std::vector<float>((kRows / 128) * (kCols / 128)));
  std::vector<std::string> names;
  std::vector<formats::WriterTensor> tensors;
  for (std::uint64_t w = 0; w < kWeights; ++w) {
    for (auto& c : codes[w]) {
      c = static_cast<std::uint8_t>(rng());
      if ((c & 0x7f) == 0x7f) c &= 0xfe;  // 0x7f / 0xff are NaN in E4M3
    }
    for (auto& s : scales[w]) s = 0.005f + static_cast<float>(rng() % 1000) * 1e-5f;
    const std::string name = fmt::format("model.layers.{}.mlp.down_proj.weight", w);
    tensors.push_back({.name = name,
                       .dtype = DType::kF8_E4M3,
                       .shape = Shape{kRows, kCols},
                       .bytes = std::as_bytes(std::span(codes[w]))});
    tensors.push_back({.name = name + "_scale_inv",
                       .dtype = DType::kF32,
                       .shape = Shape{kRows / 128, kCols / 128},
                       .bytes = std::as_bytes(std::span(scales[w]))});
  }
  REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), tensors));
  std::ofstream(dir.file("config.json"))
      << R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}})";
}

LoadOptions dequantizing_to(Device device) {
  LoadOptions o;
  o.plan.devices = {device};
  o.plan.dequantize = DType::kBF16;
  o.plan.chunk_bytes = o.staging.slot_bytes = 1 << 20;
  o.staging.total_bytes = 8 << 20;
  o.copy_lanes = 1;
  return o;
}

}  // namespace

TEST_CASE("gpu load: dequantizing onto a GPU equals the CPU, through bounded pinned memory", "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  ScratchDir dir;
  write_fp8_checkpoint(dir);
  auto cpu = load_source(dir.path().string(), dequantizing_to(Device{}));
  REQUIRE(cpu);
#if defined(QLOAD_CUDA_SIM)
  cudasim::reset();  // the peak below is this load's
  // Long stream delays: a bounce half refilled before the copy that reads it has run is
  // reported (checked by deleting the wait in CudaTarget::copy_pageable).
  cudasim::set_max_delay_us(3000);
  struct Restore {
    ~Restore() { cudasim::reset(); }
  } restore;
#endif
  const Device gpu{.kind = Device::Kind::kCuda, .index = 0};
  auto on_gpu = load_source(dir.path().string(), dequantizing_to(gpu));
  REQUIRE(on_gpu);
  REQUIRE(on_gpu->tensors().size() == kWeights);
  for (const DeviceTensor& t : on_gpu->tensors()) {
    INFO(t.name);
    const DeviceTensor* reference = cpu->find(t.name);
    REQUIRE(reference != nullptr);
    REQUIRE(t.dtype == DType::kBF16);
    REQUIRE(t.nbytes == reference->nbytes);
    std::vector<std::byte> got(static_cast<std::size_t>(t.nbytes));
    REQUIRE(on_gpu->copy_to_host(t, 0, got));
    CHECK(std::ranges::equal(got, std::span(reference->data, static_cast<std::size_t>(reference->nbytes))));
  }
#if defined(QLOAD_CUDA_SIM)
  // At most the staging budget (8 MiB) plus one lane's two 4 MiB bounce halves; the packed
  // weights alone are 24 MiB, so pinning the scratch arena they are read into would exceed it.
  const std::size_t packed = kWeights * kRows * kCols;
  const std::size_t bound = (std::size_t{8} << 20) + (std::size_t{8} << 20);
  REQUIRE(packed > bound);
  CHECK(cudasim::peak_pinned_bytes() <= bound);
  CHECK(cudasim::peak_pinned_bytes() > 0);
#endif
}

TEST_CASE("gpu load: GGUF block weights (2-D and stacked experts) dequantize, or requantize, on a GPU as on the CPU",
          "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  // Q4_K [2, 64, 512] (experts), Q6_K [96, 256] and an F32 norm, random blocks with f16 scales
  // below 1/8 so every value is finite.
  constexpr std::uint32_t kQ4K = 12, kQ6K = 14, kF32 = 0;
  std::mt19937 rng(3);
  const auto blocks = [&](std::uint64_t count, std::uint32_t bytes, std::initializer_list<std::size_t> f16_at) {
    std::vector<std::byte> b(count * bytes);
    for (auto& x : b) x = static_cast<std::byte>(rng());
    for (std::uint64_t i = 0; i < count; ++i)
      for (const std::size_t at : f16_at) {
        const auto h = static_cast<std::uint16_t>(rng() % 0x3000);
        std::memcpy(b.data() + i * bytes + at, &h, 2);
      }
    return b;
  };
  const std::vector<std::byte> experts = blocks(2 * 64 * 2, 144, {0, 2});
  const std::vector<std::byte> down = blocks(96, 210, {208});
  GgufBytes g;
  g.header(3, 0)
      .tensor("blk.0.ffn_up_exps.weight", {512, 64, 2}, kQ4K, 0)
      .tensor("blk.0.ffn_down.weight", {256, 96}, kQ6K, experts.size())
      .tensor("output_norm.weight", {64}, kF32, experts.size() + down.size());
  g.pad_to(32).data(experts).data(down).data(std::vector<std::byte>(256, std::byte{0}));
  ScratchDir dir;
  write_file(dir.file("m.gguf"), g.bytes);

  // Requantizing (with quantize too): the 2-D weight is decoded on the host, quantized there
  // and its FP8 weight and scale copied to the GPU; the experts are only dequantized.
  for (const bool requantize : {false, true}) {
    DYNAMIC_SECTION((requantize ? "dequantize + quantize fp8:per-channel" : "dequantize")) {
      auto options = [&](Device device) {
        LoadOptions o = dequantizing_to(device);
        if (requantize) o.plan.quantize = formats::QuantizeTarget::kFp8Row;
        return o;
      };
      auto cpu = load_source(dir.file("m.gguf"), options(Device{}));
      if (!cpu) FAIL(cpu.error().to_string());
      auto on_gpu = load_source(dir.file("m.gguf"), options(Device{.kind = Device::Kind::kCuda, .index = 0}));
      if (!on_gpu) FAIL(on_gpu.error().to_string());
      REQUIRE(on_gpu->tensors().size() == (requantize ? 4 : 3));
      CHECK(on_gpu->find("blk.0.ffn_up_exps.weight")->shape == Shape{2, 64, 512});
      CHECK(on_gpu->find("blk.0.ffn_down.weight")->shape == Shape{96, 256});
      CHECK(on_gpu->find("blk.0.ffn_down.weight")->dtype == (requantize ? DType::kF8_E4M3 : DType::kBF16));
      for (const DeviceTensor& t : on_gpu->tensors()) {
        INFO(t.name);
        const DeviceTensor* reference = cpu->find(t.name);
        REQUIRE(reference != nullptr);
        REQUIRE(t.nbytes == reference->nbytes);
        std::vector<std::byte> got(static_cast<std::size_t>(t.nbytes));
        REQUIRE(on_gpu->copy_to_host(t, 0, got));
        CHECK(std::ranges::equal(got, std::span(reference->data, static_cast<std::size_t>(reference->nbytes))));
      }
    }
  }
}
