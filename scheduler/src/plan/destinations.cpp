#include "plan/destinations.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "plan/chunker.hpp"
#include "plan/plan_arith.hpp"
#include "qload/formats/convert.hpp"

namespace qload::scheduler::detail {
namespace {

Error destination_error(std::string_view name, Errc code, std::string message) {
  return Error(code, std::move(message)).with_tensor(std::string(name));
}

// The alignment a destination's address needs: its element's natural one (the largest power of
// two dividing the element or block size), at most 8 bytes.
std::uint64_t element_alignment(DType dtype) {
  const std::uint64_t size = dtype_info(dtype).block_bytes;
  return std::min<std::uint64_t>(size & (~size + 1), 8);
}

// A destination's row ranges read straight into it only when none is smaller than this: a
// permutation of single rows would otherwise become one read request per row.
constexpr std::uint64_t kDirectRangeBytes = std::uint64_t{256} << 10;
// Rows a permutation moves in place are at least this long: the permutation table costs 8 bytes
// a row, and rows this long make it under 3% of the tensor.
constexpr std::uint64_t kPermutedRowBytes = 256;

// The slice of `t` that `rows` (ranges of dim 0, in order) takes: kInvalidArgument naming the
// tensor for a range out of bounds, or rows of a scalar.
Result<ShardSlice> rows_slice(const formats::TensorEntry& t,
                              const std::vector<std::pair<std::uint64_t, std::uint64_t>>& rows) {
  if (t.shape.rank() == 0) return fail(Error(Errc::kInvalidArgument, "rows of a scalar").with_tensor(t.name));
  ShardSlice s;
  std::uint64_t count = 0;
  for (const auto& [begin, end] : rows) {
    if (begin > end || end > t.shape[0])
      return fail(Error(Errc::kInvalidArgument,
                        fmt::format("rows [{}, {}) of {} are out of bounds", begin, end, t.shape.to_string()))
                      .with_tensor(t.name));
    auto sum = checked_add(count, end - begin);  // rows of zero-byte rows may be many
    if (!sum) return fail(Error(Errc::kOverflow, "the row ranges add up to more than 2^64 rows").with_tensor(t.name));
    count = *sum;
  }
  s.rows = rows;
  s.col_begin = 0;
  s.col_end = 1;
  for (std::size_t i = 1; i < t.shape.rank(); ++i) s.col_end *= t.shape[i];
  std::vector<std::uint64_t> dims(t.shape.dims().begin(), t.shape.dims().end());
  dims[0] = count;
  s.shape = Shape(std::move(dims));
  return s;
}

// The bytes a destination covers in the caller's memory: `rows` rows of `row_bytes`, `pitch`
// apart (a packed destination is one row of all its bytes).
struct Footprint {
  std::uintptr_t address = 0;
  std::uint64_t row_bytes = 0;
  std::uint64_t pitch = 0;
  std::uint64_t rows = 1;
  std::uint64_t end() const noexcept { return address + (rows - 1) * pitch + row_bytes; }
  bool empty() const noexcept { return rows == 0 || row_bytes == 0; }
};

// Whether some row of `f` shares a byte with [begin, end).
bool touches(const Footprint& f, std::uintptr_t begin, std::uintptr_t end) {
  if (f.empty() || begin >= end) return false;
  // The first row ending after `begin`, then whether it starts before `end`.
  std::uint64_t row = 0;
  if (begin >= f.address + f.row_bytes) row = (begin - f.address - f.row_bytes) / f.pitch + 1;
  return row < f.rows && f.address + row * f.pitch < end;
}

// Whether two destinations share a byte: exact for interleaved rows (the q, k and v parts of one
// fused parameter's columns), by the rows of the one with fewer.
bool overlap(const Footprint& a, const Footprint& b) {
  if (a.empty() || b.empty() || a.end() <= b.address || b.end() <= a.address) return false;
  const Footprint& few = a.rows <= b.rows ? a : b;
  const Footprint& many = a.rows <= b.rows ? b : a;
  for (std::uint64_t r = 0; r < few.rows; ++r) {
    const std::uintptr_t begin = few.address + r * few.pitch;
    if (touches(many, begin, begin + few.row_bytes)) return true;
  }
  return false;
}

// One destination, checked, waiting for its device's arena to exist: `apply` writes the region
// and offset into the plan.
struct Bound {
  std::string_view name;
  const Destination* destination = nullptr;
  Footprint footprint;
  std::function<void(std::uint32_t region, std::uint64_t offset)> apply;
};

Footprint packed(const Destination& d) {
  return Footprint{.address = d.address, .row_bytes = d.bytes, .pitch = d.bytes, .rows = 1};
}

Status check_room(std::string_view name, const Destination& d, DType dtype, const Shape& shape, std::uint64_t bytes,
                  std::uint64_t extent) {
  if (d.shape && *d.shape != shape)
    return fail(destination_error(name, Errc::kInvalidArgument,
                                  fmt::format("the destination's shape is {}, but the tensor{} is {}",
                                              d.shape->to_string(), d.region ? "'s region" : "", shape.to_string())));
  if (d.bytes != bytes)
    return fail(destination_error(name, Errc::kInvalidArgument,
                                  fmt::format("the destination holds {} bytes, but {} {} takes {}", d.bytes,
                                              dtype_name(dtype), shape.to_string(), bytes)));
  if (d.address % element_alignment(d.dtype) != 0)
    return fail(destination_error(name, Errc::kInvalidArgument,
                                  fmt::format("the destination address {:#x} is not aligned to its {}-byte elements",
                                              d.address, element_alignment(d.dtype))));
  if (d.address > UINTPTR_MAX - extent)
    return fail(destination_error(name, Errc::kInvalidArgument, "the destination runs past the end of memory"));
  if (!d.device.is_cpu() && !d.device.is_cuda())
    return fail(destination_error(name, Errc::kUnsupported,
                                  fmt::format("a destination on {} (cpu or cuda:N only)", d.device.to_string())));
  return {};
}

// The stored row each destination row takes, when `rows` names every row of a [rows, ...]
// tensor exactly once; else nullopt.
std::optional<std::vector<std::uint64_t>> permutation(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& rows,
                                                      std::uint64_t count) {
  std::vector<std::uint64_t> source;
  std::vector<bool> seen(count, false);
  for (const auto& [begin, end] : rows)
    for (std::uint64_t r = begin; r < end; ++r) {
      if (r >= count || seen[r]) return std::nullopt;
      seen[r] = true;
      source.push_back(r);
    }
  if (source.size() != count) return std::nullopt;
  return source;
}

// One stored tensor bound to its destination: what every way of placing it needs.
struct Binding {
  const formats::TensorEntry& t;
  std::uint32_t index;
  const Destination& d;
  bool converts;            // into another float dtype
  bool host;                // a host destination, which direct reads may fill
  bool large;               // at least direct_min_bytes
  std::uint64_t row_bytes;  // of the stored tensor's dim-0 rows
  TensorPlacement& placed;
};

// Every row once, unconverted, large, on the host, packed, rows of at least kPermutedRowBytes:
// read whole and straight into the destination, then permuted there (no staging copy, and no
// read per row, as a permutation of single rows would otherwise need). False: not such a one.
Result<bool> bind_permuted(const Binding& b, Plan& plan, std::vector<Bound>& bound) {
  const Destination& d = b.d;
  if (d.rows.empty() || d.region || d.row_pitch != 0 || !b.host || b.converts || !b.large ||
      b.row_bytes < kPermutedRowBytes)
    return false;
  auto source = permutation(d.rows, b.t.shape[0]);
  if (!source) return false;
  QLOAD_TRY(check_room(b.t.name, d, d.dtype, b.t.shape, b.t.nbytes, b.t.nbytes));
  b.placed = TensorPlacement{.direct = true, .dtype = d.dtype, .bytes = b.t.nbytes};
  plan.layout.permuted.push_back(RowPermutation{.tensor = b.index, .source = std::move(*source)});
  bound.push_back({b.t.name, &d, packed(d), [&placed = b.placed](std::uint32_t region, std::uint64_t offset) {
                     placed.region = region;
                     placed.offset = offset;
                   }});
  return true;
}

// The whole tensor into packed memory: one placement, read straight in when it may be.
Status bind_whole(const Binding& b, std::vector<Bound>& bound) {
  const std::uint64_t bytes = b.converts ? formats::converted_bytes(b.t.nbytes, b.t.dtype, b.d.dtype) : b.t.nbytes;
  QLOAD_TRY(check_room(b.t.name, b.d, b.d.dtype, b.t.shape, bytes, bytes));
  b.placed = TensorPlacement{.direct = b.host && !b.converts && b.large, .dtype = b.d.dtype, .bytes = bytes};
  bound.push_back({b.t.name, &b.d, packed(b.d), [&placed = b.placed](std::uint32_t region, std::uint64_t offset) {
                     placed.region = region;
                     placed.offset = offset;
                   }});
  return {};
}

// The caller's memory a part of `bytes` placed bytes and `rows` dim-0 rows covers: packed, or
// rows Destination::row_pitch apart (checked to hold a row each, in whole elements).
Result<Footprint> part_footprint(const Binding& b, std::uint64_t bytes, std::uint64_t rows) {
  const Destination& d = b.d;
  const std::uint64_t element = dtype_info(d.dtype).block_bytes;
  const std::uint64_t row = rows == 0 ? 0 : bytes / rows;
  if (d.row_pitch == 0 || d.row_pitch == row) return packed(d);
  if (d.row_pitch < row)
    return fail(destination_error(
        b.t.name, Errc::kInvalidArgument,
        fmt::format("the destination's rows are {} bytes apart, but each holds {}: they would overlap", d.row_pitch,
                    row)));
  if (d.row_pitch % element != 0)
    return fail(destination_error(
        b.t.name, Errc::kInvalidArgument,
        fmt::format("the destination's row pitch of {} bytes is not a whole number of its {}-byte elements",
                    d.row_pitch, element)));
  return Footprint{.address = d.address, .row_bytes = row, .pitch = d.row_pitch, .rows = rows};
}

// A region, rows in the caller's order, or rows a pitch apart (the whole tensor's, as a region of
// all of dim 0): a shard of the tensor, placed by the deliveries; read straight in only when it
// is whole rows, unconverted, packed and in ranges large enough to be reads of their own.
Status bind_part(const Binding& b, const PlanOptions& options, Plan& plan, std::vector<Bound>& bound) {
  const formats::TensorEntry& t = b.t;
  const Destination& d = b.d;
  if (!d.region && d.rows.empty() && t.shape.rank() == 0)
    return fail(destination_error(t.name, Errc::kInvalidArgument, "a row pitch for a scalar, which has no rows"));
  QLOAD_ASSIGN_OR_RETURN(ShardSlice slice, d.region ? region_slice(t, *d.region)
                                           : d.rows.empty()
                                               ? region_slice(t, TensorRegion{.dim = 0, .begin = 0, .end = t.shape[0]})
                                               : rows_slice(t, d.rows));
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, slice.shape.numel());
  const std::uint64_t bytes = numel * dtype_info(d.dtype).block_bytes;  // at most the tensor's placed bytes
  const std::uint64_t rows_placed = slice.shape.rank() == 0 ? 1 : slice.shape[0];
  QLOAD_ASSIGN_OR_RETURN(const Footprint footprint, part_footprint(b, bytes, rows_placed));
  const std::uint64_t pitch = rows_placed != 0 && d.row_pitch == bytes / rows_placed ? 0 : d.row_pitch;
  QLOAD_TRY(check_room(t.name, d, d.dtype, slice.shape, bytes, footprint.empty() ? 0 : footprint.end() - d.address));
  const auto k = static_cast<std::uint32_t>(plan.copies.shards.size());
  plan.copies.shards.push_back(ShardPlacement{.tensor = b.index,
                                              .dtype = d.dtype,
                                              .bytes = bytes,
                                              .split = Split::kRegion,
                                              .slice = std::move(slice),
                                              .row_pitch = pitch});
  const ShardPlacement& shard = plan.copies.shards.back();
  std::uint64_t needed = 0;
  for (const auto& [begin, end] : shard_ranges(t, std::span(&shard, 1), options.max_gap_bytes)) needed += end - begin;
  const bool partial = needed < t.nbytes && !options.whole_tensor_reads;
  const bool rows =
      shard.slice.col_begin == 0 &&
      shard.slice.col_end * dtype_info(t.dtype).block_bytes * view_row_count(t.shape, shard.slice) == t.nbytes &&
      std::ranges::all_of(shard.slice.rows,
                          [&](const auto& r) { return (r.second - r.first) * b.row_bytes >= kDirectRangeBytes; });
  b.placed = TensorPlacement{
      .first_shard = k,
      .shard_count = 1,
      .partial = partial,
      .direct = b.host && !b.converts && b.large && rows && pitch == 0 && bytes == (partial ? needed : t.nbytes),
      .dtype = d.dtype,
      .bytes = bytes};
  bound.push_back({t.name, &d, footprint, [&plan, &placed = b.placed, k](std::uint32_t region, std::uint64_t offset) {
                     plan.copies.shards[k].region = placed.region = region;
                     plan.copies.shards[k].offset = placed.offset = offset;
                   }});
  return {};
}

// A stored tensor (or its region) into the caller's memory, in the destination's dtype.
Status bind_stored(const formats::Catalog& catalog, std::uint32_t i, const Destination& d, const PlanOptions& options,
                   Plan& plan, std::vector<Bound>& bound) {
  const formats::TensorEntry& t = catalog.tensors[i];
  const bool converts = d.dtype != t.dtype;
  // A quantized weight's kept parts convert too (F32 scales into a server's BF16 parameter, as
  // the server's own copy would): only the dtype policy leaves them as stored.
  if (converts && (!is_float_policy_dtype(t.dtype) || !is_float_policy_dtype(d.dtype)))
    return fail(
        tensor_error(catalog, t, Errc::kInvalidArgument,
                     fmt::format("the destination is {}, the tensor {}: only F16, BF16 and F32 tensors convert on load",
                                 dtype_name(d.dtype), dtype_name(t.dtype))));
  const Binding b{.t = t,
                  .index = i,
                  .d = d,
                  .converts = converts,
                  .host = d.device.is_cpu(),
                  .large = options.direct_min_bytes > 0 && t.nbytes >= options.direct_min_bytes,
                  .row_bytes = t.shape.rank() == 0 || t.shape[0] == 0 ? 0 : t.nbytes / t.shape[0],
                  .placed = plan.layout.tensors[i]};
  QLOAD_ASSIGN_OR_RETURN(const bool permuted, bind_permuted(b, plan, bound));
  if (!permuted && !d.region && d.rows.empty() && d.row_pitch == 0)
    QLOAD_TRY(bind_whole(b, bound));
  else if (!permuted)
    QLOAD_TRY(bind_part(b, options, plan, bound));
  plan.reads.direct_tensors += b.placed.direct ? 1 : 0;
  plan.layout.converted_tensors += converts ? 1 : 0;
  QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, b.placed.bytes));
  return {};
}

