// Plan arithmetic: tensor validation, arena layout, read chunking, mmap ranges. Every sum and
// rounding is overflow-checked because offsets and sizes come from untrusted headers.
#include "qload/scheduler/plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <numeric>

#include <fmt/format.h>

#include "plan/chunker.hpp"
#include "plan/decode_plan.hpp"
#include "plan/placement.hpp"
#include "plan/plan_arith.hpp"
#include "plan/quant_sharding.hpp"
#include "plan/shared_reads_plan.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/model_config.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/strided.hpp"
#include "qload/io/reader.hpp"

namespace qload::scheduler {

formats::LogicalTensor ShardedWeight::shard(const formats::LogicalTensor& whole, std::uint32_t rank) const {
  formats::LogicalTensor t = whole;
  std::tie(t.rows, t.cols) = dims[rank];
  t.params.groups = groups;
  t.experts = experts;
  t.shape = experts > 0 ? Shape{experts, t.rows / experts, t.cols} : Shape{};
  return t;
}
namespace {

using detail::take;
using detail::tensor_error;

Result<std::uint64_t> align_up(std::uint64_t value, std::uint64_t alignment) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bumped, checked_add(value, alignment - 1));
  return bumped & ~(alignment - 1);
}

// The tensor's bytes lie inside its file's validated size and agree with dtype x shape.
Status validate_tensor(const formats::Catalog& catalog, const formats::TensorEntry& t) {
  if (t.file >= catalog.files.size())
    return fail(tensor_error(catalog, t, Errc::kCorrupt,
                             fmt::format("file index {} is outside the {} files", t.file, catalog.files.size())));
  auto end = checked_add(t.offset, t.nbytes);
  if (!end)
    return fail(
        tensor_error(catalog, t, Errc::kOverflow, fmt::format("offset {} + {} bytes overflows", t.offset, t.nbytes)));
  const std::uint64_t file_size = catalog.files[t.file].size;
  if (*end > file_size)
    return fail(tensor_error(catalog, t, Errc::kTruncated,
                             fmt::format("tensor ends at byte {}, past the file's {} bytes", *end, file_size)));
  auto expected =
      t.strides.empty() ? t.shape.nbytes(t.dtype) : formats::strided_span_bytes(t.shape, t.strides, t.dtype);
  if (!expected) return fail(tensor_error(catalog, t, expected.error().code(), expected.error().message()));
  if (*expected != t.nbytes)
    return fail(
        tensor_error(catalog, t, Errc::kCorrupt,
                     fmt::format("{} bytes stored, but {} {}{} needs {}", t.nbytes, dtype_name(t.dtype),
                                 t.shape.to_string(), t.strides.empty() ? "" : " (a strided view)", *expected)));
  if (!t.strides.empty()) {  // gathered into a row-major tensor of dtype x shape bytes
    auto dense = t.shape.nbytes(t.dtype);
    if (!dense) return fail(tensor_error(catalog, t, dense.error().code(), dense.error().message()));
  }
  return {};
}

// Tensor indices in file order (the catalog promises it; sorting again costs nothing and
// keeps a hand-built catalog honest).
std::vector<std::uint32_t> file_order(const formats::Catalog& catalog) {
  std::vector<std::uint32_t> order(catalog.tensors.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const auto& x = catalog.tensors[a];
    const auto& y = catalog.tensors[b];
    return std::tie(x.file, x.offset) < std::tie(y.file, y.offset);
  });
  return order;
}

bool is_float_policy_dtype(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32;
}

// The dtype a tensor is placed in: the policy's for floating tensors it can convert, except
// parts of quantized weights.
DType placed_dtype(const formats::TensorEntry& t, const PlanOptions& options, bool quantized_part) {
  if (options.dtype && is_float_policy_dtype(t.dtype) && !quantized_part) return *options.dtype;
  return t.dtype;
}

// Who goes where, besides the device placement: tensors read into scratch (decode inputs)
// and tensors that must keep their stored dtype (quantized parts).
struct TensorRoles {
  std::vector<bool> to_scratch;
  std::vector<bool> quantized_part;
};

// Arena layout: each tensor at the next multiple of the alignment in its device's arena (or
// the scratch arena), in file order, so reads and copies walk the arenas forwards; decode
// outputs follow on the device of their first input. Each arena is exactly as long as its
// last tensor's end.
// Under a parallel layout: tensor i's copies, one per tensor rank of its pipeline stage, in
// every data replica, each at the next aligned offset of its device's arena.
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

