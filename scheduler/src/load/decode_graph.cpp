#include "load/decode_graph.hpp"

#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "load/shard_delivery.hpp"
#include "qload/formats/convert.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/formats/quant_pack.hpp"
#include "qload/formats/strided.hpp"

namespace qload::scheduler::detail {
namespace {

// Output rows per dequantize task: about 8 MiB of output, so a large weight spreads over the
// workers and a task stays long enough that its overhead does not count.
constexpr std::uint64_t kDecodeTaskBytes = std::uint64_t{8} << 20;

std::span<const std::byte> scratch_bytes(const ReadLoadState& s, std::uint32_t tensor) {
  const std::byte* base = s.targets[s.plan.layout.scratch_region]->base();
  return {base + s.plan.layout.tensors[tensor].offset, static_cast<std::size_t>(s.catalog.tensors[tensor].nbytes)};
}

std::vector<formats::PartBytes> part_bytes(const ReadLoadState& s, const formats::LogicalTensor& lt) {
  std::vector<formats::PartBytes> parts;
  for (const auto& [role, index] : lt.parts) {
    const formats::TensorEntry& t = s.catalog.tensors[index];
    parts.push_back({.role = role, .dtype = t.dtype, .shape = t.shape, .bytes = scratch_bytes(s, index)});
  }
  return parts;
}

// memcpy of dst.size() bytes, none when empty: an empty vector's data() may be null, which
// memcpy may not take even for 0 bytes.
void copy_bytes(std::span<std::byte> dst, const std::byte* src) {
  if (!dst.empty()) std::memcpy(dst.data(), src, dst.size());
}

// Writes through `fill` straight into a host arena, or into host memory then to the GPU
// (quantize and repack outputs; dequantize runs on the GPU itself, see dequantize_task).
template <typename Fill>
Status produce(ReadLoadState& s, const DecodeOutput& out, std::uint64_t offset, std::uint64_t bytes, Fill fill) {
  ArenaTarget& target = *s.targets[out.region];
  if (target.on_host()) return fill(std::span(target.base() + out.offset + offset, static_cast<std::size_t>(bytes)));
  std::vector<std::byte> host(static_cast<std::size_t>(bytes));
  QLOAD_TRY(fill(std::span(host)));
  // Pageable memory: the GPU target copies it through its lanes' pinned bounce buffers.
  const Delivery d{
      .stored = host, .arena_offset = out.offset + offset, .from = out.dtype, .to = out.dtype, .pageable = true};
  return target.deliver(std::span(&d, 1));
}

// A strided view's elements gathered row-major (formats/strided.hpp).
Result<std::vector<std::byte>> gathered(const ReadLoadState& s, std::uint32_t tensor) {
  const formats::TensorEntry& t = s.catalog.tensors[tensor];
  std::vector<std::byte> dense(static_cast<std::size_t>(formats::contiguous_entry(t).nbytes));
  QLOAD_TRY(formats::gather_strided(t, scratch_bytes(s, tensor), dense));
  return dense;
}

// A tensor rank's shard: cuts each whole part (in scratch) to the rank's slice, into its own
// place in scratch, with the same runs that cut a stored tensor into shards (a strided view is
// gathered row-major first).
Status cut_shard_parts(ReadLoadState& s, const DecodeJob& job) {
  ArenaTarget& scratch = *s.targets[s.plan.layout.scratch_region];
  std::vector<Delivery> runs;
  std::vector<ShardPlacement> shards;  // a rewritten slice's bytes are the shard's own: alive until delivered
  shards.reserve(job.shard_inputs.size());
  std::vector<std::vector<std::byte>> dense;  // gathered views: alive until delivered
  for (const DecodeJob::ShardInput& in : job.shard_inputs) {
    const formats::TensorEntry t = formats::contiguous_entry(s.catalog.tensors[in.tensor]);
    const std::byte* stored = scratch_bytes(s, in.tensor).data();
    if (!s.catalog.tensors[in.tensor].strides.empty()) {
      QLOAD_ASSIGN_OR_RETURN(dense.emplace_back(), gathered(s, in.tensor));
      stored = dense.back().data();
    }
    const ShardPlacement& shard = shards.emplace_back(ShardPlacement{
        .tensor = in.tensor, .offset = in.offset, .dtype = t.dtype, .bytes = in.bytes, .slice = in.slice});
    const ChunkPiece whole{.tensor = in.tensor, .tensor_offset = 0, .bytes = t.nbytes};
    shard_deliveries(t, shard, whole, stored, runs);
  }
  return scratch.deliver(runs);
}

// The weight `job` decodes and its parts: the whole weight, or the rank's shard of it (its
// geometry from the plan, its parts the slices cut_shard_parts put in scratch). The parts'
// roles point into the plan, which outlives the task.
std::pair<formats::LogicalTensor, std::vector<formats::PartBytes>> decoded_weight(const ReadLoadState& s,
                                                                                  const DecodeJob& job) {
  const formats::LogicalTensor& whole = s.plan.decode.quant->logical[job.logical];
  if (job.shard_inputs.empty()) return {whole, part_bytes(s, whole)};
  formats::LogicalTensor shard = s.plan.decode.sharded_weights.at(job.logical).shard(whole, job.rank);
  std::vector<formats::PartBytes> parts;
  const std::byte* base = s.targets[s.plan.layout.scratch_region]->base();
  for (std::size_t p = 0; p < whole.parts.size(); ++p) {
    const DecodeJob::ShardInput& in = job.shard_inputs[p];  // in the parts' order (place_decode_jobs)
    parts.push_back({.role = whole.parts[p].first,
                     .dtype = s.catalog.tensors[in.tensor].dtype,
                     .shape = in.slice.shape,
                     .bytes = std::span(base + in.offset, static_cast<std::size_t>(in.bytes))});
  }
  return {std::move(shard), std::move(parts)};
}

// On the CPU for a host arena; on the GPU, from the packed parts, for a GPU arena.
Status dequantize_task(ReadLoadState& s, const DecodeJob& job, std::uint64_t row_begin, std::uint64_t row_end) {
  const auto [lt, parts] = decoded_weight(s, job);
  const DecodeOutput& out = job.outputs.front();
  const std::uint64_t row_bytes = lt.cols * dtype_info(out.dtype).block_bytes;
  return s.targets[out.region]->dequantize(lt, parts, row_begin, row_end, out.offset + row_begin * row_bytes,
                                           out.dtype);
}

// `job`'s weight and scale, quantized from `in` (its [N, K] weight of `in_dtype`) in one pass;
// on a GPU both go through host memory first.
Status quantize_into_outputs(ReadLoadState& s, const DecodeJob& job, std::span<const std::byte> in, DType in_dtype) {
  const DecodeOutput& weight = job.outputs[0];
  const DecodeOutput& scale = job.outputs[1];
  std::vector<std::byte> scale_host(static_cast<std::size_t>(scale.bytes));
  QLOAD_TRY(produce(s, weight, 0, weight.bytes, [&](std::span<std::byte> dst) {
    return formats::quantize(in, in_dtype, weight.shape[0], weight.shape[1], job.target, dst, scale_host);
  }));
  return produce(s, scale, 0, scale.bytes, [&](std::span<std::byte> dst) {
    copy_bytes(dst, scale_host.data());
    return Status{};
  });
}

// The input of a quantize or contiguous job, row-major: the rank's slice cut by cut_shard_parts,
// the stored tensor itself, or (a strided view) its elements gathered into `dense`.
Result<std::span<const std::byte>> row_major_input(const ReadLoadState& s, const DecodeJob& job,
                                                   std::vector<std::byte>& dense) {
  if (!job.shard_inputs.empty()) {
    const DecodeJob::ShardInput& shard = job.shard_inputs.front();
    return std::span<const std::byte>(s.targets[s.plan.layout.scratch_region]->base() + shard.offset,
                                      static_cast<std::size_t>(shard.bytes));
  }
  if (s.catalog.tensors[job.input].strides.empty()) return scratch_bytes(s, job.input);
  QLOAD_ASSIGN_OR_RETURN(dense, gathered(s, job.input));
  return std::span<const std::byte>(dense);
}

// The whole weight, or a tensor rank's shard of it.
Status quantize_task(ReadLoadState& s, const DecodeJob& job) {
  std::vector<std::byte> dense;
  QLOAD_ASSIGN_OR_RETURN(const std::span<const std::byte> in, row_major_input(s, job, dense));
  return quantize_into_outputs(s, job, in, s.catalog.tensors[job.input].dtype);
}

// A strided view made row-major in its placed dtype: the whole tensor, or a tensor rank's slice.
Status contiguous_task(ReadLoadState& s, const DecodeJob& job) {
  const formats::TensorEntry& t = s.catalog.tensors[job.input];
  const DecodeOutput& out = job.outputs.front();
  return produce(s, out, 0, out.bytes, [&](std::span<std::byte> dst) -> Status {
    if (dst.empty()) return {};  // no elements (memcpy may not take the null of an empty vector)
    if (job.shard_inputs.empty() && out.dtype == t.dtype)  // straight into place
      return formats::gather_strided(t, scratch_bytes(s, job.input), dst);
    std::vector<std::byte> dense;
    QLOAD_ASSIGN_OR_RETURN(const std::span<const std::byte> in, row_major_input(s, job, dense));
    if (out.dtype == t.dtype) {
      std::memcpy(dst.data(), in.data(), dst.size());
      return Status{};
    }
    return formats::convert(in, t.dtype, dst, out.dtype);
  });
}

// The whole weight (or a tensor rank's shard) decoded to `through` in host memory, then
// quantized from those values. The decode runs on the CPU for any target: a GPU target gets
// the quantized outputs, as from quantize_task.
Status requantize_task(ReadLoadState& s, const DecodeJob& job) {
  const auto [lt, parts] = decoded_weight(s, job);
  const Shape& shape = job.outputs[0].shape;
  QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, shape.nbytes(job.through));  // K = 0: N may be anything
  std::vector<std::byte> decoded(static_cast<std::size_t>(bytes));
  QLOAD_TRY(formats::dequantize_rows(lt, parts, 0, shape[0], job.through, decoded));
  return quantize_into_outputs(s, job, decoded, job.through);
}

// The repacked parts (DecodeJob::outputs, by role) of one GPTQ v1 / AWQ GEMM / act-order weight,
// or of a tensor rank's shard of one.
Status repack_task(ReadLoadState& s, const DecodeJob& job) {
  const auto [lt, parts] = decoded_weight(s, job);
  auto part = [&](std::string_view role) {
    return std::ranges::find(parts, role, &formats::PartBytes::role)->bytes;  // every role of lt is there
  };
  std::map<std::string, std::vector<std::byte>, std::less<>> out;
  for (const DecodeOutput& o : job.outputs) out[o.role].resize(static_cast<std::size_t>(o.bytes));
  formats::LogicalTensor gptq = lt;  // the geometry the act-order sort works in
  if (lt.params.scheme == formats::QuantScheme::kAwqGemm) {
    QLOAD_TRY(formats::awq_gemm_to_gptq(lt, part("qweight"), part("qzeros"), out["qweight"], out["qzeros"]));
    gptq = formats::awq_gemm_as_gptq(lt);
  } else if (lt.params.gptq_version == 1) {
    QLOAD_TRY(formats::gptq_v1_zeros_to_v2(lt, part("qzeros"), out["qzeros"]));
  } else {
    copy_bytes(out["qzeros"], part("qzeros").data());
  }
  copy_bytes(out["scales"], part("scales").data());
  if (out.contains("perm")) {
    std::vector<std::int32_t> perm(static_cast<std::size_t>(lt.cols));
    QLOAD_TRY(formats::gptq_act_order_sort(gptq, part("g_idx"), part("qweight"), perm, out["qweight"], out["g_idx"]));
    copy_bytes(out["perm"], reinterpret_cast<const std::byte*>(perm.data()));
  } else if (lt.params.scheme == formats::QuantScheme::kGptq) {
    copy_bytes(out["qweight"], part("qweight").data());
  }
  for (const DecodeOutput& o : job.outputs) {
    const std::vector<std::byte>& bytes = out[o.role];
    QLOAD_TRY(produce(s, o, 0, o.bytes, [&](std::span<std::byte> dst) {
      copy_bytes(dst, bytes.data());
      return Status{};
    }));
  }
  return {};
}

// A tensor rank's shard decodes from its parts' slices, cut once before its decode tasks.
std::optional<TaskId> add_cut_task(TaskGraph& g, ReadLoadState& s, const DecodeJob& job,
                                   const std::vector<std::vector<TaskId>>& ready, ResourceId workers,
                                   std::int64_t priority) {
  if (job.shard_inputs.empty()) return std::nullopt;
  std::uint64_t bytes = 0;
  for (const DecodeJob::ShardInput& in : job.shard_inputs) bytes += in.bytes;
  const TaskId cut = g.add({.lane = "decode",
                            .name = fmt::format("cut {} for rank {}", job.outputs.front().name, job.rank),
                            .priority = priority,
                            .bytes = bytes,
                            .work = CpuWork{[&s, &job] { return cut_shard_parts(s, job); }},
                            .claims = {{workers, 1}}});
  for (const std::uint32_t input : job.inputs)
    for (const TaskId dep : ready[input]) g.depends_on(cut, dep);
  return cut;
}

// Adds one decode job's tasks: each waits for the job's cut task, or without one for the tasks
// that put the job's inputs in place.
struct JobTasks {
  TaskGraph& g;
  const DecodeJob& job;
  const std::vector<std::vector<TaskId>>& ready;
  std::int64_t priority;
  std::vector<Claim> claims;
  std::optional<TaskId> cut;
  std::vector<TaskId>& added;

