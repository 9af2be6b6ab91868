#include "plan/quant_sharding.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "qload/formats/gguf.hpp"
#include "qload/formats/quant_pack.hpp"

namespace qload::scheduler::detail {
namespace {

using Range = std::pair<std::uint64_t, std::uint64_t>;

// How one logical dimension (N or K) lies along one dimension of a part: logical index x is
// stored index x * num / den (packed words, groups, blocks), on stored dim `dim`.
struct Axis {
  int dim = -1;  // -1: the part does not vary along this logical dimension (replicated over it)
  std::uint64_t num = 1;
  std::uint64_t den = 1;
};
struct PartMap {
  Axis n, k;
};

Error weight_error(const formats::LogicalTensor& lt, std::string message) {
  return Error(Errc::kUnsupported, std::move(message)).with_tensor(lt.name);
}

// The part map of a scale (or zero point) part: by the weight's scale layout, in groups of `g`
// columns or blocks of `block_rows` x `block_cols`.
PartMap scale_map(const formats::QuantParams& p, std::uint64_t g, std::uint64_t block_rows, std::uint64_t block_cols) {
  switch (p.scale_layout) {
    case formats::ScaleLayout::kTensor: return {};
    case formats::ScaleLayout::kRow: return {.n = {0, 1, 1}};
    case formats::ScaleLayout::kGroup: return {.n = {0, 1, 1}, .k = {1, 1, g}};
    case formats::ScaleLayout::kBlock: return {.n = {0, 1, block_rows}, .k = {1, 1, block_cols}};
    case formats::ScaleLayout::kColumn: break;  // refused in part_map
  }
  return {};
}

// The part map of `role` of a compressed-tensors packed weight, or none for a role it has not.
std::optional<PartMap> ct_packed_map(const formats::QuantParams& p, std::uint64_t g, std::string_view role) {
  // Words hold 32/b fields (the padded layout), or a dense bitstream cut only where a
  // boundary falls on a word's start.
  const Axis packed = p.dense_bitstream ? Axis{.num = p.bits, .den = 32} : Axis{.num = 1, .den = 32 / p.bits};
  if (role == "weight_packed") return PartMap{.n = {0, 1, 1}, .k = {1, packed.num, packed.den}};
  if (role == "weight_scale") return scale_map(p, g, 1, 1);
  if (role == "weight_zero_point") {
    PartMap map = scale_map(p, g, 1, 1);
    map.n = {0, packed.num, packed.den};  // packed along N
    return map;
  }
  if (role == "weight_g_idx") return PartMap{.k = {0, 1, 1}};
  if (role == "weight_shape") return PartMap{};  // whole, then rewritten per shard
  return std::nullopt;
}

// The part map of `role` for the weight's scheme and scale layout.
Result<PartMap> part_map(const formats::LogicalTensor& lt, std::string_view role) {
  const formats::QuantParams& p = lt.params;
  const std::uint64_t g =
      p.group_size == 0 || p.group_size > lt.cols ? std::max<std::uint64_t>(lt.cols, 1) : p.group_size;
  if (p.scale_layout == formats::ScaleLayout::kColumn)
    return fail(weight_error(lt,
                             "tensor-parallel splits inside FP8 experts stored transposed (Llama-4's fbgemm "
                             "layout, a scale per column) are not supported; split them by whole experts"));
  switch (p.scheme) {
    case formats::QuantScheme::kGptq:
      if (role == "qweight") return PartMap{.n = {1, 1, 1}, .k = {0, p.bits, 32}};
      if (role == "qzeros") return PartMap{.n = {1, p.bits, 32}, .k = {0, 1, g}};
      if (role == "scales") return PartMap{.n = {1, 1, 1}, .k = {0, 1, g}};
      if (role == "g_idx") return PartMap{.k = {0, 1, 1}};
      break;
    case formats::QuantScheme::kAwqGemm:
      if (role == "qweight") return PartMap{.n = {1, 1, 8}, .k = {0, 1, 1}};
      if (role == "qzeros") return PartMap{.n = {1, 1, 8}, .k = {0, 1, g}};
      if (role == "scales") return PartMap{.n = {1, 1, 1}, .k = {0, 1, g}};
      break;
    case formats::QuantScheme::kFp8:
      if (role == "weight") return PartMap{.n = {0, 1, 1}, .k = {1, 1, 1}};
      if (role == "weight_scale" || role == "weight_scale_inv") return scale_map(p, g, p.block_rows, p.block_cols);
      if (role == "input_scale") return PartMap{};
      break;
    case formats::QuantScheme::kCtInt:
      if (role == "weight") return PartMap{.n = {0, 1, 1}, .k = {1, 1, 1}};
      if (role == "weight_scale" || role == "weight_zero_point") return scale_map(p, g, 1, 1);
      if (role == "weight_g_idx") return PartMap{.k = {0, 1, 1}};
      break;
    case formats::QuantScheme::kCtPacked:
      if (const std::optional<PartMap> map = ct_packed_map(p, g, role)) return *map;
      break;
    case formats::QuantScheme::kGgml: {
      // Rows of whole blocks: N splits anywhere, K on block boundaries (bytes per element
      // block_bytes / block_elems).
      const formats::GgmlBlockSize size = formats::ggml_block_size(p.ggml_type);
      if (lt.shape.rank() != 2 || size.elems == 0)
        return fail(weight_error(
            lt, fmt::format("tensor-parallel splits of {}-D GGML weights are not supported", lt.shape.rank())));
      if (role == "blocks") return PartMap{.n = {0, 1, 1}, .k = {1, size.bytes, size.elems}};
      break;
    }
    case formats::QuantScheme::kBnb8:
      if (role == "weight") return PartMap{.n = {0, 1, 1}, .k = {1, 1, 1}};
      if (role == "SCB") return PartMap{.n = {0, 1, 1}};
      if (role == "weight_format") return PartMap{};
      break;
    case formats::QuantScheme::kNvfp4:
      // Two E2M1 codes a byte, one E4M3 scale per 16 columns; the global scales stay whole.
      if (role == "weight_packed" || role == "weight") return PartMap{.n = {0, 1, 1}, .k = {1, 1, 2}};
      if (role == "weight_scale") return scale_map(p, g, 1, 1);
      if (role == "weight_global_scale" || role == "weight_scale_2" || role == "input_global_scale" ||
          role == "input_scale")
        return PartMap{};
      break;
    case formats::QuantScheme::kMxfp4:
      // gpt-oss: blocks [N, K/32, 16] and scales [N, K/32]; compressed-tensors: weight_packed
      // [N, K/2] and weight_scale [N, K/32]. K cuts on 32-column groups.
      if (role == "blocks" || role == "scales") return PartMap{.n = {0, 1, 1}, .k = {1, 1, 32}};
      if (role == "weight_packed") return PartMap{.n = {0, 1, 1}, .k = {1, 1, 2}};
      if (role == "weight_scale") return scale_map(p, g, 1, 1);
      if (role == "input_global_scale" || role == "input_scale") return PartMap{};
      break;
    case formats::QuantScheme::kAwqGemv:
    case formats::QuantScheme::kBnb4:  // blocks run across rows of the flattened weight
      return fail(weight_error(lt, fmt::format("tensor-parallel splits of {} weights are not supported",
                                               formats::quant_scheme_name(p.scheme))));
  }
  return fail(weight_error(lt, fmt::format("no tensor-parallel split is known for its '{}' part", role)));
}

// Logical range [a, b) of a dimension of `total` as stored indices; a boundary must fall on a
// stored index (the end of the dimension may be a partial word or block).
Result<Range> stored_range(const formats::LogicalTensor& lt, std::string_view role, char which, Range r,
                           std::uint64_t total, const Axis& axis) {
  const auto at = [&](std::uint64_t x) -> Result<std::uint64_t> {
    if (x == total) return (x * axis.num + axis.den - 1) / axis.den;
    if (x * axis.num % axis.den != 0)
      return fail(
          Error(Errc::kInvalidArgument,
                fmt::format("a rank boundary at {} = {} falls inside a packed word, group or scale block of its "
                            "'{}' part ({} of {} per stored index)",
                            which, x, role, axis.den / std::gcd(axis.num, axis.den), which))
              .with_tensor(lt.name));
    return x * axis.num / axis.den;
  };
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t a, at(r.first));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t b, at(r.second));
  return Range{a, b};
}

