// Loading into caller-owned GPU memory (PlanOptions::destinations on cuda:N): the server's own
// device allocation receives each tensor (whole, converted on the GPU, or rows in its order)
// through pinned staging and host-to-device copies straight into place; the guard bytes between
// destinations are never written and the load allocates no device arena for them. Skipped with
// a message when no GPU is visible (the simulated one in CI's sanitizer run, a real one on a
// lent machine).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include "gpu_memory.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/scheduler/load.hpp"
#include "support/llama_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

TEST_CASE(
    "gpu load_into: tensors land in the caller's device memory, converted or permuted, nothing around them "
    "written",
    "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  Llama m;
  make_model(m);
  const std::string q = "model.layers.0.self_attn.q_proj.weight", norm = "model.norm.weight",
                    embed = "model.embed_tokens.weight";
  const std::uint64_t row = kHidden * 2;
  // One device allocation for all three, as a server's parameter pool: q rows reversed, the
  // norm converted to f32 on the GPU, the embeddings whole; 256 guard bytes before each.
  const std::uint64_t q_at = 256, norm_at = q_at + kHeads * kHd * row + 256, embed_at = norm_at + kHidden * 4 + 256,
                      total = embed_at + kVocab * row + 256;
  std::vector<std::byte> guard(total, std::byte{0xAB});
  auto pool = cuda::DeviceBuffer::allocate(0, total);
  REQUIRE(pool);
  REQUIRE(cuda::copy_to_device(pool->data(), guard.data(), total, 0));
  const auto address = [&](std::uint64_t at) { return reinterpret_cast<std::uintptr_t>(pool->data() + at); };
  const Device gpu{.kind = Device::Kind::kCuda, .index = 0};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> reversed;
  for (std::uint64_t r = kHeads * kHd; r-- > 0;) reversed.emplace_back(r, r + 1);
  LoadOptions o;
  o.staging = {.slot_bytes = 4096, .total_bytes = 8 * 4096};
  o.plan.chunk_bytes = 4096;
  o.plan.destinations[q] = {
      .device = gpu, .address = address(q_at), .bytes = kHeads * kHd * row, .dtype = DType::kBF16, .rows = reversed};
  o.plan.destinations[norm] = {.device = gpu, .address = address(norm_at), .bytes = kHidden * 4, .dtype = DType::kF32};
  o.plan.destinations[embed] = {
      .device = gpu, .address = address(embed_at), .bytes = kVocab * row, .dtype = DType::kBF16};
  o.plan.destinations_only = true;
  auto model = load_source(m.dir.path().string(), o);
  if (!model) FAIL(model.error().to_string());
  CHECK(model->size() == 3);
  for (const DeviceTensor& t : model->tensors()) {
    CHECK(t.caller_owned);
    CHECK_FALSE(t.host);
  }
  std::vector<std::byte> back(total);
  REQUIRE(cuda::copy_to_host(back.data(), pool->data(), total, 0));
  for (std::uint64_t i = 0; i < kHeads * kHd; ++i)
    for (std::uint64_t c = 0; c < kHidden; ++c) {
      std::uint16_t got;
      std::memcpy(&got, back.data() + q_at + (i * kHidden + c) * 2, 2);
      REQUIRE(got == stored(m, q, kHeads * kHd - 1 - i, c));
    }
  for (std::uint64_t c = 0; c < kHidden; ++c) {
    float got;
    std::memcpy(&got, back.data() + norm_at + c * 4, 4);
    REQUIRE(got == as_float(stored(m, norm, c, 0)));
  }
  for (std::uint64_t r = 0; r < kVocab; ++r)
    for (std::uint64_t c = 0; c < kHidden; ++c) {
      std::uint16_t got;
      std::memcpy(&got, back.data() + embed_at + (r * kHidden + c) * 2, 2);
      REQUIRE(got == stored(m, embed, r, c));
    }
  // Every byte outside the three destinations still holds the guard.
  const std::pair<std::uint64_t, std::uint64_t> used[] = {
      {q_at, kHeads * kHd * row}, {norm_at, kHidden * 4}, {embed_at, kVocab * row}};
  std::size_t touched = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    const bool inside =
        std::ranges::any_of(used, [&](const auto& u) { return i >= u.first && i < u.first + u.second; });
    if (!inside && back[i] != std::byte{0xAB}) ++touched;
  }
  CHECK(touched == 0);
  // The model holds no device memory of its own: freeing it leaves the caller's pool alone.
  model->release();
  REQUIRE(cuda::copy_to_host(back.data() + embed_at, pool->data() + embed_at, 2, 0));
}