  void add(std::string name, std::uint64_t bytes, std::function<Status()> run) {
    const TaskId task = g.add({.lane = "decode",
                               .name = std::move(name),
                               .priority = priority,
                               .bytes = bytes,
                               .work = CpuWork{std::move(run)},
                               .claims = claims});
    added.push_back(task);
    if (cut) {
      g.depends_on(task, *cut);
      return;
    }
    for (const std::uint32_t input : job.inputs)
      for (const TaskId dep : ready[input]) g.depends_on(task, dep);
  }
};

// Dequantize tasks over rows of the weight or of the rank's shard: all dims but the last (GGML
// weights may be [K] or [E, N, K]). out.bytes, not 0, is the product of every dim and the
// element size (checked when planned), so these products fit and the tasks are at most one per
// 8 MiB.
void add_dequantize_tasks(JobTasks& tasks, ReadLoadState& s) {
  const DecodeJob& job = tasks.job;
  const DecodeOutput& out = job.outputs.front();
  const std::size_t rank = out.shape.rank();
  const std::uint64_t cols = rank == 0 ? 1 : out.shape[rank - 1];
  std::uint64_t rows = 1;
  for (std::size_t d = 0; d + 1 < rank; ++d) rows *= out.shape[d];
  const std::uint64_t row_bytes = std::max<std::uint64_t>(1, cols * dtype_info(out.dtype).block_bytes);
  // A GPU decodes a whole weight in one kernel: splitting it would copy its parts once per piece.
  const bool on_gpu = !s.targets[out.region]->on_host();
  const std::uint64_t step =
      on_gpu ? std::max<std::uint64_t>(rows, 1) : std::max<std::uint64_t>(1, kDecodeTaskBytes / row_bytes);
  const std::string device = s.plan.layout.arenas[out.region].device.to_string();
  for (std::uint64_t r = 0; r < rows; r += step) {
    const std::uint64_t end = std::min(rows, r + step);
    tasks.add(fmt::format("dequantize {} rows {}..{} on {}", out.name, r, end, device), (end - r) * row_bytes,
              [&s, &job, r, end] { return dequantize_task(s, job, r, end); });
  }
}

}  // namespace

