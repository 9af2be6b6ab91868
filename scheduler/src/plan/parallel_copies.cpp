#include "plan/parallel_copies.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "plan/chunker.hpp"
#include "plan/decode_plan.hpp"
#include "plan/plan_arith.hpp"
#include "plan/quant_sharding.hpp"
#include "plan/shared_reads_plan.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/strided.hpp"

namespace qload::scheduler {

formats::LogicalTensor ShardedWeight::shard(const formats::LogicalTensor& whole, std::uint32_t rank) const {
  formats::LogicalTensor t = whole;
  std::tie(t.rows, t.cols) = dims[rank];
  t.params.groups = groups;
  t.experts = experts;
  t.shape = experts > 0 ? Shape{experts, t.rows / experts, t.cols} : Shape{};
  return t;
}

namespace detail {

namespace {

// The split of tensor (or quantized weight) `name` over the tensor ranks: the rule's, else the
// llama default.
Result<Split> split_of(const PlanOptions& options, const std::string& name) {
  if (options.parallel.tensor == 1) return Split::kReplicate;
  if (options.split) {
    auto asked = options.split(name);
    if (!asked) return fail(std::move(asked.error()).with_tensor(name));
    if (*asked) return **asked;
  }
  return llama_split(name);
}

}  // namespace

Result<std::map<std::uint32_t, PartShards>> plan_quantized_shards(const formats::Catalog& catalog,
                                                                  const PlanOptions& options,
                                                                  const formats::ModelGeometry& geometry, Plan& plan) {
  std::map<std::uint32_t, PartShards> out;
  if (options.parallel.tensor == 1 || !plan.decode.quant) return out;
  for (std::uint32_t l = 0; l < plan.decode.quant->logical.size(); ++l) {
    const formats::LogicalTensor& lt = plan.decode.quant->logical[l];
    QLOAD_ASSIGN_OR_RETURN(const Split split, split_of(options, lt.name));
    QLOAD_ASSIGN_OR_RETURN(detail::QuantShards shards,
                           detail::quantized_shard_slices(catalog, lt, split, options.parallel.tensor, geometry));
    for (std::size_t p = 0; p < lt.parts.size(); ++p)
      out[lt.parts[p].second] = PartShards{.split = split, .slices = std::move(shards.parts[p])};
    plan.decode.sharded_weights[l] =
        ShardedWeight{.dims = std::move(shards.dims), .groups = shards.groups, .experts = shards.experts};
  }
  return out;
}

namespace {

// The index into options.devices of the layout's device holding tensor rank `rank` of pipeline
// stage `stage` in data replica `replica` (docs/parallel.md), or nullopt when another process
// holds it (this one holds the layout's devices [process * n, (process + 1) * n)).
std::optional<std::uint32_t> local_device(const PlanOptions& options, std::uint32_t replica, std::uint32_t stage,
                                          std::uint32_t rank) {
  const ParallelLayout& par = options.parallel;
  const std::uint32_t global = (replica * par.pipeline + stage) * par.tensor + rank;
  const auto held = static_cast<std::uint32_t>(options.devices.size());
  if (global < par.process * held || global - par.process * held >= held) return std::nullopt;
  return global - par.process * held;
}

}  // namespace

Status place_shards(const formats::Catalog& catalog, std::uint32_t i, std::uint32_t stage, DType dtype,
                    const PlanOptions& options, const formats::ModelGeometry& geometry,
                    const std::map<std::uint32_t, PartShards>& part_shards, std::vector<std::uint64_t>& cursor,
                    Plan& plan) {
  const formats::TensorEntry& t = catalog.tensors[i];
  const ParallelLayout& par = options.parallel;
  Split split = Split::kReplicate;
  std::vector<ShardSlice> slices;
  if (const auto it = part_shards.find(i); it != part_shards.end()) {  // a part of a quantized weight
    split = it->second.split;
    slices = it->second.slices;
  } else {
    std::optional<TensorRegion> region;
    if (options.region) {
      auto asked = options.region(t.name);
      if (!asked) return fail(std::move(asked.error()).with_tensor(t.name));
      region = *asked;
    }
    if (region) {
      split = Split::kRegion;
      QLOAD_ASSIGN_OR_RETURN(ShardSlice slice, region_slice(t, *region));
      slices = {std::move(slice)};
    } else {
      QLOAD_ASSIGN_OR_RETURN(split, split_of(options, t.name));
      QLOAD_ASSIGN_OR_RETURN(slices, shard_slices(t, split, par.tensor, geometry));
    }
  }
  TensorPlacement& placed = plan.layout.tensors[i];
  placed = TensorPlacement{.first_shard = static_cast<std::uint32_t>(plan.copies.shards.size()), .dtype = dtype};
  const std::uint64_t element = dtype_info(dtype).block_bytes;
  if (detail::relays(options)) QLOAD_TRY(detail::list_copies(i, stage, dtype, slices, options, plan));
  for (std::uint32_t d = 0; d < par.data; ++d)
    for (std::uint32_t r = 0; r < par.tensor; ++r) {
      const std::optional<std::uint32_t> here = local_device(options, d, stage, r);
      if (!here) continue;  // another process's
      const std::uint32_t device = *here;
      ++placed.shard_count;
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, slices[r].shape.numel());
      const std::uint64_t bytes = numel * element;  // at most the tensor's placed bytes
      auto offset = take(cursor[device], bytes, options.tensor_alignment, options.devices[device].to_string());
      if (!offset) return fail(tensor_error(catalog, t, Errc::kOverflow, offset.error().message()));
      plan.copies.shards.push_back(ShardPlacement{.tensor = i,
                                                  .rank = r,
                                                  .region = device,
                                                  .offset = *offset,
                                                  .dtype = dtype,
                                                  .bytes = bytes,
                                                  .split = split,
                                                  .slice = slices[r]});
      QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, bytes));
    }
  if (placed.shard_count == 0) {  // every copy is another process's
    placed.region = kNoRegion;
    return {};
  }
  placed.region = plan.copies.shards[placed.first_shard].region;
  placed.offset = plan.copies.shards[placed.first_shard].offset;
  placed.bytes = plan.copies.shards[placed.first_shard].bytes;
  // Only the byte ranges this process's copies take are read, unless digests need them all.
  std::uint64_t needed = 0;
  for (const auto& [begin, end] : detail::shard_ranges(
           t, std::span(plan.copies.shards).subspan(placed.first_shard, placed.shard_count), options.max_gap_bytes))
    needed += end - begin;
  placed.partial = needed < t.nbytes && !options.whole_tensor_reads;
  // Large, unconverted, on host arenas, and split by whole rows with every byte read in exactly
  // one shard: read straight into the shards (no staging copy), as an unsplit tensor would be.
  std::uint64_t total = 0;
  bool eligible = dtype == t.dtype && options.direct_min_bytes > 0 && t.nbytes >= options.direct_min_bytes;
  for (std::uint32_t k = placed.first_shard; eligible && k < placed.first_shard + placed.shard_count; ++k) {
    const ShardPlacement& shard = plan.copies.shards[k];
    eligible = options.devices[shard.region].is_cpu() && shard.slice.literal.empty() && shard.slice.col_begin == 0 &&
               shard.slice.col_end * dtype_info(t.dtype).block_bytes * view_row_count(t.shape, shard.slice) == t.nbytes;
    total += shard.bytes;
  }
  placed.direct = eligible && total == (placed.partial ? needed : t.nbytes);
  plan.reads.direct_tensors += placed.direct ? 1 : 0;
  return {};
}