// compressed-tensors weight_shape says (N, K) of the weight its parts decode to: each shard's
// copy says the shard's, in the part's own dtype.
Status rewrite_weight_shape(const formats::LogicalTensor& lt, const formats::TensorEntry& part,
                            const std::vector<Range>& dims, std::vector<ShardSlice>& slices) {
  if (part.dtype != DType::kI64 && part.dtype != DType::kI32)
    return fail(weight_error(lt, fmt::format("its 'weight_shape' part is {}, not I64 or I32", dtype_name(part.dtype))));
  // One (N, K) pair, or one per expert of a stacked weight (N being each expert's).
  const std::uint64_t pairs = std::max<std::uint64_t>(1, lt.experts);
  for (std::size_t r = 0; r < slices.size(); ++r) {
    const std::uint64_t values[2] = {dims[r].first / pairs, dims[r].second};
    std::vector<std::byte>& bytes = slices[r].literal;
    bytes.resize(static_cast<std::size_t>(part.nbytes));
    for (std::size_t i = 0; i < 2 * pairs && (i + 1) * dtype_info(part.dtype).block_bytes <= bytes.size(); ++i) {
      if (part.dtype == DType::kI64) {
        const auto v = static_cast<std::int64_t>(values[i % 2]);
        std::memcpy(bytes.data() + i * 8, &v, 8);
      } else {
        const auto v = static_cast<std::int32_t>(values[i % 2]);  // a shard is no larger than the weight it records
        std::memcpy(bytes.data() + i * 4, &v, 4);
      }
    }
  }
  return {};
}

