// Tensor-parallel sharding: how one stored tensor splits over the tensor-parallel ranks.
//
// A tensor is viewed as [dim0, rest] (rest = the product of the other dimensions; 1 for 1-D).
// A shard is a column range of that view and a list of row ranges, concatenated by rows:
//   kRows     dim 0 in equal parts: column-parallel linears (q/k/v/gate/up weights and biases),
//             vocab-parallel embeddings and lm_head
//   kCols     dim 1 in equal parts (2-D only): row-parallel linears (o_proj, down_proj)
//   kHeads    dim 0 by attention heads from config.json: q_proj (num_attention_heads),
//             k_proj / v_proj (num_key_value_heads; each kv head replicated over
//             tensor / kv_heads ranks when there are fewer kv heads than ranks), and a fused
//             qkv_proj (its q, k and v sections, each split so)
//   kHalves   dim 0 as two stacked halves, each split in equal parts (fused gate_up_proj)
//   kReplicate every rank gets the whole tensor (norms, row-parallel biases, ...)
// Stacked MoE experts [E, N, K] (3-D):
//   kExperts       dim 0 in equal parts, like kRows: E / ranks whole experts (expert parallel)
//   kExpertRows    N of every expert in equal parts (column-parallel experts)
//   kExpertHalves  N of every expert as two halves, each in equal parts (fused gate_up experts)
//   kExpertCols    K of every expert in equal parts (row-parallel experts: down_proj)
// These view the tensor as [E, N*K], [2E, N/2*K] and [E*N, K] (ShardSlice::view_rows).
// Outside a parallel layout, a load may also ask for one region of a tensor (kRegion,
// PlanOptions::region): a server that cuts each tensor itself says which part it keeps.
// A split that does not divide evenly (rows, columns, heads) is refused, naming the tensor,
// the dimension and the sizes: a shard never cuts an element, a head or a row in two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/model_config.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"

namespace qload::scheduler {

// kExperts: dim 0 in equal parts like kRows, named for stacked MoE experts [E, N, K] (expert
// parallelism: each rank holds E / ranks whole experts, quantized parts included).
enum class Split : std::uint8_t {
  kReplicate,
  kRows,
  kCols,
  kHeads,
  kHalves,
  kExperts,
  kExpertRows,
  kExpertHalves,
  kExpertCols,
  kRegion  // PlanOptions::region's part of the tensor; never a rule's split
};
std::string_view split_name(Split split) noexcept;
// "replicate", "rows", "cols", "heads", "halves", "experts", "expert_rows", "expert_halves",
// "expert_cols"; kInvalidArgument otherwise.
bool splits_inside_experts(Split split) noexcept;  // kExpertRows, kExpertHalves, kExpertCols
Result<Split> parse_split(std::string_view text);

// A part of one tensor that a load asks for instead of the whole (PlanOptions::region): the
// range [begin, end) of dimension `dim`, which is dim 0 of any tensor or dim 1 of a 2-D one.
// An empty range (begin == end) gives an empty tensor, of which nothing is read.
struct TensorRegion {
  std::uint32_t dim = 0;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

// The default rule for llama-style names (Llama, Mistral, Qwen2, ...): see the table above.
Split llama_split(std::string_view name);

// One rank's part of a tensor: columns [col_begin, col_end) of the [dim0, rest] view, rows
// from each range in turn.
struct ShardSlice {
  std::uint64_t col_begin = 0;
  std::uint64_t col_end = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rows;  // [begin, end) ranges of the view's rows
  Shape shape;                                                // of the shard
  // The view's row count when it is not dim 0 (splits inside stacked experts view [E, N, K]
  // as [E*N, K] or [2E, N/2*K]); 0: dim 0.
  std::uint64_t view_rows = 0;
  // Non-empty: the shard's bytes are these, not the tensor's (a part that records the whole
  // weight's geometry, rewritten for the shard: compressed-tensors weight_shape).
  std::vector<std::byte> literal;
};

// Rows of the [rows, rest] view `slice` cuts `shape` into (1 for a scalar).
inline std::uint64_t view_row_count(const Shape& shape, const ShardSlice& slice) noexcept {
  if (slice.view_rows != 0) return slice.view_rows;
  return shape.rank() == 0 ? 1 : shape[0];
}

// The slices of `tensor` for ranks 0..ranks-1. kInvalidArgument naming the tensor for a
// split that does not fit (sizes, heads) or needs a geometry config.json does not give.
// The slice a region takes of `tensor`. kInvalidArgument naming the tensor for a region out of
// its bounds, or of a dimension other than those above.
Result<ShardSlice> region_slice(const formats::TensorEntry& tensor, const TensorRegion& region);

Result<std::vector<ShardSlice>> shard_slices(const formats::TensorEntry& tensor, Split split, std::uint32_t ranks,
                                             const formats::ModelGeometry& geometry);

}  // namespace qload::scheduler
