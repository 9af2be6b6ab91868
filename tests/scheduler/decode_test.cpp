// Decode on load through the scheduler: quantize on load (each target) and dequantize on load,
// on real safetensors files. The codecs themselves are checked against independent references
// in tests/formats/quant_*_test.cpp; here the question is whether the scheduler feeds them
// the right bytes (parts through scratch, rows split over tasks, several devices) and exposes
// the right tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/formats/safetensors_writer.hpp"
#include "qload/scheduler/load.hpp"
#include "support/scratch.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// A small llama-like checkpoint: bf16 linear weights with finite values, an embedding and a
// norm (which quantize-on-load must leave alone), one tensor spanning several chunks.
struct Checkpoint {
  ScratchDir dir;
  std::map<std::string, std::vector<std::uint16_t>> bf16;  // name -> values
  std::map<std::string, Shape> shapes;
};

void add_bf16(Checkpoint& c, const std::string& name, std::uint64_t rows, std::uint64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<std::uint16_t> v(rows * cols);
  for (auto& x : v) {
    const float f = dist(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = formats::f32_to_bf16_bits(bits);
  }
  c.bf16[name] = std::move(v);
  c.shapes[name] = rows == 1 ? Shape{cols} : Shape{rows, cols};
}

void write(Checkpoint& c, const std::string& config) {
  std::vector<formats::WriterTensor> tensors;
  for (const auto& [name, v] : c.bf16)
    tensors.push_back(
        {.name = name, .dtype = DType::kBF16, .shape = c.shapes[name], .bytes = std::as_bytes(std::span(v))});
  REQUIRE(formats::write_safetensors(c.dir.file("model.safetensors"), tensors));
  std::ofstream(c.dir.file("config.json")) << config;
}

float bf16_value(std::uint16_t h) {
  const std::uint32_t bits = formats::bf16_to_f32_bits(h);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// What `model` holds, written as a checkpoint (model.safetensors) with `config` as config.json.
void write_loaded(const Model& model, const ScratchDir& dir, const std::string& config) {
  std::vector<formats::WriterTensor> tensors;
  for (const DeviceTensor& t : model.tensors()) tensors.push_back({t.name, t.dtype, t.shape, t.bytes(), {}});
  REQUIRE(formats::write_safetensors(dir.file("model.safetensors"), tensors));
  std::ofstream(dir.file("config.json")) << config;
}

LoadOptions small_chunks(std::vector<Device> devices) {
  LoadOptions o;
  o.plan.devices = std::move(devices);
  o.plan.chunk_bytes = o.staging.slot_bytes = 64 << 10;  // the 300 KiB weight spans chunks
  o.staging.total_bytes = 4 * o.staging.slot_bytes;
  return o;
}

// `c` quantized on load to `target` on one cpu, written to `out` as a quantized checkpoint whose
// config.json is `config`: a checkpoint of known weights in a quantized format. Returns what the
// quantizing load gave (the reference for the parts).
Model write_quantized(const Checkpoint& c, formats::QuantizeTarget target, const ScratchDir& out,
                      const std::string& config) {
  LoadOptions q = small_chunks({Device{}});
  q.plan.quantize = target;
  auto quantized = load_source(c.dir.path().string(), q);
  REQUIRE(quantized);
  write_loaded(*quantized, out, config);
  return std::move(*quantized);
}

}  // namespace

TEST_CASE("decode: quantize on load makes weight + scale for linear weights only, within the error bound",
          "[scheduler][decode]") {
  Checkpoint c;
  std::mt19937 rng(7);
  add_bf16(c, "model.embed_tokens.weight", 64, 96, rng);
  add_bf16(c, "model.layers.0.mlp.up_proj.weight", 300, 520, rng);  // 312 KB: several chunks
  add_bf16(c, "model.layers.1.self_attn.q_proj.weight", 130, 200, rng);
  add_bf16(c, "model.norm.weight", 1, 96, rng);
  // Mixtures of experts' routers stay as they are; their experts are linear weights.
  add_bf16(c, "model.layers.1.block_sparse_moe.gate.weight", 4, 96, rng);
  add_bf16(c, "model.layers.1.mlp.router.weight", 4, 96, rng);
  add_bf16(c, "model.layers.1.mlp.shared_expert_gate.weight", 1, 96, rng);
  add_bf16(c, "model.layers.1.block_sparse_moe.experts.0.w1.weight", 64, 96, rng);
  write(c, R"({"model_type": "llama"})");
  for (const auto target : {formats::QuantizeTarget::kFp8Tensor, formats::QuantizeTarget::kFp8Row,
                            formats::QuantizeTarget::kFp8Block, formats::QuantizeTarget::kInt8Row}) {
    DYNAMIC_SECTION(formats::quantize_target_name(target)) {
      LoadOptions options = small_chunks({Device{}, Device{.index = 1}});
      options.plan.quantize = target;
      auto model = load_source(c.dir.path().string(), options);
      REQUIRE(model);
      CHECK(model->report().decoded_tensors == 3);
      for (const std::string name :
           {"model.embed_tokens.weight", "model.norm.weight", "model.layers.1.block_sparse_moe.gate.weight",
            "model.layers.1.mlp.router.weight", "model.layers.1.mlp.shared_expert_gate.weight"}) {
        const DeviceTensor* t = model->find(name);
        REQUIRE(t != nullptr);
        CHECK(t->dtype == DType::kBF16);
        CHECK(std::memcmp(t->data, c.bf16[name].data(), t->nbytes) == 0);
      }
      for (const std::string name : {"model.layers.0.mlp.up_proj.weight", "model.layers.1.self_attn.q_proj.weight",
                                     "model.layers.1.block_sparse_moe.experts.0.w1.weight"}) {
        const DeviceTensor* w = model->find(name);
        REQUIRE(w != nullptr);
        const std::uint64_t rows = c.shapes[name][0], cols = c.shapes[name][1];
        const formats::QuantizedLayout layout = formats::quantized_layout(rows, cols, target).value();
        const std::string scale_name = name.substr(0, name.size() - 6) + layout.scale_suffix;
        const DeviceTensor* s = model->find(scale_name);
        REQUIRE(s != nullptr);
        CHECK(w->dtype == layout.weight_dtype);
        CHECK(s->shape == layout.scale_shape);
        // The scheduler's output equals the codec run directly on the file's bytes.
        std::vector<std::byte> weight(layout.weight_bytes), scale(layout.scale_bytes);
        REQUIRE(
            formats::quantize(std::as_bytes(std::span(c.bf16[name])), DType::kBF16, rows, cols, target, weight, scale));
        CHECK(std::memcmp(w->data, weight.data(), weight.size()) == 0);
        CHECK(std::memcmp(s->data, scale.data(), scale.size()) == 0);
      }
    }
  }
}

TEST_CASE("decode: a quantized checkpoint written by qload is dequantized on load, split over tasks and devices",
          "[scheduler][decode]") {
  Checkpoint c;
  std::mt19937 rng(11);
  add_bf16(c, "model.layers.0.mlp.down_proj.weight", 700, 384, rng);
  add_bf16(c, "model.layers.1.mlp.down_proj.weight", 257, 130, rng);
  add_bf16(c, "model.norm.weight", 1, 130, rng);
  write(c, R"({"model_type": "llama"})");
  // Step 1: quantize on load (fp8 128x128 blocks), write what was loaded as an HF fp8 checkpoint.
  ScratchDir fp8;
  const Model quantized = write_quantized(
      c, formats::QuantizeTarget::kFp8Block, fp8,
      R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}})");
  // Without a policy the parts load byte for byte, described for a server's own kernels.
  {
    auto kept = load_source(fp8.path().string(), small_chunks({Device{}}));
    REQUIRE(kept);
    REQUIRE(kept->quantized().size() == 2);
    const QuantizedWeight& w = kept->quantized()[0];
    CHECK(w.name == "model.layers.0.mlp.down_proj.weight");
    CHECK(w.params.scheme == formats::QuantScheme::kFp8);
    CHECK((w.rows == 700 && w.cols == 384));
    REQUIRE(w.parts.size() == 2);
    for (const auto& [role, index] : w.parts) {
      const DeviceTensor& part = kept->tensors()[index];
      const DeviceTensor* original = quantized.find(part.name);
      REQUIRE(original != nullptr);
      CHECK(part.dtype == original->dtype);
      CHECK(std::memcmp(part.data, original->data, part.nbytes) == 0);
      CHECK(reinterpret_cast<std::uintptr_t>(part.data) % dtype_info(part.dtype).block_bytes == 0);
      CHECK(((role == "weight" && part.dtype == DType::kF8_E4M3) || role == "weight_scale_inv"));
    }
  }
  // Step 2: dequantize it on load to f32 over two host devices; compare with the original.
  for (const DType out : {DType::kF32, DType::kBF16}) {
    DYNAMIC_SECTION(dtype_name(out)) {
      LoadOptions d = small_chunks({Device{}, Device{.index = 1}});
      d.plan.dequantize = out;
      auto model = load_source(fp8.path().string(), d);
      if (!model) FAIL(model.error().to_string());
      CHECK(model->report().decoded_tensors == 2);
      CHECK(model->find("model.layers.0.mlp.down_proj.weight_scale_inv") == nullptr);  // parts are not exposed
      for (const std::string name : {"model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"}) {
        const DeviceTensor* w = model->find(name);
        REQUIRE(w != nullptr);
        CHECK(w->dtype == out);
        CHECK(w->shape == c.shapes[name]);
        const auto& original = c.bf16[name];
        REQUIRE(w->nbytes == original.size() * dtype_info(out).block_bytes);
        std::vector<float> got(original.size());
        REQUIRE(formats::convert(w->bytes(), out, std::as_writable_bytes(std::span(got)), DType::kF32));
        // FP8 E4M3 keeps 3 mantissa bits: rounding costs at most 2^-4 of the value, or half
        // the subnormal step (scale * 2^-10, scale = block amax / 448 < 0.5 / 448) near zero;
        // bf16 output rounds once more (2^-8 of the value, about 2^-4 once compounded).
        float worst = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          const float x = bf16_value(original[i]);
          const float err = std::fabs(got[i] - x);
          worst = std::max(worst, err - std::fabs(x) * (1.0f / 16 + 1.0f / 128));
        }
        CHECK(worst <= 0.5f / 448 / 1024);
      }
      CHECK(model->find("model.norm.weight") != nullptr);
    }
  }
}