// A tensor decoding produces (a dequantized weight, a gathered view...), as the job makes it.
Status bind_output(DecodeOutput& out, const Destination& d, Plan& plan, std::vector<Bound>& bound) {
  if (d.region || !d.rows.empty())
    return fail(destination_error(out.name, Errc::kUnsupported,
                                  "a region of a tensor produced by decoding (dequantized, quantized or gathered): "
                                  "give the whole tensor a destination"));
  const std::uint64_t out_rows = out.shape.rank() == 0 ? 1 : out.shape[0];
  if (d.row_pitch != 0 && (out_rows == 0 || d.row_pitch != out.bytes / out_rows))
    return fail(destination_error(out.name, Errc::kUnsupported,
                                  "a tensor produced by decoding goes into packed rows only (no row pitch)"));
  if (d.dtype != out.dtype)
    return fail(destination_error(
        out.name, Errc::kInvalidArgument,
        fmt::format("the destination is {}, but decoding produces {}", dtype_name(d.dtype), dtype_name(out.dtype))));
  QLOAD_TRY(check_room(out.name, d, out.dtype, out.shape, out.bytes, out.bytes));
  QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, out.bytes));
  bound.push_back({out.name, &d, packed(d), [&out](std::uint32_t region, std::uint64_t offset) {
                     out.region = region;
                     out.offset = offset;
                   }});
  return {};
}