Status check_parallel(const PlanOptions& options, const Plan& plan) {
  const ParallelLayout& par = options.parallel;
  if (par.tensor == 0 || par.pipeline == 0 || par.data == 0)
    return fail(Errc::kInvalidArgument, "tensor, pipeline and data parallel sizes must be at least 1");
  if (par.processes == 1 && options.devices.size() != par.devices())
    return fail(Errc::kInvalidArgument,
                fmt::format("tensor {} x pipeline {} x data {} parallel needs {} devices, {} given", par.tensor,
                            par.pipeline, par.data, par.devices(), options.devices.size()));
  if (par.processes > 1 && options.devices.size() * par.processes != par.devices())
    return fail(Errc::kInvalidArgument,
                fmt::format("tensor {} x pipeline {} x data {} parallel needs {} devices, but {} processes hold {} "
                            "each ({} in all)",
                            par.tensor, par.pipeline, par.data, par.devices(), par.processes, options.devices.size(),
                            options.devices.size() * par.processes));
  if (options.place) return fail(Errc::kInvalidArgument, "a placement hook cannot be combined with a parallel layout");
  if (par.share_reads && par.processes < 2)
    return fail(Errc::kInvalidArgument, "sharing reads needs several processes (ParallelLayout::processes)");
  if (options.region && !plan.decode.jobs.empty())
    return fail(
        Error(Errc::kUnsupported, "tensor regions are cut from stored tensors, not from tensors decoded on load")
            .with_tensor(plan.decode.jobs.front().outputs.front().name));
  if (par.share_reads && !plan.decode.jobs.empty())
    return fail(Error(Errc::kUnsupported, "decoding on load with shared reads is not supported yet")
                    .with_tensor(plan.decode.jobs.front().outputs.front().name));
  return {};
}