namespace {

// A one-weight GPTQ v1 act-order (or AWQ GEMM) checkpoint built with the formats encoders,
// and the weight it holds, dequantized from the written parts.
struct PackedCheckpoint {
  ScratchDir dir;
  std::vector<float> weight;  // [N, K]
};

constexpr std::uint64_t kN = 48, kK = 256, kGroup = 64;

void write_packed(PackedCheckpoint& c, formats::QuantScheme scheme) {
  std::mt19937 rng(3);
  formats::LogicalTensor t{.name = "model.layers.0.mlp.up_proj.weight", .rows = kN, .cols = kK};
  t.params = {.scheme = scheme, .bits = 4, .group_size = kGroup, .sym = false, .gptq_version = 1};
  auto shapes = formats::packed_shapes(t);
  REQUIRE(shapes);
  const bool gptq = scheme == formats::QuantScheme::kGptq;
  std::vector<std::uint8_t> q(kK * kN), zeros(shapes->groups * kN);
  for (auto& v : q) v = static_cast<std::uint8_t>(rng() % 16);
  for (auto& v : zeros) v = static_cast<std::uint8_t>(rng() % 16);
  std::vector<std::uint16_t> scales(shapes->groups * kN);
  for (auto& s : scales) s = static_cast<std::uint16_t>(0x1c00 + rng() % 0x400);  // f16 in [2^-8, 2^-7)
  std::vector<std::int32_t> g_idx(kK);  // act-order: groups are runs of G in a random column order
  std::vector<std::uint32_t> order(kK);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::uint64_t pos = 0; pos < kK; ++pos) g_idx[order[pos]] = static_cast<std::int32_t>(pos / kGroup);
  std::vector<std::byte> qweight(shapes->weight.nbytes(DType::kI32).value()),
      qzeros(shapes->zeros.nbytes(DType::kI32).value());
  REQUIRE(
      (gptq ? formats::pack_gptq(t, q, zeros, qweight, qzeros) : formats::pack_awq_gemm(t, q, zeros, qweight, qzeros)));
  std::vector<formats::WriterTensor> parts = {
      {.name = "model.layers.0.mlp.up_proj.qweight", .dtype = DType::kI32, .shape = shapes->weight, .bytes = qweight},
      {.name = "model.layers.0.mlp.up_proj.qzeros", .dtype = DType::kI32, .shape = shapes->zeros, .bytes = qzeros},
      {.name = "model.layers.0.mlp.up_proj.scales",
       .dtype = DType::kF16,
       .shape = shapes->scales,
       .bytes = std::as_bytes(std::span(scales))}};
  if (gptq)
    parts.push_back({.name = "model.layers.0.mlp.up_proj.g_idx",
                     .dtype = DType::kI32,
                     .shape = Shape{kK},
                     .bytes = std::as_bytes(std::span(g_idx))});
  REQUIRE(formats::write_safetensors(c.dir.file("model.safetensors"), parts));
  std::ofstream(c.dir.file("config.json"))
      << (gptq
              ? R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": true, "sym": false}})"
              : R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm", "zero_point": true}})");
  // The reference weight: the same parts decoded as they are stored.
  std::vector<formats::PartBytes> stored;
  for (const auto& p : parts) stored.push_back({.role = "", .dtype = p.dtype, .shape = p.shape, .bytes = p.bytes});
  stored[0].role = "qweight";
  stored[1].role = "qzeros";
  stored[2].role = "scales";
  if (gptq) stored[3].role = "g_idx";
  c.weight.resize(kN * kK);
  REQUIRE(formats::dequantize_rows(t, stored, 0, kN, DType::kF32, std::as_writable_bytes(std::span(c.weight))));
}

}  // namespace

