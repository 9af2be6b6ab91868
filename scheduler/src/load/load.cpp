// The public load entry points: option checks, then the read or mmap path.
#include "qload/scheduler/load.hpp"

#include <algorithm>
#include <map>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "load/load_internal.hpp"
#include "load/tensor_digests.hpp"

namespace qload::scheduler {

Status LoadOptions::validate() const {
  QLOAD_TRY(plan.validate());
  if (reads_in_flight == 0) return fail(Errc::kInvalidArgument, "reads_in_flight must be at least 1");
  if (copy_lanes == 0 || copy_lanes > 64) return fail(Errc::kInvalidArgument, "copy_lanes must be 1 to 64");
  if (digests == Digests::kOff && !expected_xxh3_64.empty())
    return fail(Errc::kInvalidArgument, "expected digests were given but digests are off");
  if (plan.mode == LoadMode::kMmap) return {};
  QLOAD_TRY(staging.validate());
  const std::uint64_t slot = staging_pool != nullptr ? staging_pool->slot_bytes() : staging.slot_bytes;
  if (plan.chunk_bytes > slot)
    return fail(Errc::kInvalidArgument,
                fmt::format("chunk size {} exceeds the staging slot size {}: a chunk is read into one slot",
                            plan.chunk_bytes, slot));
  return {};
}

namespace {

// load() on this process: every check, then the mode's load (which passes `barrier`, for
// shared reads, once it has read).
Result<Model> load_here(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const LoadContext& context, detail::SharedReadsBarrier* barrier) {
  const detail::LoadClock::time_point begin = detail::LoadClock::now();
  QLOAD_TRY(options.validate());
  if (context.stop.stop_requested()) return fail(Errc::kCancelled, "the load was cancelled before it started");
  if (plan.layout.tensors.size() != catalog.tensors.size())
    return fail(Errc::kInvalidArgument, fmt::format("the plan has {} tensors, the catalog {}: made for another catalog",
                                                    plan.layout.tensors.size(), catalog.tensors.size()));
  QLOAD_ASSIGN_OR_RETURN(const detail::ExpectedDigests expected, detail::expected_digests(catalog, options));
  for (std::uint32_t i = 0; i < plan.layout.tensors.size(); ++i)
    if (expected[i] && plan.layout.tensors[i].partial)
      return fail(Error(Errc::kInvalidArgument,
                        "a digest is expected for a tensor this process reads only in part; "
                        "plan with whole_tensor_reads to check it")
                      .with_tensor(catalog.tensors[i].name));
  if (!plan.decode.quant_warning.empty())
    options.log.warn("quantized weights are not described (loaded as stored tensors): " + plan.decode.quant_warning);
  if (plan.mode == LoadMode::kMmap) {
    QLOAD_ASSIGN_OR_RETURN(Model model, detail::load_mmap(catalog, plan, options, context, expected, begin));
    QLOAD_TRY(detail::hand_over_all(model, context));
    return model;
  }
  return detail::load_read(catalog, plan, options, context, expected, begin, barrier);
}

}  // namespace

Result<Model> load(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                   const LoadContext& context) {
  if (plan.copies.shared_reads == SharedReads::kNone) return load_here(catalog, plan, options, context, nullptr);
  // Shared reads: every process reads what it reads, then passes the barrier (a process that
  // failed before, for whatever reason, passes it here, so none waits); once all have
  // succeeded, each tensor goes from its reader to the others.
  if (context.communicator == nullptr)
    return fail(Errc::kInvalidArgument, "the plan shares reads between processes, but no communicator was given");
  if (plan.mode != LoadMode::kRead) return fail(Errc::kInvalidArgument, "shared reads need read mode");
  detail::SharedReadsBarrier barrier(*context.communicator);
  Result<Model> model = load_here(catalog, plan, options, context, &barrier);
  if (!barrier.passed()) {
    Status passed = barrier.pass(model.has_value());
    if (model) QLOAD_TRY(passed);
  }
  if (!model) return model;
  if (plan.copies.shared_reads == SharedReads::kBroadcast) {
    const detail::LoadClock::time_point begin = detail::LoadClock::now();
    QLOAD_TRY(detail::broadcast_gpu_copies(*model, plan, *context.communicator));
    model->add_load_seconds(std::chrono::duration<double>(detail::LoadClock::now() - begin).count());
  }
  QLOAD_TRY(detail::hand_over_all(*model, context));
  return model;
}

Result<Model> load(const formats::Catalog& catalog, const LoadOptions& options, const LoadContext& context) {
  QLOAD_ASSIGN_OR_RETURN(const Plan plan, make_plan(catalog, options.plan));
  return load(catalog, plan, options, context);
}

namespace detail {

bool digest_computed(const Plan& plan, std::uint32_t i) {
  const TensorPlacement& p = plan.layout.tensors[i];
  if (plan.mode != LoadMode::kRead) return !p.partial;  // mmap: every tensor but a region's view
  return !p.partial && !p.received && (p.region != kNoRegion || p.shard_count > 0);
}

std::uint32_t cpu_workers(const LoadOptions& options) {
  if (options.cpu_workers != 0) return options.cpu_workers;
  return std::max(1u, std::thread::hardware_concurrency());
}

Status check_catalog_size(const formats::CatalogFile& file, std::uint64_t size_now) {
  if (size_now == file.size) return {};
  return fail(
      Error(Errc::kFileChanged, fmt::format("file is {} bytes now, {} when its header was read", size_now, file.size))
          .with_file(file.path));
}

std::vector<DeviceTensor> describe_tensors(const formats::Catalog& catalog, const Plan& plan,
                                           const std::vector<const std::byte*>& regions, bool writable,
                                           std::vector<TensorOrigin>* origins) {
  std::vector<DeviceTensor> out;
  out.reserve(catalog.tensors.size());
  const bool mmap = plan.mode == LoadMode::kMmap;
  // One tensor of the model: `bytes` of `dtype` and `shape` at `offset` in `region`.
  TensorOrigin origin;
  const auto add = [&](const std::string& name, std::uint32_t region, std::uint64_t offset, DType dtype,
                       const Shape& shape, std::uint64_t bytes) {
    if (origins != nullptr) origins->push_back(origin);
    const Device device = mmap ? Device{} : plan.layout.arenas[region].device;  // mmap regions are file mappings (host)
    out.push_back(DeviceTensor{.name = name,
                               .device = device.to_string(),
                               .data = region == kNoRegion ? nullptr : regions[region] + offset,
                               .writable = writable,
                               .host = device.is_cpu(),
                               .caller_owned = !mmap && region != kNoRegion && plan.layout.arenas[region].external,
                               .dtype = dtype,
                               .shape = shape,
                               .strides = shape.contiguous_strides(),
                               .nbytes = bytes});
  };
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) {
    const formats::TensorEntry& t = catalog.tensors[i];
    const TensorPlacement& p = plan.layout.tensors[i];
    origin = {.decoded = false, .index = static_cast<std::uint32_t>(i)};
    if (!mmap && p.region == kNoRegion) continue;                 // held by another process
    if (!mmap && plan.layout.arenas[p.region].scratch) continue;  // a decode input, not part of the model
    for (std::uint32_t k = p.first_shard; k < p.first_shard + p.shard_count; ++k) {  // parallel layouts, regions
      const ShardPlacement& shard = plan.copies.shards[k];
      add(t.name, shard.region, shard.offset, shard.dtype, shard.slice.shape, shard.bytes);
      // A mapped region is a view of the stored tensor: its rows keep the stored row stride.
      if (mmap) out.back().strides = t.shape.contiguous_strides();
      if (shard.row_pitch != 0) {  // a caller's destination with gaps between its rows
        const DTypeInfo& element = dtype_info(shard.dtype);
        out.back().strides[0] = static_cast<std::int64_t>(shard.row_pitch / element.block_bytes * element.block_elems);
      }
    }
    if (p.shard_count == 0) add(t.name, p.region, p.offset, p.dtype, t.shape, p.bytes);
  }
  for (std::uint32_t j = 0; j < plan.decode.jobs.size(); ++j) {
    origin = {.decoded = true, .index = j};
    for (const DecodeOutput& o : plan.decode.jobs[j].outputs)
      add(o.name, o.region, o.offset, o.dtype, o.shape, o.bytes);
  }
  return out;
}

Status hand_over_all(const Model& model, const LoadContext& context) {
  if (!context.on_tensor) return {};
  // A mapped model's tensors live as long as its mappings, which they share; others are copied
  // by the consumer (the callback's contract for a null owner).
  const std::shared_ptr<const void> keep = model.mappings_owner();
  for (std::uint32_t i = 0; i < model.size(); ++i) QLOAD_TRY(context.on_tensor(i, model.tensors()[i], keep));
  return {};
}

std::vector<QuantizedWeight> describe_quantized(const formats::Catalog& catalog, const Plan& plan,
                                                const std::vector<DeviceTensor>& tensors) {
  std::vector<QuantizedWeight> out;
  if (!plan.decode.quant) return out;  // nothing detected, nothing to describe
  // A dequantized weight is a plain tensor now (a requantized one, quantize-on-load's weight and
  // scale): its parts stayed in scratch.
  std::vector<bool> dequantized(plan.decode.quant->logical.size(), false);
  std::map<std::uint32_t, std::vector<const DecodeJob*>> repacked;  // logical index -> its repack jobs (one per copy)
  for (const DecodeJob& job : plan.decode.jobs) {
    if (job.kind == DecodeJob::Kind::kDequantize || job.kind == DecodeJob::Kind::kRequantize)
      dequantized[job.logical] = true;
    if (job.kind == DecodeJob::Kind::kRepack) repacked[job.logical].push_back(&job);
  }
  // One description per copy of a weight (the whole weight; under a parallel layout, a tensor
  // rank's shard or a replica), on its device, with its N and K; its parts are that device's.
  std::map<std::string_view, std::uint32_t> index;  // by name (unique without copies)
  std::map<std::pair<std::string_view, std::string_view>, std::uint32_t> on_device;
  for (std::uint32_t i = 0; i < tensors.size(); ++i) {
    index.emplace(tensors[i].name, i);
    on_device.emplace(std::pair<std::string_view, std::string_view>(tensors[i].name, tensors[i].device), i);
  }
  for (std::uint32_t l = 0; l < plan.decode.quant->logical.size(); ++l) {
    if (dequantized[l]) continue;
    const formats::LogicalTensor& lt = plan.decode.quant->logical[l];
    const auto dims = plan.decode.sharded_weights.find(l);
    if (const auto jobs = repacked.find(l); jobs != repacked.end()) {  // each copy's parts, repacked
      for (const DecodeJob* job : jobs->second) {
        QuantizedWeight w{
            .name = lt.name, .params = job->repacked, .rows = lt.rows, .cols = lt.cols, .experts = lt.experts};
        if (dims != plan.decode.sharded_weights.end()) std::tie(w.rows, w.cols) = dims->second.dims[job->rank];
        for (const DecodeOutput& o : job->outputs) {
          const std::string device = plan.layout.arenas[o.region].device.to_string();
          w.parts.emplace_back(o.role, on_device.at({o.name, device}));
        }
        w.device = tensors[w.parts.front().second].device;
        out.push_back(std::move(w));
      }
      continue;
    }
    const TensorPlacement& first_part = plan.layout.tensors[lt.parts.front().second];
    if (first_part.shard_count == 0) {  // kept whole (names are unique then), unless another process holds it
      if (plan.mode == LoadMode::kRead && first_part.region == kNoRegion) continue;
      // Described only when every part was loaded (a load into destinations may take some parts only).
      if (!std::ranges::all_of(lt.parts,
                               [&](const auto& part) { return index.contains(catalog.tensors[part.second].name); }))
        continue;
      QuantizedWeight w{.name = lt.name, .params = lt.params, .rows = lt.rows, .cols = lt.cols, .experts = lt.experts};
      for (const auto& [role, part] : lt.parts) w.parts.emplace_back(role, index.at(catalog.tensors[part].name));
      w.device = tensors[w.parts.front().second].device;
      out.push_back(std::move(w));
      continue;
    }
    for (std::uint32_t c = 0; c < first_part.shard_count; ++c) {
      const ShardPlacement& shard = plan.copies.shards[first_part.first_shard + c];
      QuantizedWeight w{.name = lt.name, .params = lt.params, .rows = lt.rows, .cols = lt.cols, .experts = lt.experts};
      w.device = plan.layout.arenas[shard.region].device.to_string();
      if (dims != plan.decode.sharded_weights.end()) {
        std::tie(w.rows, w.cols) = dims->second.dims[shard.rank];
        w.params.groups = dims->second.groups;
        w.experts = dims->second.experts;
      }
      bool complete = true;  // every part has a copy on this device (see above)
      for (const auto& [role, part] : lt.parts) {
        const auto found = on_device.find({catalog.tensors[part].name, w.device});
        complete = complete && found != on_device.end();
        if (complete) w.parts.emplace_back(role, found->second);
      }
      if (complete) out.push_back(std::move(w));
    }
  }
  return out;
}

void fill_report(LoadReport& report, const formats::Catalog& catalog, const Plan& plan,
                 const std::vector<std::uint64_t>& digests, const ExecutionStats& stats, LoadClock::time_point begin) {
  report.mode = plan.mode;
  // Every copy counts (a shard or replica is a tensor of its device); decode inputs are not in
  // the model, their outputs are; another process's tensors are not here.
  const bool read = plan.mode == LoadMode::kRead;
  report.tensors = 0;
  for (const TensorPlacement& p : plan.layout.tensors) {
    if (p.shard_count > 0)
      report.tensors += p.shard_count;
    else if (!read || (p.region != kNoRegion && p.region != plan.layout.scratch_region))
      ++report.tensors;
  }
  for (const DecodeJob& job : plan.decode.jobs) report.tensors += job.outputs.size();
  report.decoded_tensors = plan.decode.jobs.size();
  // Mmap mode: what the views hand out (a region's view its own bytes), as placed_bytes.
  report.tensor_bytes = read ? plan.layout.tensor_bytes : plan.layout.placed_bytes;
  if (read) {  // what this process read of them (all of them, unless other processes hold some)
    report.tensor_bytes = 0;
    for (const ReadChunk& c : plan.reads.chunks)
      for (const ChunkPiece& piece : c.pieces) report.tensor_bytes += piece.bytes;
  }
  report.placed_bytes = plan.layout.placed_bytes;
  report.converted_tensors = plan.layout.converted_tensors;
  report.read_bytes = plan.mode == LoadMode::kRead ? plan.reads.read_bytes : 0;
  report.chunks = plan.reads.chunks.size();
  report.direct_tensors = plan.reads.direct_tensors;
  report.stages = stats.stages;
  report.resources = stats.resources;
  for (std::size_t i = 0; i < digests.size(); ++i)
    if (digest_computed(plan, static_cast<std::uint32_t>(i)))
      report.digests.push_back({catalog.tensors[i].name, digests[i]});
  report.seconds = std::chrono::duration<double>(LoadClock::now() - begin).count();
  report.gb_per_s = report.seconds > 0 ? static_cast<double>(report.tensor_bytes) / report.seconds / 1e9 : 0;
}

}  // namespace detail
}  // namespace qload::scheduler
