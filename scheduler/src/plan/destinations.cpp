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

// One destination, checked, waiting for its device's arena to exist: `apply` writes the region
// and offset into the plan.
struct Bound {
  std::string_view name;
  const Destination* destination = nullptr;
  std::function<void(std::uint32_t region, std::uint64_t offset)> apply;
};

Status check_room(std::string_view name, const Destination& d, DType dtype, const Shape& shape, std::uint64_t bytes) {
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
  if (d.address > UINTPTR_MAX - bytes)
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

// A stored tensor (or its region) into the caller's memory, in the destination's dtype.
Status bind_stored(const formats::Catalog& catalog, std::uint32_t i, const Destination& d, const PlanOptions& options,
                   const TensorRoles& roles, Plan& plan, std::vector<Bound>& bound) {
  const formats::TensorEntry& t = catalog.tensors[i];
  const bool converts = d.dtype != t.dtype;
  if (converts && (!is_float_policy_dtype(t.dtype) || !is_float_policy_dtype(d.dtype) || roles.quantized_part[i]))
    return fail(tensor_error(
        catalog, t, Errc::kInvalidArgument,
        fmt::format("the destination is {}, the tensor {}: only plain F16, BF16 and F32 tensors convert on load",
                    dtype_name(d.dtype), dtype_name(t.dtype))));
  const bool host = d.device.is_cpu();
  const bool large = options.direct_min_bytes > 0 && t.nbytes >= options.direct_min_bytes;
  TensorPlacement& placed = plan.layout.tensors[i];
  // Every row once, unconverted, large, on the host, rows of at least kPermutedRowBytes: read
  // whole and straight into the destination, then permuted there (no staging copy, and no read
  // per row, as a permutation of single rows would otherwise need).
  const std::uint64_t row_bytes = t.shape.rank() == 0 || t.shape[0] == 0 ? 0 : t.nbytes / t.shape[0];
  if (!d.rows.empty() && !d.region && host && !converts && large && row_bytes >= kPermutedRowBytes)
    if (auto source = permutation(d.rows, t.shape[0])) {
      QLOAD_TRY(check_room(t.name, d, d.dtype, t.shape, t.nbytes));
      placed = TensorPlacement{.direct = true, .dtype = d.dtype, .bytes = t.nbytes};
      plan.layout.permuted.push_back(RowPermutation{.tensor = i, .source = std::move(*source)});
      bound.push_back({t.name, &d, [&placed](std::uint32_t region, std::uint64_t offset) {
                         placed.region = region;
                         placed.offset = offset;
                       }});
      plan.reads.direct_tensors += 1;
      QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, placed.bytes));
      return {};
    }
  if (!d.region && d.rows.empty()) {
    const std::uint64_t bytes = converts ? formats::converted_bytes(t.nbytes, t.dtype, d.dtype) : t.nbytes;
    QLOAD_TRY(check_room(t.name, d, d.dtype, t.shape, bytes));
    placed = TensorPlacement{.direct = host && !converts && large, .dtype = d.dtype, .bytes = bytes};
    bound.push_back({t.name, &d, [&placed](std::uint32_t region, std::uint64_t offset) {
                       placed.region = region;
                       placed.offset = offset;
                     }});
  } else {
    QLOAD_ASSIGN_OR_RETURN(ShardSlice slice, d.region ? region_slice(t, *d.region) : rows_slice(t, d.rows));
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, slice.shape.numel());
    const std::uint64_t element = dtype_info(d.dtype).block_bytes;
    const std::uint64_t bytes = numel * element;  // at most the tensor's placed bytes
    QLOAD_TRY(check_room(t.name, d, d.dtype, slice.shape, bytes));
    const auto k = static_cast<std::uint32_t>(plan.copies.shards.size());
    plan.copies.shards.push_back(ShardPlacement{
        .tensor = i, .dtype = d.dtype, .bytes = bytes, .split = Split::kRegion, .slice = std::move(slice)});
    const ShardPlacement& shard = plan.copies.shards.back();
    std::uint64_t needed = 0;
    for (const auto& [begin, end] : shard_ranges(t, std::span(&shard, 1), options.max_gap_bytes)) needed += end - begin;
    const bool partial = needed < t.nbytes && !options.whole_tensor_reads;
    // Whole rows of an unconverted tensor, nothing else read, in ranges large enough to be reads
    // of their own: straight into the destination.
    const bool rows =
        shard.slice.col_begin == 0 &&
        shard.slice.col_end * dtype_info(t.dtype).block_bytes * view_row_count(t.shape, shard.slice) == t.nbytes &&
        std::ranges::all_of(shard.slice.rows,
                            [&](const auto& r) { return (r.second - r.first) * row_bytes >= kDirectRangeBytes; });
    placed = TensorPlacement{.first_shard = k,
                             .shard_count = 1,
                             .partial = partial,
                             .direct = host && !converts && large && rows && bytes == (partial ? needed : t.nbytes),
                             .dtype = d.dtype,
                             .bytes = bytes};
    bound.push_back({t.name, &d, [&plan, &placed, k](std::uint32_t region, std::uint64_t offset) {
                       plan.copies.shards[k].region = placed.region = region;
                       plan.copies.shards[k].offset = placed.offset = offset;
                     }});
  }
  plan.reads.direct_tensors += placed.direct ? 1 : 0;
  plan.layout.converted_tensors += converts ? 1 : 0;
  QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, placed.bytes));
  return {};
}