namespace {

// A quantize job's copy for tensor rank `rank`: the plain weight's shard, cut in scratch, is
// quantized alone (its own scales: what each rank of a server quantizing online holds).
Status shard_quantize_job(const formats::Catalog& catalog, const PlanOptions& options,
                          const formats::ModelGeometry& geometry, std::uint32_t rank, DecodeJob& copy) {
  const formats::TensorEntry t = formats::contiguous_entry(catalog.tensors[copy.input]);  // as quantized
  QLOAD_ASSIGN_OR_RETURN(const Split split, split_of(options, t.name));
  QLOAD_ASSIGN_OR_RETURN(const std::vector<ShardSlice> slices,
                         shard_slices(t, split, options.parallel.tensor, geometry));
  const ShardSlice& slice = slices[rank];
  if (slice.shape.rank() != 2) return fail(Errc::kInternal, "a weight to quantize is not 2-D");
  QLOAD_ASSIGN_OR_RETURN(const formats::QuantizedLayout layout,
                         detail::named_quantized_layout(t.name, slice.shape[0], slice.shape[1], copy.target));
  copy.outputs[0].shape = slice.shape;
  copy.outputs[0].bytes = layout.weight_bytes;
  copy.outputs[1].shape = layout.scale_shape;
  copy.outputs[1].bytes = layout.scale_bytes;
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, slice.shape.nbytes(t.dtype));
  copy.shard_inputs.push_back({.tensor = copy.input, .slice = slice, .offset = 0, .bytes = bytes});
  return {};
}

// A contiguous job's copy for tensor rank `rank`: the rank's slice of the view, gathered and cut
// in scratch (cut_shard_parts), then placed as a stored tensor's shard would be. A replicated
// tensor is gathered whole.
Status shard_contiguous_job(const formats::Catalog& catalog, const PlanOptions& options,
                            const formats::ModelGeometry& geometry, std::uint32_t rank, DecodeJob& copy) {
  const formats::TensorEntry dense = formats::contiguous_entry(catalog.tensors[copy.input]);
  QLOAD_ASSIGN_OR_RETURN(const Split split, split_of(options, dense.name));
  if (split == Split::kReplicate) return {};
  QLOAD_ASSIGN_OR_RETURN(const std::vector<ShardSlice> slices,
                         shard_slices(dense, split, options.parallel.tensor, geometry));
  const ShardSlice& slice = slices[rank];
  DecodeOutput& out = copy.outputs.front();
  out.shape = slice.shape;
  QLOAD_ASSIGN_OR_RETURN(out.bytes, slice.shape.nbytes(out.dtype));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, slice.shape.nbytes(dense.dtype));
  copy.shard_inputs.push_back({.tensor = copy.input, .slice = slice, .offset = 0, .bytes = bytes});
  return {};
}

