// Tensor-parallel splits of quantized weights: the logical [N, K] weight splits like a plain
// one (sharding.hpp), and every stored part is cut consistently along the dimension that
// carries N or K, in its own units (packed words, groups, scale blocks), so each rank's parts
// are a quantized weight of the shard's geometry that the CPU and GPU decoders decode as is.
//   GPTQ      qweight [K*b/32, N], qzeros [G, N*b/32], scales [G, N]; g_idx replicated for an
//             N split. A K split of a weight with g_idx slices qweight and g_idx and keeps
//             scales and zeros whole (g_idx holds the whole weight's group indices, as in
//             vLLM's act-order layout): the shard's QuantParams::groups says so
//   AWQ GEMM  qweight [K, N/8], qzeros [G, N/8], scales [G, N]
//   FP8       weight [N, K]; scale per tensor (replicated), per row, per group, per block
//   CT int8   weight [N, K]; scale / zero point per tensor, row or group; weight_g_idx as GPTQ's
//   CT packed weight_packed [N, K*b/32]; weight_zero_point [N*b/32, G]; scales and weight_g_idx
//             as CT int8; weight_shape, (N, K) of the whole weight, rewritten as each shard's
//   stacked experts [E, N, K] (any scheme): every part cut along its leading E, a rank holding
//             E / ranks whole experts (split `experts` or `rows`); splits inside experts refused
// A rank boundary inside a packed word, a group or a scale block is refused, naming the
// weight, the part and the sizes. AWQ GEMV is refused.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/model_config.hpp"
#include "qload/formats/quant.hpp"
#include "qload/scheduler/sharding.hpp"

namespace qload::scheduler::detail {

struct QuantShards {
  std::vector<std::vector<ShardSlice>> parts;                 // [part, in lt.parts order][rank]
  std::vector<std::pair<std::uint64_t, std::uint64_t>> dims;  // [rank]: the shard's N, K
  std::uint64_t groups = 0;                                   // QuantParams::groups of every shard (0: from its K)
  std::uint64_t experts = 0;                                  // stacked experts: each shard's count
};

Result<QuantShards> quantized_shard_slices(const formats::Catalog& catalog, const formats::LogicalTensor& lt,
                                           Split split, std::uint32_t ranks, const formats::ModelGeometry& geometry);

}  // namespace qload::scheduler::detail