// A K split of a weight with g_idx: g_idx keeps the whole weight's group indices, so the
// group-indexed parts (scales, zero points) stay whole and the shards say how many groups.
bool keeps_global_groups(const formats::LogicalTensor& lt, bool splits_k) {
  return splits_k && (lt.part("g_idx") || lt.part("weight_g_idx"));
}

// How part `role` is cut: its part map, with group-indexed parts whole under global groups.
Result<PartMap> cut_map(const formats::LogicalTensor& lt, std::string_view role, bool global_groups) {
  QLOAD_ASSIGN_OR_RETURN(PartMap map, part_map(lt, role));
  const bool group_indexed =
      role == "scales" || role == "qzeros" || role == "weight_scale" || role == "weight_zero_point";
  if (global_groups && group_indexed) map.k.dim = -1;
  return map;
}

// Each rank's (N, K) from the logical slices of one [N, K] weight, N times `experts` (1: not stacked).
std::vector<std::pair<std::uint64_t, std::uint64_t>> shard_dims(const std::vector<ShardSlice>& logical,
                                                                std::uint64_t experts) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> dims;
  for (const ShardSlice& s : logical) {
    std::uint64_t rows = 0;
    for (const Range& r : s.rows) rows += r.second - r.first;
    dims.emplace_back(experts * rows, s.col_end - s.col_begin);
  }
  return dims;
}