// One external arena per device, from its lowest destination to the end of its highest; two
// destinations sharing a byte are refused, naming both (interleaved rows that do not are fine).
Status make_external_arenas(std::vector<Bound>& bound, Plan& plan) {
  std::ranges::sort(bound, [](const Bound& a, const Bound& b) {
    return std::tie(a.destination->device, a.footprint.address) < std::tie(b.destination->device, b.footprint.address);
  });
  for (std::size_t first = 0; first < bound.size();) {
    const Device device = bound[first].destination->device;
    std::size_t last = first;
    while (last < bound.size() && bound[last].destination->device == device) ++last;
    std::uintptr_t begin = UINTPTR_MAX, end = 0;
    for (std::size_t k = first; k < last; ++k) {
      const Footprint& f = bound[k].footprint;
      if (f.empty()) continue;  // needs no bytes, overlaps nothing
      begin = std::min(begin, f.address);
      if (f.address < end)
        for (std::size_t j = first; j < k; ++j)  // the earlier one it overlaps (the overlap is rare, the scan cheap)
          if (overlap(bound[j].footprint, f))
            return fail(destination_error(bound[k].name, Errc::kInvalidArgument,
                                          fmt::format("its destination on {} overlaps the destination of '{}'",
                                                      device.to_string(), bound[j].name)));
      end = std::max(end, f.end());
    }
    if (begin == UINTPTR_MAX) begin = end = 0;
    const auto region = static_cast<std::uint32_t>(plan.layout.arenas.size());
    plan.layout.arenas.push_back(
        ArenaPlan{.device = device, .bytes = end - begin, .alignment = 1, .external = true, .address = begin});
    for (std::size_t k = first; k < last; ++k) {
      const Footprint& f = bound[k].footprint;
      bound[k].apply(region, f.empty() ? 0 : f.address - begin);
    }
    first = last;
  }
  return {};
}

}  // namespace

