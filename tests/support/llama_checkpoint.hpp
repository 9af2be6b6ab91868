// A small llama-style checkpoint for parallel-layout tests, written with random bf16 values
// the tests keep, and what one device's copy of a tensor must hold (llama_splits.hpp).
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "qload/formats/safetensors_writer.hpp"
#include "qload/scheduler/model.hpp"
#include "support/llama_splits.hpp"
#include "support/scratch.hpp"

namespace qload::testing {

// Geometry: 8 heads, 2 kv heads (replicated from tp 4 on), head_dim 4, hidden 32,
// intermediate 64, vocab 64, 2 layers; layer 1 uses fused qkv_proj and gate_up_proj.
inline constexpr std::uint64_t kHeads = 8, kKv = 2, kHd = 4, kHidden = 32, kInter = 64, kVocab = 64, kLayers = 2;

struct Llama {
  ScratchDir dir;
  std::map<std::string, Shape> shapes;
  std::map<std::string, std::vector<std::uint16_t>> values;  // bf16, row-major
};

inline void make_model(Llama& m) {
  std::mt19937 rng(5);
  const auto add = [&](const std::string& name, Shape shape) {
    std::vector<std::uint16_t> v(shape.numel().value());
    for (auto& x : v) x = static_cast<std::uint16_t>(0x3c00 + rng() % 0x0400);  // finite bf16
    m.values[name] = std::move(v);
    m.shapes[name] = std::move(shape);
  };
  add("model.embed_tokens.weight", {kVocab, kHidden});
  for (std::uint64_t l = 0; l < kLayers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", {kHidden});
    if (l == 0) {
      add(p + "self_attn.q_proj.weight", {kHeads * kHd, kHidden});
      add(p + "self_attn.q_proj.bias", {kHeads * kHd});
      add(p + "self_attn.k_proj.weight", {kKv * kHd, kHidden});
      add(p + "self_attn.v_proj.weight", {kKv * kHd, kHidden});
      add(p + "mlp.gate_proj.weight", {kInter, kHidden});
      add(p + "mlp.up_proj.weight", {kInter, kHidden});
    } else {
      add(p + "self_attn.qkv_proj.weight", {(kHeads + 2 * kKv) * kHd, kHidden});
      add(p + "mlp.gate_up_proj.weight", {2 * kInter, kHidden});
    }
    add(p + "self_attn.o_proj.weight", {kHidden, kHeads * kHd});
    add(p + "self_attn.o_proj.bias", {kHidden});
    add(p + "mlp.down_proj.weight", {kHidden, kInter});
  }
  add("model.norm.weight", {kHidden});
  add("lm_head.weight", {kVocab, kHidden});
  std::vector<formats::WriterTensor> tensors;
  for (const auto& [name, v] : m.values)
    tensors.push_back(
        {.name = name, .dtype = DType::kBF16, .shape = m.shapes[name], .bytes = std::as_bytes(std::span(v))});
  REQUIRE(formats::write_safetensors(m.dir.file("model.safetensors"), tensors));
  std::ofstream(m.dir.file("config.json")) << fmt::format(
      R"({{"num_hidden_layers": {}, "hidden_size": {}, "num_attention_heads": {}, "num_key_value_heads": {}}})",
      kLayers, kHidden, kHeads, kKv);
}

inline bool has(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// The pipeline stage of a tensor: layer L on stage L * pp / layers; embeddings first, the rest
// of the layer-less tensors last.
inline std::uint64_t stage_of(const std::string& name, std::uint64_t pp) {
  for (std::uint64_t l = 0; l < kLayers; ++l)
    if (has(name, fmt::format(".layers.{}.", l))) return l * pp / kLayers;
  return has(name, "embed") ? 0 : pp - 1;
}

inline std::uint16_t stored(const Llama& m, const std::string& name, std::uint64_t row, std::uint64_t col) {
  const Shape& s = m.shapes.at(name);
  const std::uint64_t rest = s.rank() == 2 ? s[1] : 1;
  return m.values.at(name)[row * rest + col];
}

inline float as_float(std::uint16_t bf16) {
  const std::uint32_t bits = std::uint32_t{bf16} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Empty if `t` (rank r of tp, converted to f32 or not) holds exactly the reference's elements of
// tensor `name`, else what differs.
inline std::string copy_mismatch(const Llama& m, const std::string& name, const scheduler::DeviceTensor& t,
                                 std::uint64_t r, std::uint64_t tp, bool convert) {
  const SplitExpect e = expected_split(name, m.shapes.at(name), r, tp, {kHeads, kKv, kHd});
  const std::uint64_t width = e.col_end - e.col_begin;
  if (t.shape.numel().value() != e.rows.size() * width || t.shape[0] != e.rows.size())
    return fmt::format("shape {} for {} rows of {}", t.shape.to_string(), e.rows.size(), width);
  if (t.dtype != (convert ? DType::kF32 : DType::kBF16)) return "dtype";
  for (std::uint64_t i = 0; i < e.rows.size(); ++i)
    for (std::uint64_t j = 0; j < width; ++j) {
      const std::uint16_t want = stored(m, name, e.rows[i], e.col_begin + j);
      const std::uint64_t at = i * width + j;
      bool same = false;
      if (convert) {
        float got;
        std::memcpy(&got, t.data + at * 4, 4);
        same = got == as_float(want);
      } else {
        std::uint16_t got;
        std::memcpy(&got, t.data + at * 2, 2);
        same = got == want;
      }
      if (!same) return fmt::format("element ({}, {}) differs", i, j);
    }
  return {};
}

}  // namespace qload::testing