// A split inside every expert of a stacked weight: each expert's [N, K] splits as a 2-D
// weight would (rows, halves or cols), and every part [E, ...] is cut the same way in each
// expert, as one column range of a view that folds E (and the dims before the cut) into rows.
Result<QuantShards> inside_expert_slices(const formats::Catalog& catalog, const formats::LogicalTensor& lt, Split split,
                                         std::uint32_t ranks) {
  const std::uint64_t experts = lt.experts, n = lt.rows / lt.experts, k = lt.cols;
  formats::LogicalTensor one = lt;  // one expert, as the part maps and packed shapes see it
  one.rows = n;
  one.experts = 0;
  one.shape = lt.params.scheme == formats::QuantScheme::kGgml ? Shape{n, k} : Shape{};
  const Split flat = split == Split::kExpertRows     ? Split::kRows
                     : split == Split::kExpertHalves ? Split::kHalves
                                                     : Split::kCols;
  formats::TensorEntry logical;
  logical.name = lt.name;
  logical.shape = Shape{n, k};
  QLOAD_ASSIGN_OR_RETURN(const std::vector<ShardSlice> logical_slices,
                         shard_slices(logical, flat, ranks, formats::ModelGeometry{}));
  QuantShards out{.parts = {}, .dims = shard_dims(logical_slices, experts), .groups = 0, .experts = experts};
  const bool splits_k = flat == Split::kCols;
  const bool global_groups = keeps_global_groups(lt, splits_k);
  if (global_groups) {
    QLOAD_ASSIGN_OR_RETURN(const formats::PackedShapes whole, formats::packed_shapes(one));
    out.groups = whole.groups;
  }
  for (const auto& [role, index] : lt.parts) {
    QLOAD_ASSIGN_OR_RETURN(const PartMap map, cut_map(one, role, global_groups));
    const formats::TensorEntry& part = catalog.tensors[index];
    const Axis& axis = splits_k ? map.k : map.n;
    const std::size_t d = static_cast<std::size_t>(axis.dim + 1);  // the cut dim of the stacked part
    std::vector<ShardSlice> slices;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      const ShardSlice& ls = logical_slices[r];
      std::uint64_t rest = 1;
      for (std::size_t i = 1; i < part.shape.rank(); ++i) rest *= part.shape[i];
      ShardSlice s{.col_begin = 0, .col_end = rest, .rows = {{0, part.shape[0]}}, .shape = part.shape};
      if (axis.dim >= 0) {
        if (d >= part.shape.rank())
          return fail(
              weight_error(lt, fmt::format("its '{}' part {} has no dim {} to cut", role, part.shape.to_string(), d)));
        std::vector<Range> stored;
        for (const Range& range : splits_k ? std::vector<Range>{{ls.col_begin, ls.col_end}} : ls.rows) {
          QLOAD_ASSIGN_OR_RETURN(const Range st,
                                 stored_range(one, role, splits_k ? 'K' : 'N', range, splits_k ? k : n, axis));
          stored.push_back(st);
        }
        const std::uint64_t a = part.shape[d];
        std::uint64_t outer = 1, inner = 1;
        for (std::size_t i = 0; i < d; ++i) outer *= part.shape[i];
        for (std::size_t i = d + 1; i < part.shape.rank(); ++i) inner *= part.shape[i];
        const bool halves = stored.size() == 2;
        if (halves &&
            (a % 2 != 0 || stored[1].first != a / 2 + stored[0].first || stored[1].second != a / 2 + stored[0].second))
          return fail(weight_error(lt, fmt::format("its '{}' part {} does not hold the two halves of every expert's "
                                                   "N in two equal halves of dim {}",
                                                   role, part.shape.to_string(), d)));
        const std::uint64_t width = stored[0].second - stored[0].first;
        s.view_rows = halves ? 2 * outer : outer;
        s.rows = {{0, s.view_rows}};
        s.col_begin = stored[0].first * inner;
        s.col_end = stored[0].second * inner;
        std::vector<std::uint64_t> dims(part.shape.dims().begin(), part.shape.dims().end());
        dims[d] = halves ? 2 * width : width;
        s.shape = Shape(std::move(dims));
      }
      slices.push_back(std::move(s));
    }
    if (role == "weight_shape") QLOAD_TRY(rewrite_weight_shape(lt, part, out.dims, slices));
    out.parts.push_back(std::move(slices));
  }
  return out;
}

// Stacked experts [E, N, K]: every part carries E as its leading dim, so an experts split
// (or `rows`, dim 0 of the [E, N, K] weight) cuts every part along it and each rank's parts are
// a stacked weight of E / ranks experts. Splitting inside each expert is not done yet.
Result<QuantShards> stacked_shard_slices(const formats::Catalog& catalog, const formats::LogicalTensor& lt, Split split,
                                         std::uint32_t ranks) {
  const std::uint64_t experts = lt.experts, n = lt.rows / lt.experts;
  if (splits_inside_experts(split)) return inside_expert_slices(catalog, lt, split, ranks);
  const bool whole = split == Split::kReplicate;
  if (!whole && split != Split::kRows && split != Split::kExperts)
    return fail(weight_error(lt, fmt::format("a split by {} of its {} stacked experts is not supported: split them "
                                             "by experts, or inside every expert with expert_rows, expert_halves or "
                                             "expert_cols",
                                             split_name(split), experts)));
  if (!whole && experts % ranks != 0)
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("cannot split {} stacked experts over {} ranks: {} is not a multiple of {}", experts,
                                  ranks, experts, ranks))
                    .with_tensor(lt.name));
  const std::uint64_t per = whole ? experts : experts / ranks;
  QuantShards out;
  out.experts = per;
  out.dims.assign(ranks, {per * n, lt.cols});
  for (const auto& [role, index] : lt.parts) {
    const formats::TensorEntry& part = catalog.tensors[index];
    std::uint64_t rest = 1;
    for (std::size_t i = 1; i < part.shape.rank(); ++i) rest *= part.shape[i];
    std::vector<std::uint64_t> dims(part.shape.dims().begin(), part.shape.dims().end());
    dims.front() = per;
    std::vector<ShardSlice> slices;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      const std::uint64_t first = whole ? 0 : r * per;
      slices.push_back(
          ShardSlice{.col_begin = 0, .col_end = rest, .rows = {{first, first + per}}, .shape = Shape(dims)});
    }
    out.parts.push_back(std::move(slices));
  }
  return out;
}

}  // namespace