TEST_CASE("decode: repack turns GPTQ v1 act-order and AWQ GEMM into GPTQ v2 with contiguous groups",
          "[scheduler][decode][repack]") {
  for (const auto scheme : {formats::QuantScheme::kGptq, formats::QuantScheme::kAwqGemm}) {
    DYNAMIC_SECTION(formats::quant_scheme_name(scheme)) {
      PackedCheckpoint c;
      write_packed(c, scheme);
      LoadOptions options;
      options.plan.repack = true;
      auto model = load_source(c.dir.path().string(), options);
      if (!model) FAIL(model.error().to_string());
      REQUIRE(model->quantized().size() == 1);
      const QuantizedWeight& w = model->quantized()[0];
      CHECK(w.params.scheme == formats::QuantScheme::kGptq);
      CHECK(w.params.gptq_version == 2);
      formats::LogicalTensor t{.name = w.name, .params = w.params, .rows = w.rows, .cols = w.cols};
      std::vector<formats::PartBytes> parts;
      std::vector<std::int32_t> perm(kK);
      std::iota(perm.begin(), perm.end(), 0);
      for (const auto& [role, index] : w.parts) {
        const DeviceTensor& part = model->tensors()[index];
        CHECK(part.name == "model.layers.0.mlp.up_proj." + role);
        if (role == "perm") {
          std::memcpy(perm.data(), part.data, part.nbytes);
          continue;
        }
        parts.push_back({.role = role, .dtype = part.dtype, .shape = part.shape, .bytes = part.bytes()});
        if (role == "g_idx") {  // contiguous now: non-decreasing
          std::vector<std::int32_t> g(kK);
          std::memcpy(g.data(), part.data, part.nbytes);
          CHECK(std::is_sorted(g.begin(), g.end()));
        }
      }
      std::vector<float> repacked(kN * kK);
      REQUIRE(formats::dequantize_rows(t, parts, 0, kN, DType::kF32, std::as_writable_bytes(std::span(repacked))));
      std::size_t mismatches = 0;
      for (std::uint64_t n = 0; n < kN; ++n)
        for (std::uint64_t k = 0; k < kK; ++k)
          mismatches += repacked[n * kK + k] != c.weight[n * kK + static_cast<std::uint64_t>(perm[k])];
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("decode: repacking under tensor parallelism repacks each rank's shard, act-order sorted within it",
          "[scheduler][decode][repack][parallel]") {
  for (const auto scheme : {formats::QuantScheme::kGptq, formats::QuantScheme::kAwqGemm})
    for (const Split split : {Split::kRows, Split::kCols}) {
      DYNAMIC_SECTION(formats::quant_scheme_name(scheme) << " split " << split_name(split)) {
        PackedCheckpoint c;
        write_packed(c, scheme);
        LoadOptions options;
        options.plan.repack = true;
        options.plan.parallel.tensor = 2;
        options.plan.devices = {Device{.index = 0}, Device{.index = 1}};
        options.plan.split = [split](std::string_view) -> Result<std::optional<Split>> {
          return std::optional<Split>(split);
        };
        auto model = load_source(c.dir.path().string(), options);
        if (!model) FAIL(model.error().to_string());
        REQUIRE(model->quantized().size() == 2);
        bool permuted = false;
        for (const QuantizedWeight& w : model->quantized()) {
          const std::uint64_t rank = w.device == "cpu" ? 0 : 1;
          INFO("rank " << rank);
          // The rank's slice of the weight: rows (N) or columns (K) in two halves.
          const std::uint64_t n0 = split == Split::kRows ? rank * kN / 2 : 0;
          const std::uint64_t k0 = split == Split::kCols ? rank * kK / 2 : 0;
          REQUIRE(w.rows == (split == Split::kRows ? kN / 2 : kN));
          REQUIRE(w.cols == (split == Split::kCols ? kK / 2 : kK));
          CHECK(w.params.gptq_version == 2);
          formats::LogicalTensor t{.name = w.name, .params = w.params, .rows = w.rows, .cols = w.cols};
          std::vector<formats::PartBytes> parts;
          std::vector<std::int32_t> perm(w.cols);
          std::iota(perm.begin(), perm.end(), 0);
          for (const auto& [role, index] : w.parts) {
            const DeviceTensor& part = model->tensors()[index];
            if (role == "perm") {
              std::memcpy(perm.data(), part.data, part.nbytes);
              continue;
            }
            parts.push_back({.role = role, .dtype = part.dtype, .shape = part.shape, .bytes = part.bytes()});
          }
          for (std::size_t k = 0; k < perm.size(); ++k) permuted = permuted || perm[k] != static_cast<std::int32_t>(k);
          std::vector<float> got(w.rows * w.cols);
          REQUIRE(formats::dequantize_rows(t, parts, 0, w.rows, DType::kF32, std::as_writable_bytes(std::span(got))));
          std::size_t mismatches = 0;
          for (std::uint64_t n = 0; n < w.rows; ++n)
            for (std::uint64_t k = 0; k < w.cols; ++k)
              mismatches += got[n * w.cols + k] != c.weight[(n0 + n) * kK + k0 + static_cast<std::uint64_t>(perm[k])];
          CHECK(mismatches == 0);
        }
        CHECK(permuted == (scheme == formats::QuantScheme::kGptq));  // act-order GPTQ is sorted per shard
      }
    }
}

TEST_CASE("decode: per-weight rules override the global policies; a placement hook moves tensors",
          "[scheduler][decode]") {
  Checkpoint c;
  std::mt19937 rng(21);
  add_bf16(c, "model.embed_tokens.weight", 64, 96, rng);
  add_bf16(c, "model.layers.0.mlp.up_proj.weight", 200, 256, rng);
  add_bf16(c, "model.layers.0.self_attn.q_proj.weight", 130, 200, rng);
  add_bf16(c, "model.layers.1.mlp.down_proj.weight", 96, 200, rng);
  add_bf16(c, "model.norm.weight", 1, 96, rng);
  write(c, R"({"model_type": "llama"})");

  LoadOptions o = small_chunks({Device{}, Device{.index = 1}});
  o.plan.quantize = formats::QuantizeTarget::kInt8Row;  // the global policy: rules override it
  std::vector<std::string> asked;
  o.plan.weight_policy = [&asked](std::string_view name) -> Result<std::optional<WeightPolicy>> {
    asked.emplace_back(name);
    if (name.find("up_proj") != std::string_view::npos)
      return WeightPolicy{.action = WeightPolicy::Action::kQuantize, .target = formats::QuantizeTarget::kFp8Block};
    if (name.find("q_proj") != std::string_view::npos) return WeightPolicy{};  // keep
    return std::optional<WeightPolicy>();
  };
  o.plan.place = [](std::string_view name) -> Result<std::optional<std::uint32_t>> {
    if (name == "model.norm.weight") return std::optional<std::uint32_t>(1);
    return std::optional<std::uint32_t>(0);
  };
  auto model = load_source(c.dir.path().string(), o);
  if (!model) FAIL(model.error().to_string());
  // Asked once per quantizable weight (embeddings and norms are never quantized).
  std::ranges::sort(asked);
  CHECK(asked == std::vector<std::string>{"model.layers.0.mlp.up_proj.weight", "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.1.mlp.down_proj.weight"});
  const auto dtype_of = [&](const char* name) {
    const DeviceTensor* t = model->find(name);
    REQUIRE(t != nullptr);
    return t->dtype;
  };
  CHECK(dtype_of("model.layers.0.mlp.up_proj.weight") == DType::kF8_E4M3);
  CHECK(model->find("model.layers.0.mlp.up_proj.weight_scale_inv") != nullptr);
  CHECK(dtype_of("model.layers.0.self_attn.q_proj.weight") == DType::kBF16);
  CHECK(model->find("model.layers.0.self_attn.q_proj.weight_scale") == nullptr);
  CHECK(dtype_of("model.layers.1.mlp.down_proj.weight") == DType::kI8);
  CHECK(model->find("model.layers.1.mlp.down_proj.weight_scale") != nullptr);
  CHECK(model->find("model.norm.weight")->device == "cpu:1");
  CHECK(model->find("model.embed_tokens.weight")->device == "cpu");
  // A decode output goes where its input was placed.
  CHECK(model->find("model.layers.1.mlp.down_proj.weight")->device == "cpu");

  SECTION("a hook's error fails the plan, naming the tensor") {
    o.plan.weight_policy = [](std::string_view) -> Result<std::optional<WeightPolicy>> {
      return fail(Errc::kInvalidArgument, "recipe.lua:3: no such target");
    };
    auto failed = load_source(c.dir.path().string(), o);
    REQUIRE_FALSE(failed);
    CHECK(failed.error().message().find("recipe.lua:3") != std::string::npos);
  }
  SECTION("a placement outside the devices is kInvalidArgument naming the tensor") {
    o.plan.place = [](std::string_view) -> Result<std::optional<std::uint32_t>> {
      return std::optional<std::uint32_t>(2);
    };
    auto failed = load_source(c.dir.path().string(), o);
    REQUIRE_FALSE(failed);
    CHECK(failed.error().code() == Errc::kInvalidArgument);
    CHECK(failed.error().tensor().has_value());
  }
}

TEST_CASE("decode: per-weight rules dequantize some quantized weights and keep others packed", "[scheduler][decode]") {
  Checkpoint c;
  std::mt19937 rng(22);
  add_bf16(c, "model.layers.0.mlp.down_proj.weight", 300, 256, rng);
  add_bf16(c, "model.layers.1.mlp.down_proj.weight", 130, 256, rng);
  write(c, R"({"model_type": "llama"})");
  ScratchDir fp8;
  const Model quantized = write_quantized(c, formats::QuantizeTarget::kFp8Row, fp8,
                                          R"({"quantization_config": {"quant_method": "fbgemm_fp8"}})");

  LoadOptions o = small_chunks({Device{}});
  o.plan.weight_policy = [](std::string_view name) -> Result<std::optional<WeightPolicy>> {
    if (name.find("layers.0") != std::string_view::npos)
      return WeightPolicy{.action = WeightPolicy::Action::kDequantize, .dtype = DType::kF32};
    return std::optional<WeightPolicy>();  // no global policy: kept packed
  };
  auto model = load_source(fp8.path().string(), o);
  if (!model) FAIL(model.error().to_string());
  CHECK(model->report().decoded_tensors == 1);
  CHECK(model->find("model.layers.0.mlp.down_proj.weight")->dtype == DType::kF32);
  CHECK(model->find("model.layers.0.mlp.down_proj.weight_scale") == nullptr);
  CHECK(model->find("model.layers.1.mlp.down_proj.weight")->dtype == DType::kF8_E4M3);
  CHECK(model->find("model.layers.1.mlp.down_proj.weight_scale") != nullptr);

  SECTION("quantizing an already quantized weight is refused, naming it") {
    o.plan.weight_policy = [](std::string_view) -> Result<std::optional<WeightPolicy>> {
      return WeightPolicy{.action = WeightPolicy::Action::kQuantize};
    };
    auto failed = load_source(fp8.path().string(), o);
    REQUIRE_FALSE(failed);
    CHECK(failed.error().code() == Errc::kInvalidArgument);
    CHECK(failed.error().tensor() == std::optional<std::string_view>("model.layers.0.mlp.down_proj.weight"));
  }
}

TEST_CASE(
    "decode: a dequantized weight lands in the caller's memory, bit for bit the arena load's; its parts are "
    "not destinations",
    "[scheduler][decode][destinations]") {
  Checkpoint c;
  std::mt19937 rng(12);
  add_bf16(c, "model.layers.0.mlp.down_proj.weight", 300, 256, rng);
  add_bf16(c, "model.norm.weight", 1, 256, rng);
  write(c, R"({"model_type": "llama"})");
  ScratchDir fp8;
  const Model quantized = write_quantized(
      c, formats::QuantizeTarget::kFp8Block, fp8,
      R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}})");
  const std::string w = "model.layers.0.mlp.down_proj.weight";
  LoadOptions arena = small_chunks({Device{}});
  arena.plan.dequantize = DType::kBF16;
  auto reference = load_source(fp8.path().string(), arena);
  REQUIRE(reference);
  const DeviceTensor* want = reference->find(w);
  REQUIRE(want != nullptr);
  // The caller's buffer with 64 guard bytes each side.
  std::vector<std::byte> memory(want->nbytes + 128, std::byte{0x5A});
  LoadOptions into = arena;
  into.plan.destinations[w] = {.address = reinterpret_cast<std::uintptr_t>(memory.data() + 64),
                               .bytes = want->nbytes,
                               .dtype = DType::kBF16,
                               .shape = Shape{300, 256}};
  into.plan.destinations_only = true;
  auto model = load_source(fp8.path().string(), into);
  if (!model) FAIL(model.error().to_string());
  CHECK(std::memcmp(memory.data() + 64, want->data, want->nbytes) == 0);
  for (std::size_t g = 0; g < 64; ++g)
    CHECK((memory[g] == std::byte{0x5A} && memory[64 + want->nbytes + g] == std::byte{0x5A}));
  CHECK(model->size() == 1);  // the norm (no destination) was not loaded
  CHECK(model->report().decoded_tensors == 1);
  // Refused at plan time, naming the tensor: a part of the weight, another dtype, a region.
  auto catalog = open_source(fp8.path().string());
  REQUIRE(catalog);
  PlanOptions bad = into.plan;
  bad.destinations[w].dtype = DType::kF32;
  bad.destinations[w].bytes = want->nbytes * 2;
  bad.destinations[w].shape.reset();
  auto plan = make_plan(*catalog, bad);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().to_string().find("decoding produces BF16") != std::string::npos);
  bad = into.plan;
  bad.destinations[w].region = TensorRegion{.dim = 0, .begin = 0, .end = 128};
  plan = make_plan(*catalog, bad);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().code() == Errc::kUnsupported);
  bad = into.plan;
  bad.destinations[w].row_pitch = 256 * 2 + 64;  // a decoded tensor goes into packed rows only
  plan = make_plan(*catalog, bad);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().code() == Errc::kUnsupported);
  bad = into.plan;
  bad.destinations["model.layers.0.mlp.down_proj.weight_scale_inv"] = bad.destinations[w];
  bad.destinations.erase(w);
  bad.destinations_only = false;  // the weight is dequantized, so its scale is a decode input
  plan = make_plan(*catalog, bad);
  REQUIRE_FALSE(plan);
  CHECK(plan.error().to_string().find("give the decoded tensor the destination") != std::string::npos);

  // Kept packed, a part converts into the caller's float dtype as a server's own copy would (F32
  // block scales into a BF16 parameter): each value rounded to nearest, ties to even.
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale_inv";
  LoadOptions kept = small_chunks({Device{}});
  auto packed = load_source(fp8.path().string(), kept);
  REQUIRE(packed);
  const DeviceTensor* f32 = packed->find(scale);
  REQUIRE(f32 != nullptr);
  REQUIRE(f32->dtype == DType::kF32);
  const std::size_t count = f32->nbytes / 4;
  std::vector<std::uint16_t> rounded(count), scales(count + 32, 0x5A5A);  // 16 guard values each side
  for (std::size_t i = 0; i < count; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, f32->data + 4 * i, 4);
    rounded[i] = static_cast<std::uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // finite scales
  }
  kept.plan.destinations[scale] = {
      .address = reinterpret_cast<std::uintptr_t>(scales.data() + 16), .bytes = count * 2, .dtype = DType::kBF16};
  kept.plan.destinations_only = true;
  auto converted = load_source(fp8.path().string(), kept);
  if (!converted) FAIL(converted.error().to_string());
  CHECK(std::memcmp(scales.data() + 16, rounded.data(), count * 2) == 0);
  for (std::size_t g = 0; g < 16; ++g) CHECK((scales[g] == 0x5A5A && scales[16 + count + g] == 0x5A5A));
  CHECK(converted->report().converted_tensors == 1);
}
