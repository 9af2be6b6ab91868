// Which decode jobs a load needs (PlanOptions::dequantize / quantize) and what they produce.
// Placement (regions, offsets) is done afterwards by the arena layout in plan.cpp.
#pragma once

#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler::detail {

// The packed parts of a weight decoded on a GPU are copied to a lane's scratch each starting
// on this boundary (the alignment cudaMalloc gives, enough for any element type); a tensor
// rank's slices of them are cut into the scratch arena on it too.
inline constexpr std::uint64_t kDecodePartAlignment = 256;

// Repacking (PlanOptions::repack): whether `lt` needs it (GPTQ v1, GPTQ with g_idx, AWQ GEMM),
// the parameters it has after, and the parts a repack of a weight of `lt`'s geometry (a whole
// weight, or a tensor rank's shard of one) writes, whose scales are `scales_shape`.
bool needs_repack(const formats::LogicalTensor& lt);
formats::QuantParams repacked_params(const formats::LogicalTensor& lt);
Result<std::vector<DecodeOutput>> repack_outputs(const formats::LogicalTensor& lt, DType scales_dtype,
                                                 const Shape& scales_shape);

// formats::quantized_layout with the weight's name on its error (too many scales, overflow).
Result<formats::QuantizedLayout> named_quantized_layout(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                                                        formats::QuantizeTarget target);

// Whether quantize-on-load applies to this tensor (see PlanOptions::quantize).
bool is_quantizable_weight(const formats::TensorEntry& t);

// Jobs in a deterministic order: dequantize and requantize jobs by logical name, then repack
// jobs, then quantize and contiguous jobs in catalog order. Outputs have name, dtype, shape and
// bytes; inputs list catalog indices.
Result<std::vector<DecodeJob>> plan_decode_jobs(const formats::Catalog& catalog, const formats::QuantizedCatalog& quant,
                                                const PlanOptions& options);

// A kContiguous job for each strided view (formats::TensorEntry::strides) among the tensors
// `parts` does not mark as parts of a quantized weight and no job in `taken` already gathers, in
// catalog order; these need one with or without a policy. A strided part of a quantized weight
// is kUnsupported naming it.
Result<std::vector<DecodeJob>> contiguous_jobs(const formats::Catalog& catalog, const std::vector<bool>& parts,
                                               const std::vector<DecodeJob>& taken, const PlanOptions& options);

// Per catalog tensor: true when it is a part of a quantized weight (never dtype-converted).
std::vector<bool> quantized_parts(const formats::Catalog& catalog, const formats::QuantizedCatalog& quant);

}  // namespace qload::scheduler::detail