// The parts of quantized weights cut consistently per weight (quant_sharding.hpp): catalog
// index -> its slices per rank, with the split of its weight.
struct PartShards {
  Split split = Split::kReplicate;
  std::vector<ShardSlice> slices;
};

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
    QLOAD_ASSIGN_OR_RETURN(split, split_of(options, t.name));
    QLOAD_ASSIGN_OR_RETURN(slices, shard_slices(t, split, par.tensor, geometry));
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
  for (const auto& [begin, end] :
       detail::shard_ranges(t, std::span(plan.copies.shards).subspan(placed.first_shard, placed.shard_count)))
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
  if (par.share_reads && !plan.decode.jobs.empty())
    return fail(Error(Errc::kUnsupported, "decoding on load with shared reads is not supported yet")
                    .with_tensor(plan.decode.jobs.front().outputs.front().name));
  return {};
}

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
  const formats::QuantizedLayout layout = formats::quantized_layout(slice.shape[0], slice.shape[1], copy.target);
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
// listed): what it writes for the shard's geometry (Plan::decode.sharded_weights): the shard
// dequantized, or quantized alone, or its parts repacked (as the whole weight's would be, for a weight of the shard's N
// and K).
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
    const formats::QuantizedLayout layout = formats::quantized_layout(rows, cols, copy.target);
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

// Where each decode job's outputs go. Outside a parallel layout: the device of its first input.
// Under one, each job becomes one job per copy of its weight on this
// process's devices: a tensor rank's shard (its inputs cut to the rank's slices first,
// DecodeJob::shard_inputs) or a data replica; a weight whose copies are all another process's
// is not decoded here.
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

