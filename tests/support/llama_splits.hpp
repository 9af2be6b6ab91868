// The reference for llama-style tensor-parallel splits (docs/parallel.md), written from the
// rules' definitions and sharing no code with scheduler/src/sharding.cpp: which rows of the
// [dim0, rest] view of a tensor rank r of tp holds, in order, and which column range.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qload/runtime/shape.hpp"

namespace qload::testing {

struct Heads {
  std::uint64_t heads = 0;
  std::uint64_t kv_heads = 0;
  std::uint64_t head_dim = 0;
};

struct SplitExpect {
  std::vector<std::uint64_t> rows;
  std::uint64_t col_begin = 0, col_end = 0;
};

// Rows of `heads` heads starting at row `base` that rank r holds: an even share, or with fewer
// heads than ranks the one head r * heads / tp.
inline std::vector<std::uint64_t> head_rows(std::uint64_t base, std::uint64_t heads, std::uint64_t head_dim,
                                            std::uint64_t r, std::uint64_t tp) {
  std::vector<std::uint64_t> out;
  const std::uint64_t first = heads >= tp ? r * (heads / tp) : r * heads / tp;
  const std::uint64_t count = heads >= tp ? heads / tp : 1;
  for (std::uint64_t h = first; h < first + count; ++h)
    for (std::uint64_t d = 0; d < head_dim; ++d) out.push_back(base + h * head_dim + d);
  return out;
}

inline SplitExpect expected_split(const std::string& name, const Shape& shape, std::uint64_t r, std::uint64_t tp,
                                  const Heads& g) {
  const auto has = [&](std::string_view part) { return name.find(part) != std::string::npos; };
  const std::uint64_t dim0 = shape[0];
  const std::uint64_t rest = shape.rank() == 2 ? shape[1] : 1;
  SplitExpect e{.rows = {}, .col_begin = 0, .col_end = rest};
  const auto even_rows = [&](std::uint64_t base, std::uint64_t n) {
    for (std::uint64_t i = r * n / tp; i < (r + 1) * n / tp; ++i) e.rows.push_back(base + i);
  };
  if (has("qkv_proj.")) {  // before v_proj: "qkv_proj." contains "v_proj."
    e.rows = head_rows(0, g.heads, g.head_dim, r, tp);
    for (std::uint64_t x : head_rows(g.heads * g.head_dim, g.kv_heads, g.head_dim, r, tp)) e.rows.push_back(x);
    for (std::uint64_t x : head_rows((g.heads + g.kv_heads) * g.head_dim, g.kv_heads, g.head_dim, r, tp))
      e.rows.push_back(x);
  } else if (has("q_proj.")) {
    e.rows = head_rows(0, g.heads, g.head_dim, r, tp);
  } else if (has("k_proj.") || has("v_proj.")) {
    e.rows = head_rows(0, g.kv_heads, g.head_dim, r, tp);
  } else if (has("gate_up_proj.")) {
    even_rows(0, dim0 / 2);
    even_rows(dim0 / 2, dim0 / 2);
  } else if (has("gate_proj.") || has("up_proj.") || has("embed_tokens.") || name.starts_with("lm_head.")) {
    even_rows(0, dim0);
  } else if ((has("o_proj.") || has("down_proj.")) && name.ends_with(".weight")) {
    for (std::uint64_t i = 0; i < dim0; ++i) e.rows.push_back(i);
    e.col_begin = r * rest / tp;
    e.col_end = (r + 1) * rest / tp;
  } else {
    for (std::uint64_t i = 0; i < dim0; ++i) e.rows.push_back(i);  // replicated
  }
  return e;
}

}  // namespace qload::testing
