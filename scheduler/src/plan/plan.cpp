// make_plan: tensor validation, then the plan's parts in order: detected quantization and
// decode jobs, the arena layout (or mmap ranges), read chunks. Every sum and rounding is
// overflow-checked because offsets and sizes come from untrusted headers.
#include "qload/scheduler/plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "plan/arena_layout.hpp"
#include "plan/auto_mode.hpp"
#include "plan/chunker.hpp"
#include "plan/decode_plan.hpp"
#include "plan/destinations.hpp"
#include "plan/plan_arith.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/strided.hpp"

namespace qload::scheduler {

namespace {

using detail::tensor_error;
using detail::TensorRoles;

// The tensor's bytes lie inside its file's validated size and agree with dtype x shape; a
// view's gathered bytes stay within formats::check_view_expansion's bound of its stored ones.
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
  if (!t.strides.empty()) {  // gathered into a row-major tensor of dtype x shape bytes, within a bound
    const Status bounded = formats::check_view_expansion(t.shape, t.dtype, t.nbytes);
    if (!bounded) return fail(tensor_error(catalog, t, bounded.error().code(), bounded.error().message()));
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
  QLOAD_TRY(detail::drop_undestined_jobs(options, plan.decode.jobs));
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

// Mmap mode's regions (PlanOptions::region): each a view into its tensor's mapping, rows or a
// strided column range, of which only the pages read are read; not hashed (partial) unless
// whole_tensor_reads. placed_bytes counts what the views hand out (a region its own bytes, not
// its tensor's), so that a rank's report shows the part it touched in this mode too.
Status map_regions(const formats::Catalog& catalog, const PlanOptions& options, Plan& plan) {
  plan.layout.placed_bytes = plan.layout.tensor_bytes;
  if (!options.region) return {};
  for (std::uint32_t i = 0; i < catalog.tensors.size(); ++i) {
    const formats::TensorEntry& t = catalog.tensors[i];
    auto asked = options.region(t.name);
    if (!asked) return fail(std::move(asked.error()).with_tensor(t.name));
    if (!*asked) continue;
    QLOAD_ASSIGN_OR_RETURN(ShardSlice slice, region_slice(t, **asked));
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t numel, slice.shape.numel());
    const DTypeInfo& info = dtype_info(t.dtype);
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t view, checked_mul(numel / info.block_elems, info.block_bytes));
    plan.layout.placed_bytes -= t.nbytes - std::min(view, t.nbytes);  // a region's elements are some of the tensor's
    TensorPlacement& p = plan.layout.tensors[i];
    const std::uint64_t element = dtype_info(t.dtype).block_bytes;
    const std::uint64_t row_bytes = t.shape[0] == 0 ? 0 : t.nbytes / t.shape[0];
    const auto [first, last] = slice.rows.front();
    const std::uint64_t start = first * row_bytes + slice.col_begin * element;
    const bool empty = first == last || slice.col_begin == slice.col_end;
    const std::uint64_t span = empty ? 0 : (last - 1) * row_bytes + slice.col_end * element - start;
    p.first_shard = static_cast<std::uint32_t>(plan.copies.shards.size());
    p.shard_count = 1;
    p.partial = !options.whole_tensor_reads;
    plan.copies.shards.push_back(ShardPlacement{.tensor = i,
                                                .rank = 0,
                                                .region = p.region,
                                                .offset = p.offset + start,
                                                .dtype = t.dtype,
                                                .bytes = span,
                                                .split = Split::kRegion,
                                                .slice = std::move(slice)});
  }
  return {};
}

}  // namespace

Result<Plan> make_plan(const formats::Catalog& catalog, const PlanOptions& options) {
  QLOAD_TRY(options.validate());
  if (options.mode == LoadMode::kAuto) {
    PlanOptions decided = options;
    // Destinations are filled by reads: nothing maps into the caller's memory.
    decided.mode = options.destinations.empty() ? detail::choose_load_mode(catalog, options) : LoadMode::kRead;
    return make_plan(catalog, decided);
  }
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
    QLOAD_TRY(map_regions(catalog, options, plan));
    return plan;
  }
  QLOAD_ASSIGN_OR_RETURN(const TensorRoles roles, plan_quantization(catalog, options, plan));
  QLOAD_TRY(detail::place_in_arenas(catalog, order, options, roles, plan));
  QLOAD_TRY(detail::bind_destinations(catalog, options, roles, plan));
  plan.reads.chunks = detail::make_chunks(catalog, order, plan.layout.tensors, plan.copies.shards, options);
  for (const ReadChunk& c : plan.reads.chunks) {
    plan.reads.read_bytes += c.bytes;  // at most tensor_bytes plus one gap and alignment per chunk
    if (!c.direct) plan.reads.max_staged_chunk_bytes = std::max(plan.reads.max_staged_chunk_bytes, c.bytes);
  }
  return plan;
}

}  // namespace qload::scheduler