Result<QuantShards> quantized_shard_slices(const formats::Catalog& catalog, const formats::LogicalTensor& lt,
                                           Split split, std::uint32_t ranks, const formats::ModelGeometry& geometry) {
  if (lt.experts > 0) return stacked_shard_slices(catalog, lt, split, ranks);
  // The logical split, as a plain [N, K] tensor would take it.
  formats::TensorEntry logical;
  logical.name = lt.name;
  logical.shape = Shape{lt.rows, lt.cols};
  QLOAD_ASSIGN_OR_RETURN(const std::vector<ShardSlice> logical_slices, shard_slices(logical, split, ranks, geometry));
  QuantShards out{.parts = {}, .dims = shard_dims(logical_slices, 1), .groups = 0, .experts = 0};
  const bool splits_k = split == Split::kCols;
  const bool global_groups = keeps_global_groups(lt, splits_k);
  if (global_groups) {
    QLOAD_ASSIGN_OR_RETURN(const formats::PackedShapes whole, formats::packed_shapes(lt));
    out.groups = whole.groups;
  }
  for (const auto& [role, index] : lt.parts) {
    QLOAD_ASSIGN_OR_RETURN(const PartMap map, cut_map(lt, role, global_groups));
    const formats::TensorEntry& part = catalog.tensors[index];
    const std::uint64_t dim0 = part.shape.rank() == 0 ? 1 : part.shape[0];
    std::uint64_t rest = 1;
    for (std::size_t i = 1; i < part.shape.rank(); ++i) rest *= part.shape[i];
    std::vector<ShardSlice> slices;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      const ShardSlice& ls = logical_slices[r];
      ShardSlice s{.col_begin = 0, .col_end = rest, .rows = {{0, dim0}}, .shape = {}};
      const Axis& axis = splits_k ? map.k : map.n;
      if (axis.dim >= 0) {
        std::vector<Range> ranges;
        if (splits_k) {
          ranges.push_back({ls.col_begin, ls.col_end});
        } else {
          ranges = ls.rows;
        }
        std::vector<Range> stored;
        for (const Range& range : ranges) {
          QLOAD_ASSIGN_OR_RETURN(
              const Range st, stored_range(lt, role, splits_k ? 'K' : 'N', range, splits_k ? lt.cols : lt.rows, axis));
          stored.push_back(st);
        }
        if (axis.dim == 0) {
          s.rows = stored;
        } else {
          if (stored.size() != 1 || part.shape.rank() != 2)
            return fail(weight_error(lt, fmt::format("its '{}' part packs N along columns: a split into several ranges "
                                                     "(fused heads) is not supported",
                                                     role)));
          s.col_begin = stored.front().first;
          s.col_end = stored.front().second;
        }
      }
      std::uint64_t rows = 0;
      for (const Range& range : s.rows) rows += range.second - range.first;
      std::vector<std::uint64_t> dims;
      if (part.shape.rank() == 0) {
        s.shape = part.shape;
      } else {
        dims.push_back(rows);
        if (part.shape.rank() == 2) dims.push_back(s.col_end - s.col_begin);
        for (std::size_t i = 2; i < part.shape.rank(); ++i) dims.push_back(part.shape[i]);
        s.shape = Shape(std::move(dims));
      }
      slices.push_back(std::move(s));
    }
    if (role == "weight_shape") QLOAD_TRY(rewrite_weight_shape(lt, part, out.dims, slices));
    out.parts.push_back(std::move(slices));
  }
  return out;
}

}  // namespace qload::scheduler::detail