// A tensor decoding produces (a dequantized weight, a gathered view...), as the job makes it.
Status bind_output(DecodeOutput& out, const Destination& d, Plan& plan, std::vector<Bound>& bound) {
  if (d.region || !d.rows.empty())
    return fail(destination_error(out.name, Errc::kUnsupported,
                                  "a region of a tensor produced by decoding (dequantized, quantized or gathered): "
                                  "give the whole tensor a destination"));
  if (d.dtype != out.dtype)
    return fail(destination_error(
        out.name, Errc::kInvalidArgument,
        fmt::format("the destination is {}, but decoding produces {}", dtype_name(d.dtype), dtype_name(out.dtype))));
  QLOAD_TRY(check_room(out.name, d, out.dtype, out.shape, out.bytes));
  QLOAD_ASSIGN_OR_RETURN(plan.layout.placed_bytes, checked_add(plan.layout.placed_bytes, out.bytes));
  bound.push_back({out.name, &d, [&out](std::uint32_t region, std::uint64_t offset) {
                     out.region = region;
                     out.offset = offset;
                   }});
  return {};
}

// One external arena per device, from its lowest destination to the end of its highest; two
// destinations sharing a byte are refused, naming both.
Status make_external_arenas(std::vector<Bound>& bound, Plan& plan) {
  std::ranges::sort(bound, [](const Bound& a, const Bound& b) {
    const Destination& x = *a.destination;
    const Destination& y = *b.destination;
    return std::tie(x.device, x.address) < std::tie(y.device, y.address);
  });
  for (std::size_t first = 0; first < bound.size();) {
    const Device device = bound[first].destination->device;
    std::size_t last = first;
    while (last < bound.size() && bound[last].destination->device == device) ++last;
    std::uintptr_t begin = UINTPTR_MAX, end = 0;
    for (std::size_t k = first; k < last; ++k) {
      const Destination& d = *bound[k].destination;
      if (d.bytes == 0) continue;  // needs no bytes, overlaps nothing
      begin = std::min(begin, d.address);
      if (d.address < end)
        for (std::size_t j = first; j < k; ++j)  // the earlier one it overlaps (the overlap is rare, the scan cheap)
          if (const Destination& e = *bound[j].destination; e.bytes > 0 && e.address + e.bytes > d.address)
            return fail(destination_error(bound[k].name, Errc::kInvalidArgument,
                                          fmt::format("its destination on {} overlaps the destination of '{}'",
                                                      device.to_string(), bound[j].name)));
      end = std::max(end, d.address + d.bytes);
    }
    if (begin == UINTPTR_MAX) begin = end = 0;
    const auto region = static_cast<std::uint32_t>(plan.layout.arenas.size());
    plan.layout.arenas.push_back(
        ArenaPlan{.device = device, .bytes = end - begin, .alignment = 1, .external = true, .address = begin});
    for (std::size_t k = first; k < last; ++k) {
      const Destination& d = *bound[k].destination;
      bound[k].apply(region, d.bytes == 0 ? 0 : d.address - begin);
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
    QLOAD_TRY(bind_stored(catalog, it->second, destination, options, roles, plan, bound));
  }
  return make_external_arenas(bound, plan);
}

}  // namespace qload::scheduler::detail