Status place_in_arenas(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                       const PlanOptions& options, const TensorRoles& roles, Plan& plan) {
  const auto device_count = static_cast<std::uint32_t>(options.devices.size());
  const bool parallel = !options.parallel.trivial();
  formats::ModelGeometry geometry;
  std::vector<std::uint32_t> stage_of;
  if (parallel) {
    QLOAD_TRY(check_parallel(options, plan));
    if (options.parallel.tensor > 1) {
      QLOAD_ASSIGN_OR_RETURN(geometry, formats::read_geometry(catalog));
    }
    stage_of = detail::assign_devices(catalog, order, Placement::kByLayer, options.parallel.pipeline);
  }
  std::map<std::uint32_t, PartShards> part_shards;
  if (parallel) {
    QLOAD_ASSIGN_OR_RETURN(part_shards, plan_quantized_shards(catalog, options, geometry, plan));
  }
  std::vector<std::uint32_t> device_of = detail::assign_devices(catalog, order, options.placement, device_count);
  if (options.place) {
    for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
      auto chosen = options.place(catalog.tensors[i].name);
      if (!chosen) return fail(std::move(chosen.error()).with_tensor(catalog.tensors[i].name));
      if (!*chosen) continue;
      if (**chosen >= device_count)
        return fail(tensor_error(catalog, catalog.tensors[i], Errc::kInvalidArgument,
                                 fmt::format("placed on device {} of {}", **chosen, device_count)));
      device_of[i] = **chosen;
    }
  }
  QLOAD_TRY(place_decode_jobs(catalog, options, geometry, device_of, stage_of, part_shards, plan));
  std::vector<bool> decoded_here(catalog.tensors.size(), false);  // inputs of this process's decode jobs
  for (const DecodeJob& job : plan.decode.jobs)
    for (const std::uint32_t i : job.inputs) decoded_here[i] = true;
  std::vector<std::uint64_t> cursor(device_count + 1, 0);  // the last one: scratch
  const std::uint32_t scratch = device_count;
  bool any_scratch = false;
  for (const std::uint32_t i : order) {
    const formats::TensorEntry& t = catalog.tensors[i];
    if (roles.to_scratch[i] && !decoded_here[i]) {  // decoded by another process only
      plan.layout.tensors[i] = TensorPlacement{.region = kNoRegion, .dtype = t.dtype};
      continue;
    }
    const std::uint32_t d = roles.to_scratch[i] ? scratch : device_of[i];
    any_scratch = any_scratch || d == scratch;
    const DType dtype = d == scratch ? t.dtype : placed_dtype(t, options, roles.quantized_part[i]);
    // At most twice the stored bytes (f16 -> f32); a tensor's stored bytes are < 2^63 in any
    // file that passed validation, so this cannot overflow.
    const std::uint64_t bytes = dtype == t.dtype ? t.nbytes : formats::converted_bytes(t.nbytes, t.dtype, dtype);
    if (parallel && d != scratch) {
      QLOAD_TRY(place_shards(catalog, i, stage_of[i], dtype, options, geometry, part_shards, cursor, plan));
      plan.layout.converted_tensors += dtype != t.dtype ? 1 : 0;
      continue;
    }
    const std::string arena = d == scratch ? "scratch" : options.devices[d].to_string();
    auto offset = take(cursor[d], bytes, options.tensor_alignment, arena);
    if (!offset) return fail(tensor_error(catalog, t, Errc::kOverflow, offset.error().message()));
    const bool host = d == scratch || options.devices[d].is_cpu();
    const bool direct =
        host && dtype == t.dtype && options.direct_min_bytes > 0 && t.nbytes >= options.direct_min_bytes;
    plan.layout.tensors[i] =
        TensorPlacement{.region = d, .offset = *offset, .direct = direct, .dtype = dtype, .bytes = bytes};
    plan.reads.direct_tensors += direct ? 1 : 0;
    plan.layout.converted_tensors += dtype != t.dtype ? 1 : 0;
    if (d == scratch) continue;  // not part of the model
    auto placed = checked_add(plan.layout.placed_bytes, bytes);
    if (!placed) return fail(tensor_error(catalog, t, Errc::kOverflow, "total placed bytes exceed 2^64"));
    plan.layout.placed_bytes = *placed;
  }
  for (DecodeJob& job : plan.decode.jobs) {
    for (DecodeOutput& out : job.outputs) {
      QLOAD_ASSIGN_OR_RETURN(out.offset, take(cursor[out.region], out.bytes, options.tensor_alignment,
                                              options.devices[out.region].to_string()));
      QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, out.bytes));
    }
    for (DecodeJob::ShardInput& in : job.shard_inputs) {
      QLOAD_ASSIGN_OR_RETURN(in.offset, take(cursor[scratch], in.bytes, detail::kDecodePartAlignment, "scratch"));
    }
  }
  std::uint64_t relay_bytes = 0;
  if (detail::relays(options)) {
    QLOAD_ASSIGN_OR_RETURN(relay_bytes, detail::assign_relay_readers(catalog, options, plan));
    plan.copies.shared_reads = SharedReads::kRelay;
  } else if (options.parallel.share_reads) {
    detail::assign_readers(catalog, order, options.parallel, plan);
    plan.copies.shared_reads = SharedReads::kBroadcast;
  }
  const std::uint64_t arena_alignment = std::max<std::uint64_t>(options.tensor_alignment, 4096);
  for (std::uint32_t d = 0; d <= device_count; ++d) {
    if (d == scratch && !any_scratch) break;
    const bool is_scratch = d == scratch;
    const Device device = is_scratch ? Device{} : options.devices[d];
    const std::string name = is_scratch ? "scratch" : device.to_string();
    if (options.max_arena_bytes != 0 && cursor[d] > options.max_arena_bytes)
      return fail(Errc::kOutOfMemory, fmt::format("the {} arena needs {} bytes, over its budget of {} bytes", name,
                                                  cursor[d], options.max_arena_bytes));
    plan.layout.arenas.push_back(
        ArenaPlan{.scratch = is_scratch, .device = device, .bytes = cursor[d], .alignment = arena_alignment});
  }
  if (any_scratch) plan.layout.scratch_region = scratch;
  if (relay_bytes > 0) {
    plan.copies.relay_region = static_cast<std::uint32_t>(plan.layout.arenas.size());
    plan.layout.arenas.push_back(
        ArenaPlan{.scratch = true, .device = Device{}, .bytes = relay_bytes, .alignment = arena_alignment});
  }
  // Whether the host arenas fit this machine's memory is the load's question (read_load.cpp),
  // not the plan's: a plan describes the checkpoint and can be made for a bigger machine.
  return {};
}