std::vector<std::vector<TaskId>> add_decode_tasks(TaskGraph& g, ReadLoadState& s,
                                                  const std::vector<std::vector<TaskId>>& ready, ResourceId workers,
                                                  const std::vector<std::optional<ResourceId>>& lanes) {
  std::vector<std::vector<TaskId>> tasks(s.plan.decode.jobs.size());
  const auto priority = static_cast<std::int64_t>(s.plan.reads.chunks.size());  // after the reads they wait for
  for (std::size_t j = 0; j < s.plan.decode.jobs.size(); ++j) {
    const DecodeJob& job = s.plan.decode.jobs[j];
    const DecodeOutput& out = job.outputs.front();
    std::vector<Claim> claims = {{workers, 1}};
    if (lanes[out.region]) claims.push_back({*lanes[out.region], 1});
    JobTasks job_tasks{.g = g,
                       .job = job,
                       .ready = ready,
                       .priority = priority,
                       .claims = std::move(claims),
                       .cut = add_cut_task(g, s, job, ready, workers, priority),
                       .added = tasks[j]};
    if (job.kind == DecodeJob::Kind::kRepack) {
      job_tasks.add(fmt::format("repack {}", s.plan.decode.quant->logical[job.logical].name), out.bytes,
                    [&s, &job] { return repack_task(s, job); });
      continue;
    }
    if (job.kind == DecodeJob::Kind::kQuantize) {
      job_tasks.add(fmt::format("quantize {}", out.name), out.bytes, [&s, &job] { return quantize_task(s, job); });
      continue;
    }
    if (job.kind == DecodeJob::Kind::kContiguous) {
      job_tasks.add(fmt::format("gather {} row-major", out.name), out.bytes,
                    [&s, &job] { return contiguous_task(s, job); });
      continue;
    }
    if (job.kind == DecodeJob::Kind::kRequantize) {
      job_tasks.add(fmt::format("requantize {}", out.name), out.bytes, [&s, &job] { return requantize_task(s, job); });
      continue;
    }
    // No elements (a dim is 0, the others may be anything): one task checks the parts, as a
    // decode would; no task per block of rows that hold nothing.
    if (out.bytes == 0) {
      job_tasks.add(fmt::format("check {} (no elements)", out.name), 0, [&s, &job] {
        const auto [lt, parts] = decoded_weight(s, job);
        return formats::check_quantized_parts(lt, parts);
      });
      continue;
    }
    add_dequantize_tasks(job_tasks, s);
  }
  return tasks;
}

}  // namespace qload::scheduler::detail
