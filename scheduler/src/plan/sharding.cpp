#include "qload/scheduler/sharding.hpp"

#include <fmt/format.h>

namespace qload::scheduler {
namespace {

using Rows = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

Error split_error(const formats::TensorEntry& t, std::string message) {
  return Error(Errc::kInvalidArgument, std::move(message)).with_tensor(t.name);
}

bool contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// Rank r's rows when `count` units of `unit` rows each, starting at row `base`, are split
// over `ranks` ranks; units fewer than ranks are replicated (unit r * count / ranks).
Rows unit_rows(std::uint64_t base, std::uint64_t count, std::uint64_t unit, std::uint32_t rank, std::uint32_t ranks) {
  if (count >= ranks) {
    const std::uint64_t per = count / ranks;
    return {{base + rank * per * unit, base + (rank + 1) * per * unit}};
  }
  const std::uint64_t u = std::uint64_t{rank} * count / ranks;
  return {{base + u * unit, base + (u + 1) * unit}};
}

}  // namespace

std::string_view split_name(Split split) noexcept {
  switch (split) {
    case Split::kReplicate: return "replicate";
    case Split::kRows: return "rows";
    case Split::kCols: return "cols";
    case Split::kHeads: return "heads";
    case Split::kHalves: return "halves";
    case Split::kExperts: return "experts";
    case Split::kExpertRows: return "expert_rows";
    case Split::kExpertHalves: return "expert_halves";
    case Split::kExpertCols: return "expert_cols";
    case Split::kRegion: return "region";
  }
  return "?";
}

bool splits_inside_experts(Split split) noexcept {
  return split == Split::kExpertRows || split == Split::kExpertHalves || split == Split::kExpertCols;
}

Result<Split> parse_split(std::string_view text) {
  for (Split s : {Split::kReplicate, Split::kRows, Split::kCols, Split::kHeads, Split::kHalves, Split::kExperts,
                  Split::kExpertRows, Split::kExpertHalves, Split::kExpertCols})
    if (split_name(s) == text) return s;
  return fail(Errc::kInvalidArgument,
              fmt::format("split '{}' is not replicate, rows, cols, heads, halves, experts, expert_rows, "
                          "expert_halves or expert_cols",
                          text));
}

Split llama_split(std::string_view name) {
  const bool weight = name.ends_with(".weight");
  const bool bias = name.ends_with(".bias");
  if (!weight && !bias) return Split::kReplicate;
  // Stacked experts ("mlp.experts.gate_up_proj.weight", [E, N, K]) are not split by default:
  // a rule names how (`experts`). Per-expert weights ("mlp.experts.3.up_proj.weight") split
  // like any linear layer.
  if (const std::size_t at = name.find(".experts."); at != std::string_view::npos) {
    const std::size_t next = at + std::string_view(".experts.").size();
    if (next < name.size() && (name[next] < '0' || name[next] > '9')) return Split::kReplicate;
  }
  if (contains(name, "q_proj.") || contains(name, "k_proj.") || contains(name, "v_proj.") ||
      contains(name, "qkv_proj."))
    return Split::kHeads;
  if (contains(name, "gate_up_proj.")) return Split::kHalves;
  if (contains(name, "gate_proj.") || contains(name, "up_proj.")) return Split::kRows;
  // Row-parallel: the input dimension splits; the bias is added once, after the reduction.
  if (contains(name, "o_proj.") || contains(name, "down_proj.")) return weight ? Split::kCols : Split::kReplicate;
  if (weight && (contains(name, "embed_tokens.") || name.starts_with("lm_head."))) return Split::kRows;
  return Split::kReplicate;
}

namespace {

// A split inside every expert of a stacked [E, N, K] tensor: N (rows, halves) or K (cols) cut
// the same way in each expert, one column range of the [E, N*K], [2E, N/2*K] or [E*N, K] view.
Result<std::vector<ShardSlice>> expert_slices(const formats::TensorEntry& t, Split split, std::uint32_t ranks) {
  const Shape& shape = t.shape;
  const bool halves = split == Split::kExpertHalves, cols = split == Split::kExpertCols;
  const std::uint64_t parts = halves ? 2 * std::uint64_t{ranks} : ranks;
  if (shape.rank() != 3 || (cols ? shape[2] : shape[1]) % parts != 0)
    return fail(split_error(t, fmt::format("cannot split {} of every expert of {} over {} ranks: it must be 3-D "
                                           "[E, N, K] with {} a multiple of {}",
                                           cols ? "K" : "N", shape.to_string(), ranks, cols ? "K" : "N", parts)));
  const std::uint64_t e = shape[0], n = shape[1], k = shape[2];
  const std::uint64_t rows = cols ? e * n : halves ? 2 * e : e;  // of the view
  const std::uint64_t width = cols ? k / ranks : n / parts * k;  // each rank's columns of it
  std::vector<ShardSlice> out(ranks);
  for (std::uint32_t r = 0; r < ranks; ++r) {
    ShardSlice& s = out[r];
    s.view_rows = rows;
    s.rows = {{0, rows}};
    s.col_begin = r * width;
    s.col_end = (r + 1) * width;
    s.shape = cols ? Shape{e, n, k / ranks} : Shape{e, n / ranks, k};
  }
  return out;
}

// A split by heads: each rank's rows of the q, k or v projection (or of the three fused),
// from the attention geometry in config.json.
Status head_rows(const formats::TensorEntry& t, std::uint32_t ranks, const formats::ModelGeometry& g,
                 std::vector<Rows>& rows) {
  const Shape& shape = t.shape;
  const std::uint64_t dim0 = shape.rank() == 0 ? 1 : shape[0];
  if (!g.heads || !g.kv_heads || !g.head_dim)
    return fail(split_error(t,
                            "a split by heads needs num_attention_heads, num_key_value_heads and head_dim (or "
                            "hidden_size) in config.json"));
  const std::uint64_t h = *g.heads, kv = *g.kv_heads, d = *g.head_dim;
  if (h % ranks != 0)
    return fail(split_error(t, fmt::format("cannot split {} attention heads over {} ranks", h, ranks)));
  if (kv >= ranks ? kv % ranks != 0 : ranks % kv != 0)
    return fail(split_error(t, fmt::format("cannot split or replicate {} key/value heads over {} ranks", kv, ranks)));
  for (std::uint32_t r = 0; r < ranks; ++r) {
    if (dim0 == h * d) {
      rows[r] = unit_rows(0, h, d, r, ranks);
    } else if (dim0 == kv * d) {
      rows[r] = unit_rows(0, kv, d, r, ranks);
    } else if (dim0 == (h + 2 * kv) * d) {  // fused q, k, v
      rows[r] = unit_rows(0, h, d, r, ranks);
      rows[r].push_back(unit_rows(h * d, kv, d, r, ranks).front());
      rows[r].push_back(unit_rows((h + kv) * d, kv, d, r, ranks).front());
    } else {
      return fail(split_error(t, fmt::format("dim 0 of {} is not heads x head_dim ({} x {}), kv_heads x head_dim "
                                             "({} x {}) or their fused q, k, v ({})",
                                             shape.to_string(), h, d, kv, d, (h + 2 * kv) * d)));
    }
  }
  return {};
}

// Each rank's slice of a tensor of `shape`: its `rows`, and with `col_parts` > 1 its part of
// the `rest` columns (the product of the dims after the first).
std::vector<ShardSlice> rank_slices(const Shape& shape, std::vector<Rows> rows, std::uint64_t rest,
                                    std::uint64_t col_parts) {
  std::vector<ShardSlice> out(rows.size());
  for (std::uint32_t r = 0; r < rows.size(); ++r) {
    ShardSlice& s = out[r];
    s.col_begin = col_parts > 1 ? rest / col_parts * r : 0;
    s.col_end = col_parts > 1 ? rest / col_parts * (r + 1) : rest;
    s.rows = std::move(rows[r]);
    std::uint64_t n = 0;
    for (const auto& [b, e] : s.rows) n += e - b;
    std::vector<std::uint64_t> dims;
    if (shape.rank() == 0) {
      s.shape = shape;
      continue;
    }
    dims.push_back(n);
    if (col_parts > 1) {
      dims.push_back(s.col_end - s.col_begin);
    } else {
      for (std::size_t i = 1; i < shape.rank(); ++i) dims.push_back(shape[i]);
    }
    s.shape = Shape(std::move(dims));
  }
  return out;
}

}  // namespace

Result<ShardSlice> region_slice(const formats::TensorEntry& t, const TensorRegion& region) {
  const Shape& shape = t.shape;
  const bool rows = region.dim == 0 && shape.rank() >= 1;
  const bool cols = region.dim == 1 && shape.rank() == 2;
  if (!rows && !cols)
    return fail(split_error(t, fmt::format("a region of dim {} of {}: only dim 0, or dim 1 of a 2-D tensor", region.dim,
                                           shape.to_string())));
  const std::uint64_t size = shape[region.dim];
  if (region.begin > region.end || region.end > size)
    return fail(split_error(t, fmt::format("region [{}, {}) of dim {} of {} is out of bounds", region.begin, region.end,
                                           region.dim, shape.to_string())));
  ShardSlice s;
  std::uint64_t rest = 1;
  for (std::size_t i = 1; i < shape.rank(); ++i) rest *= shape[i];
  s.rows = {rows ? std::pair{region.begin, region.end} : std::pair{std::uint64_t{0}, shape[0]}};
  s.col_begin = cols ? region.begin : 0;
  s.col_end = cols ? region.end : rest;
  std::vector<std::uint64_t> dims(shape.dims().begin(), shape.dims().end());
  dims[region.dim] = region.end - region.begin;
  s.shape = Shape(std::move(dims));
  return s;
}

Result<std::vector<ShardSlice>> shard_slices(const formats::TensorEntry& t, Split split, std::uint32_t ranks,
                                             const formats::ModelGeometry& g) {
  if (splits_inside_experts(split)) return expert_slices(t, split, ranks);
  const Shape& shape = t.shape;
  const std::uint64_t dim0 = shape.rank() == 0 ? 1 : shape[0];
  std::uint64_t rest = 1;
  for (std::size_t i = 1; i < shape.rank(); ++i) rest *= shape[i];
  std::vector<Rows> rows(ranks);
  std::uint64_t col_parts = 1;  // kCols: columns split in `ranks` parts
  switch (split) {
    case Split::kReplicate:
      for (Rows& r : rows) r = {{0, dim0}};
      break;
    case Split::kRows:
    case Split::kExperts:
      if (dim0 % ranks != 0)
        return fail(split_error(t, fmt::format("cannot split dim 0 of {} over {} ranks: {} is not a multiple of {}",
                                               shape.to_string(), ranks, dim0, ranks)));
      for (std::uint32_t r = 0; r < ranks; ++r) rows[r] = unit_rows(0, ranks, dim0 / ranks, r, ranks);
      break;
    case Split::kCols:
      if (shape.rank() != 2 || shape[1] % ranks != 0)
        return fail(split_error(t, fmt::format("cannot split dim 1 of {} over {} ranks: it must be 2-D with dim 1 a "
                                               "multiple of {}",
                                               shape.to_string(), ranks, ranks)));
      for (Rows& r : rows) r = {{0, dim0}};
      col_parts = ranks;
      break;
    case Split::kHalves:
      if (dim0 % (2 * std::uint64_t{ranks}) != 0)
        return fail(split_error(t, fmt::format("cannot split the two halves of dim 0 of {} over {} ranks: {} is not a "
                                               "multiple of {}",
                                               shape.to_string(), ranks, dim0, 2 * ranks)));
      for (std::uint32_t r = 0; r < ranks; ++r) {
        rows[r] = unit_rows(0, ranks, dim0 / 2 / ranks, r, ranks);
        const Rows second = unit_rows(dim0 / 2, ranks, dim0 / 2 / ranks, r, ranks);
        rows[r].push_back(second.front());
      }
      break;
    case Split::kExpertRows:
    case Split::kExpertHalves:
    case Split::kExpertCols: return expert_slices(t, split, ranks);  // taken above
    case Split::kRegion: return fail(split_error(t, "a region is asked per tensor (region_slice), not split"));
    case Split::kHeads: QLOAD_TRY(head_rows(t, ranks, g, rows)); break;
  }
  return rank_slices(shape, std::move(rows), rest, col_parts);
}

}  // namespace qload::scheduler