// Detects quantization (fatal only when a policy depends on it), and lists the decode jobs.
Result<TensorRoles> plan_quantization(const formats::Catalog& catalog, const PlanOptions& options, Plan& plan) {
  TensorRoles roles{.to_scratch = std::vector<bool>(catalog.tensors.size(), false),
                    .quantized_part = std::vector<bool>(catalog.tensors.size(), false)};
  auto detected = formats::detect_quantization(catalog);
  if (detected && options.gptq_v1_whole_word)  // the gptq_v1_zeros setting
    for (formats::LogicalTensor& lt : detected->logical)
      if (lt.params.scheme == formats::QuantScheme::kGptq && lt.params.gptq_version == 1)
        lt.params.gptq_v1_whole_word = *options.gptq_v1_whole_word;
  if (!options.dtype && !options.dequantize && !options.quantize && !options.repack && !options.weight_policy) {
    // Nothing depends on it: a scheme qload cannot describe still loads as raw tensors.
    if (detected) {
      plan.decode.quant = std::move(*detected);
      roles.quantized_part = detail::quantized_parts(catalog, *plan.decode.quant);
    } else {
      plan.decode.quant_warning = detected.error().to_string();
    }
    QLOAD_ASSIGN_OR_RETURN(plan.decode.jobs, detail::contiguous_jobs(catalog, roles.quantized_part, {}, options));
  } else {
    if (!detected) return fail(std::move(detected).error());
    plan.decode.quant = std::move(*detected);
    roles.quantized_part = detail::quantized_parts(catalog, *plan.decode.quant);
    QLOAD_ASSIGN_OR_RETURN(plan.decode.jobs, detail::plan_decode_jobs(catalog, *plan.decode.quant, options));
  }
  for (const DecodeJob& job : plan.decode.jobs)
    for (const std::uint32_t i : job.inputs) roles.to_scratch[i] = true;
  return roles;
}

// One mapping per file: from the page holding its first tensor byte to its last tensor byte.
// Zero-byte tensors need no bytes and get no region.
void plan_mappings(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order, Plan& plan) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<std::uint32_t> members;
  auto flush = [&] {
    if (members.empty()) return;
    const formats::TensorEntry& first = catalog.tensors[members.front()];
    const std::uint64_t start = first.offset / page * page;
    std::uint64_t end = 0;  // offset + nbytes of each was checked by validate_tensor
    for (const std::uint32_t i : members) end = std::max(end, catalog.tensors[i].offset + catalog.tensors[i].nbytes);
    const auto region = static_cast<std::uint32_t>(plan.layout.mappings.size());
    plan.layout.mappings.push_back(MappingPlan{.file = first.file, .offset = start, .bytes = end - start});
    for (const std::uint32_t i : members)
      plan.layout.tensors[i] = TensorPlacement{.region = region,
                                               .offset = catalog.tensors[i].offset - start,
                                               .dtype = catalog.tensors[i].dtype,
                                               .bytes = catalog.tensors[i].nbytes};
    members.clear();
  };
  for (const std::uint32_t i : order) {
    const formats::TensorEntry& t = catalog.tensors[i];
    if (t.nbytes == 0) {
      plan.layout.tensors[i] = TensorPlacement{.region = kNoRegion, .offset = 0, .dtype = t.dtype, .bytes = 0};
      continue;
    }
    if (!members.empty() && catalog.tensors[members.front()].file != t.file) flush();
    members.push_back(i);
  }
  flush();
}

}  // namespace

namespace detail {

Error tensor_error(const formats::Catalog& catalog, const formats::TensorEntry& t, Errc code, std::string message) {
  std::string path = t.file < catalog.files.size() ? catalog.files[t.file].path : std::string();
  return Error(code, std::move(message)).with_offset(t.offset).with_tensor(t.name).with_file(std::move(path));
}

// Bumps `cursor` to the next aligned offset for `bytes`, or kOverflow naming the arena.
Result<std::uint64_t> take(std::uint64_t& cursor, std::uint64_t bytes, std::uint64_t alignment,
                           const std::string& arena) {
  auto offset = align_up(cursor, alignment);
  auto end = offset ? checked_add(*offset, bytes) : offset;
  if (!end) return fail(Errc::kOverflow, fmt::format("the {} arena would exceed 2^64 bytes", arena));
  cursor = *end;
  return *offset;
}

}  // namespace detail

std::string_view load_mode_name(LoadMode mode) noexcept {
  switch (mode) {
    case LoadMode::kRead: return "read";
    case LoadMode::kMmap: return "mmap";
  }
  return "?";
}

std::string_view placement_name(Placement placement) noexcept {
  switch (placement) {
    case Placement::kRoundRobin: return "round-robin";
    case Placement::kByLayer: return "by-layer";
  }
  return "?";
}

Result<Placement> parse_placement(std::string_view text) {
  if (text == "round-robin") return Placement::kRoundRobin;
  if (text == "by-layer") return Placement::kByLayer;
  return fail(Errc::kInvalidArgument, fmt::format("placement '{}' is not round-robin or by-layer", text));
}