Status drop_undestined_jobs(const PlanOptions& options, std::vector<DecodeJob>& jobs) {
  if (!options.destinations_only) return {};
  std::vector<DecodeJob> kept;
  for (DecodeJob& job : jobs) {
    const auto destined = [&](const DecodeOutput& o) { return options.destinations.contains(o.name); };
    if (std::ranges::none_of(job.outputs, destined)) continue;
    for (const DecodeOutput& o : job.outputs)
      if (!destined(o))
        return fail(destination_error(o.name, Errc::kInvalidArgument,
                                      fmt::format("decoding '{}' also produces this tensor, which has no destination",
                                                  job.outputs.front().name)));
    kept.push_back(std::move(job));
  }
  jobs = std::move(kept);
  return {};
}

Status bind_destinations(const formats::Catalog& catalog, const PlanOptions& options, const TensorRoles& roles,
                         Plan& plan) {
  if (options.destinations.empty()) return {};
  std::map<std::string_view, std::uint32_t> stored;
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) stored.emplace(catalog.tensors[i].name, i);
  std::map<std::string_view, DecodeOutput*> produced;
  for (DecodeJob& job : plan.decode.jobs)
    for (DecodeOutput& out : job.outputs) produced.emplace(out.name, &out);
  std::vector<Bound> bound;
  for (const auto& [name, destination] : options.destinations) {
    if (destination.region && !destination.rows.empty())
      return fail(destination_error(name, Errc::kInvalidArgument, "a destination takes a region or rows, not both"));
    if (const auto out = produced.find(name); out != produced.end()) {
      QLOAD_TRY(bind_output(*out->second, destination, plan, bound));
      continue;
    }
    const auto it = stored.find(name);
    if (it == stored.end())
      return fail(
          destination_error(name, Errc::kNotFound, "a destination names a tensor the checkpoint does not have"));
    if (roles.to_scratch[it->second])
      return fail(tensor_error(catalog, catalog.tensors[it->second], Errc::kInvalidArgument,
                               "this tensor is decoded on load (a part of a weight dequantized, quantized or "
                               "repacked): give the decoded tensor the destination"));
    QLOAD_TRY(bind_stored(catalog, it->second, destination, options, plan, bound));
  }
  return make_external_arenas(bound, plan);
}

}  // namespace qload::scheduler::detail
