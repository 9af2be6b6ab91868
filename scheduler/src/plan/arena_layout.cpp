#include "plan/arena_layout.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "plan/decode_plan.hpp"
#include "plan/parallel_copies.hpp"
#include "plan/placement.hpp"
#include "plan/plan_arith.hpp"
#include "plan/shared_reads_plan.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/model_config.hpp"

namespace qload::scheduler::detail {

namespace {

// The dtype a tensor is placed in: the policy's for floating tensors it can convert, except
// parts of quantized weights.
DType placed_dtype(const formats::TensorEntry& t, const PlanOptions& options, bool quantized_part) {
  if (options.dtype && is_float_policy_dtype(t.dtype) && !quantized_part) return *options.dtype;
  return t.dtype;
}

// The alignment a tensor's elements need in memory: the largest power of two dividing its
// element (or block) size, at most 16. A file-image arena keeps the file's alignment, so a
// tensor stored off it is placed as the aligned layout places it.
std::uint64_t element_alignment(DType dtype) {
  const std::uint64_t bytes = dtype_info(dtype).block_bytes;
  return std::min<std::uint64_t>(bytes & (~bytes + 1), 16);
}

// The open span of a file-image arena: the file its last tensor came from, where that tensor
// ends in the file and in the arena.
struct OpenSpan {
  std::uint32_t file = 0;
  std::uint64_t file_end = 0;
  std::uint64_t arena_end = 0;
  std::uint64_t last = 0;  // its last tensor's place among the tensors with bytes, in file order
};

Result<std::uint64_t> align_up(std::uint64_t value, std::uint64_t alignment, const std::string& arena) {
  std::uint64_t cursor = value;
  return take(cursor, 0, alignment, arena);
}

// Ends the arena's open span: whatever is placed next starts on a fresh aligned block, so the
// span's last read, rounded up to a block, writes only padding.
Status close_span(std::uint64_t& cursor, std::optional<OpenSpan>& span, const std::string& arena) {
  if (!span) return {};
  QLOAD_ASSIGN_OR_RETURN(cursor, align_up(cursor, kFileImageAlignment, arena));
  span.reset();
  return {};
}

// Places `t`, the `seq`-th tensor with bytes in file order, in a file-image arena: in the open
// span when it is the next tensor of its file after the span's last, within `max_gap` bytes
// (the gap is read through, so it keeps its place; a gap holding a tensor placed elsewhere
// would be read twice, so it ends the span), else at the next free block plus the tensor's
// offset within its block, which leaves the block's head, where the new span's first read is
// rounded down to, free.
Result<std::uint64_t> place_image(std::uint64_t& cursor, std::optional<OpenSpan>& span, const formats::TensorEntry& t,
                                  std::uint64_t seq, std::uint64_t max_gap, bool& starts_span,
                                  const std::string& arena) {
  std::uint64_t offset = 0;
  starts_span = !(span && span->file == t.file && span->last + 1 == seq && t.offset >= span->file_end &&
                  t.offset - span->file_end <= max_gap);
  if (starts_span) {
    span.reset();
    QLOAD_ASSIGN_OR_RETURN(cursor, align_up(cursor, kFileImageAlignment, arena));
    QLOAD_ASSIGN_OR_RETURN(offset, checked_add(cursor, t.offset % kFileImageAlignment));
  } else {
    QLOAD_ASSIGN_OR_RETURN(offset, checked_add(span->arena_end, t.offset - span->file_end));
  }
  QLOAD_ASSIGN_OR_RETURN(cursor, checked_add(offset, t.nbytes));
  span = OpenSpan{.file = t.file, .file_end = t.offset + t.nbytes, .arena_end = cursor, .last = seq};
  return offset;
}

// What placing the tensors shares: where each tensor goes (its device, pipeline stage and
// quantized shards), and each arena's cursor and open span.
struct Arenas {
  const formats::Catalog& catalog;
  const PlanOptions& options;
  const TensorRoles& roles;
  Plan& plan;
  std::uint32_t device_count = 0;
  bool parallel = false;
  formats::ModelGeometry geometry;
  std::vector<std::uint32_t> stage_of;
  std::map<std::uint32_t, PartShards> part_shards;
  std::vector<std::uint32_t> device_of;
  std::vector<bool> decoded_here;
  std::vector<std::uint64_t> cursor;
  std::vector<std::optional<OpenSpan>> spans;
  std::uint32_t scratch = 0;
  bool any_scratch = false;