Status PlanOptions::validate() const {
  if (devices.empty()) return fail(Errc::kInvalidArgument, "no destination device");
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        return fail(Errc::kInvalidArgument, fmt::format("device {} is listed twice", devices[i].to_string()));
  if (mode == LoadMode::kMmap && (devices.size() != 1 || !devices.front().is_cpu()))
    return fail(Errc::kUnsupported, "mmap mode maps files for one cpu device only");
  if (repack && dequantize)
    return fail(Errc::kInvalidArgument, "repack keeps weights packed; it cannot be combined with dequantize");
  if (parallel.processes == 0 || parallel.process >= parallel.processes)
    return fail(Errc::kInvalidArgument,
                fmt::format("process {} of {}: not a process of the layout", parallel.process, parallel.processes));
  if (parallel.trivial() && parallel.processes > 1)
    return fail(Errc::kInvalidArgument,
                fmt::format("a layout of one device cannot be spread over {} processes", parallel.processes));
  if (mode == LoadMode::kMmap && !parallel.trivial())
    return fail(Errc::kUnsupported, "mmap mode maps files for one device: no parallel layout");
  if (mode == LoadMode::kMmap && (dtype || dequantize || quantize || repack || weight_policy))
    return fail(Errc::kInvalidArgument,
                "mmap mode cannot convert, dequantize or quantize (the tensors are the file's bytes)");
  if (dequantize && !is_float_policy_dtype(*dequantize))
    return fail(Errc::kInvalidArgument,
                fmt::format("dequantize to {}: only F16, BF16 and F32", dtype_name(*dequantize)));
  if (dtype && !is_float_policy_dtype(*dtype))
    return fail(Errc::kInvalidArgument,
                fmt::format("dtype policy {}: only F16, BF16 and F32 are conversion targets", dtype_name(*dtype)));
  if (dtype && chunk_bytes < 64)
    return fail(Errc::kInvalidArgument, "chunks under 64 bytes cannot carry whole elements for conversion");
  if (!std::has_single_bit(tensor_alignment))
    return fail(Errc::kInvalidArgument, fmt::format("tensor alignment {} is not a power of two", tensor_alignment));
  if (!std::has_single_bit(read_alignment))
    return fail(Errc::kInvalidArgument, fmt::format("read alignment {} is not a power of two", read_alignment));
  if (chunk_bytes == 0 || chunk_bytes > io::kMaxReadBytes)
    return fail(Errc::kInvalidArgument, fmt::format("chunk size {} is outside 1..{}", chunk_bytes, io::kMaxReadBytes));
  return {};
}

Result<Plan> make_plan(const formats::Catalog& catalog, const PlanOptions& options) {
  QLOAD_TRY(options.validate());
  if (catalog.tensors.size() >= kNoRegion)
    return fail(Errc::kUnsupported, fmt::format("{} tensors is too many", catalog.tensors.size()));
  Plan plan;
  plan.mode = options.mode;
  plan.layout.tensor_alignment = options.mode == LoadMode::kRead ? options.tensor_alignment : 0;
  plan.layout.tensors.resize(catalog.tensors.size());
  for (const formats::TensorEntry& t : catalog.tensors) {
    QLOAD_TRY(validate_tensor(catalog, t));
    auto sum = checked_add(plan.layout.tensor_bytes, t.nbytes);
    if (!sum) return fail(tensor_error(catalog, t, Errc::kOverflow, "total tensor bytes exceed 2^64"));
    plan.layout.tensor_bytes = *sum;
  }
  const std::vector<std::uint32_t> order = file_order(catalog);
  if (options.mode == LoadMode::kMmap) {
    for (const formats::TensorEntry& t : catalog.tensors)
      if (!t.strides.empty())
        return fail(tensor_error(catalog, t, Errc::kUnsupported,
                                 "a non-contiguous view cannot be mapped as the row-major tensor it is loaded as; "
                                 "load in read mode (load_mode read), which gathers it"));
    QLOAD_TRY(plan_quantization(catalog, options, plan));  // describes kept quantized weights
    plan_mappings(catalog, order, plan);
    plan.layout.placed_bytes = plan.layout.tensor_bytes;
    return plan;
  }
  QLOAD_ASSIGN_OR_RETURN(const TensorRoles roles, plan_quantization(catalog, options, plan));
  QLOAD_TRY(place_in_arenas(catalog, order, options, roles, plan));
  plan.reads.chunks = detail::make_chunks(catalog, order, plan.layout.tensors, plan.copies.shards, options);
  for (const ReadChunk& c : plan.reads.chunks) {
    plan.reads.read_bytes += c.bytes;  // at most tensor_bytes plus one gap and alignment per chunk
    if (!c.direct) plan.reads.max_staged_chunk_bytes = std::max(plan.reads.max_staged_chunk_bytes, c.bytes);
  }
  return plan;
}

}  // namespace qload::scheduler