TEST_CASE(
    "gpu load_into: column parts a row pitch apart land in their columns of the caller's device memory, converted "
    "on the GPU row by row, the columns between them untouched",
    "[gpu]") {
  const CudaInfo info = probe_cuda();
  if (info.devices.empty()) {
    WARN("SKIPPED [gpu]: no GPU visible: " << info.unavailable_reason);
    return;
  }
  Llama m;
  make_model(m);
  const std::string o0 = "model.layers.0.self_attn.o_proj.weight", down = "model.layers.0.mlp.down_proj.weight";
  // A "fused parameter" [32, 92] in f32: 4 guard columns, o0's columns [8, 24) converted from
  // bf16, 4 guard columns, down's 64 columns converted too, 4 guard columns. Then the same in
  // bf16 (no conversion: one 2-D copy per staged block of rows).
  const std::uint64_t f32_pitch = 92 * 4, bf16_pitch = 92 * 2, bf16_at = 32 * f32_pitch,
                      total = bf16_at + 32 * bf16_pitch;
  const Device gpu{.kind = Device::Kind::kCuda, .index = 0};
  for (const std::uint64_t chunk : {std::uint64_t{1000}, std::uint64_t{65536}}) {
    INFO("chunk " << chunk);
    std::vector<std::byte> want(total, std::byte{0xAB});
    auto pool = cuda::DeviceBuffer::allocate(0, total);
    REQUIRE(pool);
    REQUIRE(cuda::copy_to_device(pool->data(), want.data(), total, 0));
    const auto address = [&](std::uint64_t at) { return reinterpret_cast<std::uintptr_t>(pool->data() + at); };
    LoadOptions o;
    o.staging = {.slot_bytes = 65536, .total_bytes = 4 * 65536};
    o.plan.chunk_bytes = chunk;
    const TensorRegion cols{.dim = 1, .begin = 8, .end = 24};
    o.plan.destinations[o0] = {.device = gpu,
                               .address = address(4 * 4),
                               .bytes = 32 * 16 * 4,
                               .row_pitch = f32_pitch,
                               .dtype = DType::kF32,
                               .region = cols};
    o.plan.destinations[down] = {
        .device = gpu, .address = address(24 * 4), .bytes = 32 * 64 * 4, .row_pitch = f32_pitch, .dtype = DType::kF32};
    auto model = load_source(m.dir.path().string(), o);  // everything else into qload's own arenas
    if (!model) FAIL(model.error().to_string());
    LoadOptions b = o;
    b.plan.destinations[o0] = {.device = gpu,
                               .address = address(bf16_at + 4 * 2),
                               .bytes = 32 * 16 * 2,
                               .row_pitch = bf16_pitch,
                               .dtype = DType::kBF16,
                               .region = cols};
    b.plan.destinations[down] = {.device = gpu,
                                 .address = address(bf16_at + 24 * 2),
                                 .bytes = 32 * 64 * 2,
                                 .row_pitch = bf16_pitch,
                                 .dtype = DType::kBF16};
    b.plan.destinations_only = true;
    auto unconverted = load_source(m.dir.path().string(), b);
    if (!unconverted) FAIL(unconverted.error().to_string());
    for (std::uint64_t r = 0; r < 32; ++r) {
      for (std::uint64_t c = 8; c < 24; ++c) {
        const float f = as_float(stored(m, o0, r, c));
        const std::uint16_t h = stored(m, o0, r, c);
        std::memcpy(want.data() + r * f32_pitch + (4 + c - 8) * 4, &f, 4);
        std::memcpy(want.data() + bf16_at + r * bf16_pitch + (4 + c - 8) * 2, &h, 2);
      }
      for (std::uint64_t c = 0; c < 64; ++c) {
        const float f = as_float(stored(m, down, r, c));
        const std::uint16_t h = stored(m, down, r, c);
        std::memcpy(want.data() + r * f32_pitch + (24 + c) * 4, &f, 4);
        std::memcpy(want.data() + bf16_at + r * bf16_pitch + (24 + c) * 2, &h, 2);
      }
    }
    std::vector<std::byte> back(total);
    REQUIRE(cuda::copy_to_host(back.data(), pool->data(), total, 0));
    REQUIRE(back == want);
    const DeviceTensor* t = unconverted->find(o0);
    REQUIRE(t != nullptr);
    CHECK(t->strides == std::vector<std::int64_t>{92, 1});
    CHECK(model->find("lm_head.weight") != nullptr);
  }
}