// A dequantize, requantize or repack job's copy for tensor rank `rank` (its shard_inputs
// listed): what it writes for the shard's geometry (DecodePlan::sharded_weights): the shard
// dequantized, or quantized alone, or its parts repacked (as the whole weight's would be, for a
// weight of the shard's N and K).
Status shard_decode_outputs(const formats::Catalog& catalog, const Plan& plan, std::uint32_t rank, DecodeJob& copy) {
  const ShardedWeight& sharded = plan.decode.sharded_weights.at(copy.logical);
  const auto& [rows, cols] = sharded.dims[rank];
  if (copy.kind == DecodeJob::Kind::kDequantize) {
    DecodeOutput& out = copy.outputs.front();
    out.shape = sharded.shard(plan.decode.quant->logical[copy.logical], rank).dequantized_shape();
    QLOAD_ASSIGN_OR_RETURN(out.bytes, out.shape.nbytes(out.dtype));
    return {};
  }
  if (copy.kind == DecodeJob::Kind::kRequantize) {  // the shard quantized alone, as shard_quantize_job's
    QLOAD_ASSIGN_OR_RETURN(
        const formats::QuantizedLayout layout,
        detail::named_quantized_layout(plan.decode.quant->logical[copy.logical].name, rows, cols, copy.target));
    copy.outputs[0].shape = Shape{rows, cols};
    copy.outputs[0].bytes = layout.weight_bytes;
    copy.outputs[1].shape = layout.scale_shape;
    copy.outputs[1].bytes = layout.scale_bytes;
    return {};
  }
  const formats::LogicalTensor shard = sharded.shard(plan.decode.quant->logical[copy.logical], rank);
  const std::uint32_t scales = *shard.part("scales");
  const auto in = std::ranges::find(copy.shard_inputs, scales, &DecodeJob::ShardInput::tensor);
  const std::uint32_t region = copy.outputs.front().region;
  copy.repacked = detail::repacked_params(shard);
  QLOAD_ASSIGN_OR_RETURN(copy.outputs, detail::repack_outputs(shard, catalog.tensors[scales].dtype, in->slice.shape));
  for (DecodeOutput& out : copy.outputs) out.region = region;
  return {};
}

}  // namespace

Status place_decode_jobs(const formats::Catalog& catalog, const PlanOptions& options,
                         const formats::ModelGeometry& geometry, const std::vector<std::uint32_t>& device_of,
                         const std::vector<std::uint32_t>& stage_of,
                         const std::map<std::uint32_t, PartShards>& part_shards, Plan& plan) {
  if (options.parallel.trivial()) {
    for (DecodeJob& job : plan.decode.jobs)
      for (DecodeOutput& out : job.outputs) out.region = device_of[job.inputs.front()];
    return {};
  }
  const ParallelLayout& par = options.parallel;
  std::vector<DecodeJob> copies;
  for (const DecodeJob& job : plan.decode.jobs) {
    const std::uint32_t stage = stage_of[job.inputs.front()];
    for (std::uint32_t d = 0; d < par.data; ++d)
      for (std::uint32_t r = 0; r < par.tensor; ++r) {
        const std::optional<std::uint32_t> here = local_device(options, d, stage, r);
        if (!here) continue;  // another process's
        DecodeJob copy = job;
        copy.rank = r;
        for (DecodeOutput& out : copy.outputs) out.region = *here;
        if (par.tensor > 1 && job.kind == DecodeJob::Kind::kQuantize) {
          QLOAD_TRY(shard_quantize_job(catalog, options, geometry, r, copy));
        } else if (par.tensor > 1 && job.kind == DecodeJob::Kind::kContiguous) {
          QLOAD_TRY(shard_contiguous_job(catalog, options, geometry, r, copy));
        } else if (par.tensor > 1) {
          for (const std::uint32_t input : job.inputs) {
            const ShardSlice& slice = part_shards.at(input).slices[r];
            QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, slice.shape.nbytes(catalog.tensors[input].dtype));
            copy.shard_inputs.push_back({.tensor = input, .slice = slice, .offset = 0, .bytes = bytes});
          }
          QLOAD_TRY(shard_decode_outputs(catalog, plan, r, copy));
        }
        copies.push_back(std::move(copy));
      }
  }
  plan.decode.jobs = std::move(copies);
  return {};
}

}  // namespace detail
}  // namespace qload::scheduler