  // Chooses each tensor's device (and, laid out in parallel, its stage and quantized shards),
  // and places the decode jobs.
  Status choose_devices(const std::vector<std::uint32_t>& order);
  // Places tensor i, the `seq`-th tensor with bytes in file order.
  Status place_tensor(std::uint32_t i, std::uint64_t seq);
  // Places the decode jobs' outputs and their shard inputs, after every tensor.
  Status place_decode_buffers();
  // Appends one ArenaPlan per arena that holds bytes, then the relay arena.
  Status add_arenas(std::uint64_t relay_bytes);
};

Status Arenas::choose_devices(const std::vector<std::uint32_t>& order) {
  if (parallel) {
    QLOAD_TRY(check_parallel(options, plan));
    if (options.parallel.tensor > 1) {
      QLOAD_ASSIGN_OR_RETURN(geometry, formats::read_geometry(catalog));
    }
    stage_of = detail::assign_devices(catalog, order, Placement::kByLayer, options.parallel.pipeline);
  }
  if (parallel) {
    QLOAD_ASSIGN_OR_RETURN(part_shards, plan_quantized_shards(catalog, options, geometry, plan));
  }
  device_of = detail::assign_devices(catalog, order, options.placement, device_count);
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
  decoded_here.assign(catalog.tensors.size(), false);  // inputs of this process's decode jobs
  for (const DecodeJob& job : plan.decode.jobs)
    for (const std::uint32_t i : job.inputs) decoded_here[i] = true;
  return {};
}

Status Arenas::place_tensor(std::uint32_t i, std::uint64_t seq) {
  const formats::TensorEntry& t = catalog.tensors[i];
  if (!roles.to_scratch[i] && (options.destinations.contains(t.name) || options.destinations_only)) {
    // Into the caller's memory (bind_destinations, once the arenas are laid out), or not loaded.
    plan.layout.tensors[i] = TensorPlacement{.region = kNoRegion, .dtype = t.dtype};
    return {};
  }
  if (roles.to_scratch[i] && !decoded_here[i]) {  // decoded by another process only
    plan.layout.tensors[i] = TensorPlacement{.region = kNoRegion, .dtype = t.dtype};
    return {};
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
    return {};
  }
  const std::string arena = d == scratch ? "scratch" : options.devices[d].to_string();
  const bool host = d == scratch || options.devices[d].is_cpu();
  const bool image = host && d != scratch && !parallel && dtype == t.dtype && options.direct_min_bytes > 0 &&
                     options.host_layout == HostLayout::kFileImage && t.nbytes > 0 &&
                     t.offset % element_alignment(t.dtype) == 0;
  bool starts_span = false;
  Result<std::uint64_t> offset = std::uint64_t{0};
  if (image) {
    offset = place_image(cursor[d], spans[d], t, seq, options.max_gap_bytes, starts_span, arena);
  } else {
    const Status closed = close_span(cursor[d], spans[d], arena);
    offset = closed ? take(cursor[d], bytes, options.tensor_alignment, arena) : fail(closed.error());
  }
  if (!offset) return fail(tensor_error(catalog, t, Errc::kOverflow, offset.error().message()));
  const bool direct =
      image || (host && dtype == t.dtype && options.direct_min_bytes > 0 && t.nbytes >= options.direct_min_bytes);
  plan.layout.tensors[i] = TensorPlacement{.region = d,
                                           .offset = *offset,
                                           .direct = direct,
                                           .image = image,
                                           .starts_span = starts_span,
                                           .dtype = dtype,
                                           .bytes = bytes};
  plan.reads.direct_tensors += direct ? 1 : 0;
  plan.layout.converted_tensors += dtype != t.dtype ? 1 : 0;
  if (d == scratch) return {};  // not part of the model
  auto placed = checked_add(plan.layout.placed_bytes, bytes);
  if (!placed) return fail(tensor_error(catalog, t, Errc::kOverflow, "total placed bytes exceed 2^64"));
  plan.layout.placed_bytes = *placed;
  return {};
}

Status Arenas::place_decode_buffers() {
  for (DecodeJob& job : plan.decode.jobs) {
    for (DecodeOutput& out : job.outputs) {
      if (options.destinations.contains(out.name)) continue;  // bind_destinations places it
      QLOAD_ASSIGN_OR_RETURN(out.offset, take(cursor[out.region], out.bytes, options.tensor_alignment,
                                              options.devices[out.region].to_string()));
      QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, out.bytes));
    }
    for (DecodeJob::ShardInput& in : job.shard_inputs) {
      QLOAD_ASSIGN_OR_RETURN(in.offset, take(cursor[scratch], in.bytes, detail::kDecodePartAlignment, "scratch"));
    }
  }
  return {};
}

Status Arenas::add_arenas(std::uint64_t relay_bytes) {
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
  return {};
}

}  // namespace

Status place_in_arenas(const formats::Catalog& catalog, const std::vector<std::uint32_t>& order,
                       const PlanOptions& options, const TensorRoles& roles, Plan& plan) {
  const auto device_count = static_cast<std::uint32_t>(options.devices.size());
  Arenas a{.catalog = catalog,
           .options = options,
           .roles = roles,
           .plan = plan,
           .device_count = device_count,
           // Regions are placed as the one shard of a layout of one device.
           .parallel = !options.parallel.trivial() || static_cast<bool>(options.region)};
  QLOAD_TRY(a.choose_devices(order));
  a.cursor.assign(device_count + 1, 0);  // the last one: scratch
  a.spans.resize(device_count + 1);      // file-image arenas' open spans
  a.scratch = device_count;
  std::uint64_t seq = 0;  // tensors with bytes so far, in file order
  for (const std::uint32_t i : order) {
    seq += catalog.tensors[i].nbytes > 0 ? 1 : 0;
    QLOAD_TRY(a.place_tensor(i, seq));
  }
  for (std::uint32_t d = 0; d < device_count; ++d)
    QLOAD_TRY(close_span(a.cursor[d], a.spans[d], options.devices[d].to_string()));
  QLOAD_TRY(a.place_decode_buffers());
  std::uint64_t relay_bytes = 0;
  if (detail::relays(options)) {
    QLOAD_ASSIGN_OR_RETURN(relay_bytes, detail::assign_relay_readers(catalog, options, plan));
    plan.copies.shared_reads = SharedReads::kRelay;
  } else if (options.parallel.share_reads) {
    detail::assign_readers(catalog, order, options.parallel, plan);
    plan.copies.shared_reads = SharedReads::kBroadcast;
  }
  QLOAD_TRY(a.add_arenas(relay_bytes));
  // Whether the host arenas fit this machine's memory is the load's question (read_load.cpp),
  // not the plan's: a plan describes the checkpoint and can be made for a bigger machine.
  return {};
}

}  // namespace qload::scheduler::detail
