// Read mode: staging pool -> DAG (read, verify, place, h2d) -> one arena per device.
#include <algorithm>
#include <optional>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "exec/arena_target.hpp"
#include "load/load_internal.hpp"
#include "load/read_graph.hpp"
#include "load/shard_delivery.hpp"
#include "load/shared_exchange.hpp"
#include "load/stream_tasks.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/trace.hpp"
#include "qload/scheduler/executor.hpp"
#include "qload/scheduler/page_cache.hpp"

namespace qload::scheduler::detail {
namespace {

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

// Refuses, before anything is allocated, host arenas (the model's, scratch and relay) larger
// than the machine's memory; a max_arena_bytes budget replaces this check.
Status check_host_memory(const Plan& plan, const PlanOptions& options) {
  if (options.max_arena_bytes != 0) return {};
  std::uint64_t host_bytes = 0;
  for (const ArenaPlan& arena : plan.layout.arenas)
    // Scratch and relay arenas are host memory too; the caller's (external) memory exists already.
    if (arena.device.is_cpu() && !arena.external) host_bytes += arena.bytes;
  if (host_bytes > physical_memory_bytes())
    return fail(Errc::kOutOfMemory, fmt::format("the host arenas need {} bytes, more than the {} bytes of memory",
                                                host_bytes, physical_memory_bytes()));
  return {};
}

// The pool this load needs within the budget: no more slots than staged chunks, and slots no
// larger than the largest staged chunk (a small checkpoint does not map 256 MiB).
StagingOptions sized_staging(const StagingOptions& budget, const Plan& plan) {
  std::uint64_t staged = 0;
  for (const ReadChunk& c : plan.reads.chunks) staged += c.direct ? 0 : 1;
  const std::uint64_t largest = (std::max<std::uint64_t>(plan.reads.max_staged_chunk_bytes, 1) + 4095) / 4096 * 4096;
  StagingOptions out;
  out.slot_bytes = std::min(budget.slot_bytes, largest);
  const std::uint64_t slots = std::clamp<std::uint64_t>(staged, 1, budget.total_bytes / out.slot_bytes);
  out.total_bytes = slots * out.slot_bytes;
  return out;
}

// The engine for `plan` when the settings leave it to qload: a load into the caller's host
// memory from files the page cache holds reads with the pread pool, one thread per core, whose
// workers fill the caller's fresh pages without faulting them in (io/src/page_fill.hpp: 0.38-0.55
// s against io_uring's 0.61-0.72 s for a warm 1.7 GB load_into on the 2-core VM,
// docs/benchmarks-log.md); anything else with io_uring, which reads cold files, feeds staging
// for the GPUs and faults qload's own huge-page arenas in at least as fast.
io::ReaderOptions reader_options_for(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options) {
  io::ReaderOptions reader_options = options.io;
  // The executor never hands over more reads than its budget: a deeper queue would only
  // create idle pread threads or SQEs.
  reader_options.queue_depth = std::min(reader_options.queue_depth, options.reads_in_flight);
  const bool host_only =
      std::ranges::all_of(plan.layout.arenas, [](const ArenaPlan& arena) { return arena.device.is_cpu(); });
  const bool into_callers =
      std::ranges::any_of(plan.layout.arenas, [](const ArenaPlan& arena) { return arena.external; });
  if (options.io.engine == io::EngineKind::kAuto && options.io.direct != io::DirectMode::kOn && host_only &&
      into_callers && page_cache_fraction(catalog) >= kCachedEnough) {
    reader_options.engine = io::EngineKind::kPread;
    reader_options.queue_depth =
        std::clamp(reader_options.queue_depth, 1u, std::max(1u, std::thread::hardware_concurrency()));
  }
  return reader_options;
}

// The Reader for this load, with every catalog file added (ids = catalog file indices).
Result<std::unique_ptr<io::Reader>> open_reader(const formats::Catalog& catalog, const Plan& plan,
                                                const LoadOptions& options) {
  const io::ReaderOptions reader_options = reader_options_for(catalog, plan, options);
  QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<io::Reader> reader, io::make_reader(reader_options, options.log));
  QLOAD_TRY(io::reserve_open_files(catalog.files.size()));
  for (const formats::CatalogFile& file : catalog.files) {
    // Tied to the inode the catalog validated: a file renamed or linked over it since is refused.
    QLOAD_ASSIGN_OR_RETURN(const io::FileId id, reader->open_file(file.path, file.identity));
    QLOAD_TRY(check_catalog_size(file, reader->file(id).size()));
  }
  return reader;
}

// Turns finished "read" tasks into LoadContext::progress calls.
std::function<void(std::string_view, std::uint64_t)> progress_reporter(const LoadContext& context, const Plan& plan) {
  if (!context.progress) return {};
  return [progress = context.progress, total = plan.reads.read_bytes, done = std::uint64_t{0}](
             std::string_view lane, std::uint64_t bytes) mutable {
    if (lane != "read") return;
    done += bytes;
    progress(done, total);
  };
}

// Per arena: the most device scratch one lane needs at a time. Conversions: a GPU converts
// after the copy, so one delivery's stored bytes land in scratch first (16-byte aligned per
// piece). Dequantization: one weight's packed parts, or a
// tensor rank's slices of them (kDecodePartAlignment each).
std::vector<std::uint64_t> device_scratch(const formats::Catalog& catalog, const Plan& plan) {
  std::vector<std::uint64_t> most(plan.layout.arenas.size(), 0);
  std::vector<std::uint64_t> chunk(plan.layout.arenas.size());
  for (const ReadChunk& c : plan.reads.chunks) {
    std::ranges::fill(chunk, 0);
    for (const ChunkPiece& p : c.pieces) {
      const TensorPlacement& placed = plan.layout.tensors[p.tensor];
      if (placed.dtype == catalog.tensors[p.tensor].dtype) continue;
      if (placed.shard_count == 0) chunk[placed.region] += (p.bytes + 15) / 16 * 16;
      for (std::uint32_t k = placed.first_shard; k < placed.first_shard + placed.shard_count; ++k) {
        const ShardPieceSize size = shard_piece_size(catalog.tensors[p.tensor], plan.copies.shards[k], p);
        chunk[plan.copies.shards[k].region] += size.bytes + 16 * size.runs;  // each run 16-byte aligned
      }
    }
    for (std::size_t r = 0; r < most.size(); ++r) most[r] = std::max(most[r], chunk[r]);
  }
  for (const DecodeJob& job : plan.decode.jobs) {
    if (job.kind != DecodeJob::Kind::kDequantize) continue;
    std::uint64_t parts = 0;
    const auto add = [&](std::uint64_t bytes) {
      const std::uint64_t a = kDecodePartAlignment;
      parts = (parts + a - 1) / a * a + bytes;
    };
    if (job.shard_inputs.empty()) {
      for (const std::uint32_t input : job.inputs) add(catalog.tensors[input].nbytes);
    } else {
      for (const DecodeJob::ShardInput& in : job.shard_inputs) add(in.bytes);  // a rank's slices
    }
    std::uint64_t& r = most[job.outputs.front().region];
    r = std::max(r, parts);
  }
  return most;
}

// Whether some weight is decoded into arena `region` (its packed parts, or its quantize or
// repack outputs, then come from pageable host memory).
bool decodes_into(const Plan& plan, std::size_t region) {
  return std::ranges::any_of(plan.decode.jobs, [&](const DecodeJob& job) {
    return std::ranges::any_of(job.outputs, [&](const DecodeOutput& o) { return o.region == region; });
  });
}

// One target per plan arena.
Result<std::vector<std::unique_ptr<ArenaTarget>>> make_targets(const formats::Catalog& catalog, const Plan& plan,
                                                               const LoadOptions& options) {
  const std::vector<std::uint64_t> scratch = device_scratch(catalog, plan);
  std::vector<std::unique_ptr<ArenaTarget>> targets;
  for (std::size_t r = 0; r < plan.layout.arenas.size(); ++r) {
    const ArenaPlan& arena = plan.layout.arenas[r];
    if (arena.device.is_cpu()) {
      QLOAD_ASSIGN_OR_RETURN(auto target, make_host_target(arena));
      targets.push_back(std::move(target));
    } else {
      QLOAD_ASSIGN_OR_RETURN(auto target,
                             make_cuda_target(arena, options.copy_lanes, scratch[r], decodes_into(plan, r)));
      targets.push_back(std::move(target));
    }
  }
  return targets;
}

bool has_gpu(const Plan& plan) {
  return std::ranges::any_of(plan.layout.arenas, [](const ArenaPlan& a) { return a.device.is_cuda(); });
}

// A read load's memory, reader and hand-overs, declared in the order the load sets them up:
// destroyed in reverse, as the load's locals were.
struct ReadLoad {
  const formats::Catalog& catalog;
  const Plan& plan;
  const LoadOptions& options;
  const LoadContext& context;
  std::optional<StagingPool> owned_pool;
  StagingPool* pool = nullptr;
  std::vector<std::unique_ptr<ArenaTarget>> targets;
  std::string unpinned;
  // Declared after the pool and the arenas: destroyed first, so no read outlives its memory.
  std::unique_ptr<io::Reader> reader;
  std::vector<const std::byte*> bases;
  std::vector<TensorOrigin> origins;
  std::vector<DeviceTensor> tensors;
  std::optional<TensorStream> stream;
  std::vector<std::shared_ptr<const void>> owners;
  // Declared after the arenas, so a failed load cancels shared receives before the memory they
  // point into goes.
  std::optional<SharedExchange> exchange;

  // The staging pool, the arenas and the reader.
  Status set_up();
  // The model's tensors, as they will be in the arenas.
  void describe();
  // The stream handing the model's tensors to LoadContext::on_tensor as they complete.
  void start_stream(LoadClock::time_point begin);
  // After the graph (shared reads): every process's sends and receives done, or the load
  // fails; the bytes this process received.
  Result<std::uint64_t> finish_shared(Status read, SharedReadsBarrier& barrier);
  // The loaded model, with its report.
  Model model(const std::vector<std::uint64_t>& digests, const ExecutionStats& stats, LoadClock::time_point begin,
              std::uint64_t received);
};

// The set-up and finishing steps are traced too (lane "load"), so that a trace shows what a
// load spends outside its reads and copies (a GPU's first allocation, pinning the staging pool).
Status ReadLoad::set_up() {
  pool = options.staging_pool;
  if (pool == nullptr) {
    TraceSpan span(context.trace, "load", "staging pool");
    QLOAD_ASSIGN_OR_RETURN(owned_pool, StagingPool::create(sized_staging(options.staging, plan)));
    pool = &*owned_pool;
  }
  if (plan.reads.max_staged_chunk_bytes > pool->slot_bytes())
    return fail(Errc::kInvalidArgument, fmt::format("the plan has {} byte chunks but staging slots of {} bytes",
                                                    plan.reads.max_staged_chunk_bytes, pool->slot_bytes()));
  pool->reset_peak();
  // Arenas first: a missing GPU is reported by name before anything else is set up.
  {
    TraceSpan span(context.trace, "load", "arenas");
    QLOAD_ASSIGN_OR_RETURN(targets, make_targets(catalog, plan, options));
  }
  // Copy engines read staging directly: pin it once (a borrowed pool stays pinned).
  // Where the system refuses (a locked-memory limit, a kernel without pinning rights), the
  // load goes on with synchronous copies and says so in its report.
  if (has_gpu(plan)) {
    TraceSpan span(context.trace, "load", "pin staging");
    if (Status pinned = pool->pin(); !pinned) unpinned = pinned.error().to_string();
  }
  // The scratch arena (packed parts of weights decoded on a GPU) is not pinned: those bytes
  // pass through each GPU lane's bounded pinned bounce buffers (cuda_target.cpp).
  if (!unpinned.empty())
    for (const auto& t : targets) t->copy_synchronously();
  TraceSpan span(context.trace, "load", "open files");
  QLOAD_ASSIGN_OR_RETURN(reader, open_reader(catalog, plan, options));
  if (plan.reads.max_staged_chunk_bytes > 0) QLOAD_TRY(pool->register_with(*reader));
  return {};
}

void ReadLoad::describe() {
  for (const auto& t : targets) bases.push_back(t->base());
  tensors = describe_tensors(catalog, plan, bases, /*writable=*/true, &origins);
}

void ReadLoad::start_stream(LoadClock::time_point begin) {
  for (const DeviceTensor& t : tensors) {
    const auto at = reinterpret_cast<std::uintptr_t>(t.data);
    const auto holds = [&](std::size_t r) {
      const auto base = reinterpret_cast<std::uintptr_t>(bases[r]);
      return t.data != nullptr && t.host == targets[r]->on_host() && at >= base &&
             at - base < plan.layout.arenas[r].bytes;
    };
    std::shared_ptr<const void> owner;
    for (std::size_t r = 0; r < targets.size() && !owner; ++r)
      if (holds(r)) owner = targets[r]->owner();
    owners.push_back(std::move(owner));
  }
  std::uint64_t total = 0;
  for (const DeviceTensor& t : tensors) total += t.nbytes;
  stream.emplace(TensorStream{.tensors = tensors,
                              .origins = origins,
                              .owners = owners,
                              .callback = context.on_tensor,
                              .begin = begin,
                              .total_bytes = total});
}

Result<std::uint64_t> ReadLoad::finish_shared(Status read, SharedReadsBarrier& barrier) {
  // Every process has read and issued its sends, or some failed and nothing more is sent.
  Status exchanged = exchange->status();
  Status passed = barrier.pass(read.has_value() && exchanged.has_value());
  QLOAD_TRY(read);
  // A rank gone or late is the cause of this rank's failed sends, if any: name it first.
  if (!passed && passed.error().code() != Errc::kCancelled) return fail(std::move(passed).error());
  QLOAD_TRY(exchanged);
  QLOAD_TRY(passed);
  Result<std::uint64_t> finished = exchange->finish(targets);
  // A process whose copies did not all arrive fails every process.
  Result<bool> everyone = barrier.communicator().all_ok(finished.has_value());
  QLOAD_TRY(finished);
  if (!everyone) return fail(std::move(everyone.error()).with_note("stage: after the shared tensors moved"));
  if (!*everyone) return fail(Errc::kCancelled, "another process failed while shared tensors moved");
  return *finished;
}

Model ReadLoad::model(const std::vector<std::uint64_t>& digests, const ExecutionStats& stats,
                      LoadClock::time_point begin, std::uint64_t received) {
  TraceSpan span(context.trace, "load", "hand over");
  Model::Parts parts;
  parts.tensors = std::move(tensors);
  parts.quantized = describe_quantized(catalog, plan, parts.tensors);
  for (std::size_t r = 0; r < targets.size(); ++r)
    if (!plan.layout.arenas[r].scratch) targets[r]->release_into(parts.arenas, parts.device_arenas);
  LoadReport& report = parts.report;
  report.engine = std::string(reader->engine());
  report.io = reader->stats();
  report.staging_budget_bytes = pool->capacity_bytes();
  report.peak_staging_bytes = pool->peak_leased_bytes();
  report.unpinned_reason = std::move(unpinned);
  fill_report(report, catalog, plan, options.computes_digests() ? digests : std::vector<std::uint64_t>{}, stats, begin);
  report.shared_received_bytes = received;
  if (stream) {
    report.first_tensor_seconds = stream->first_seconds;
    report.tenths_seconds = stream->tenths_seconds;
  }
  if (plan.copies.shared_reads == SharedReads::kBroadcast)  // GPU copies: arrive after this, or the load fails
    for (const TensorPlacement& p : plan.layout.tensors)
      for (std::uint32_t k = p.first_shard; p.received && k < p.first_shard + p.shard_count; ++k)
        if (!targets[plan.copies.shards[k].region]->on_host())
          report.shared_received_bytes += plan.copies.shards[k].bytes;
  return Model(std::move(parts));
}

}  // namespace

Result<Model> load_read(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const LoadContext& context, const ExpectedDigests& expected, LoadClock::time_point begin,
                        SharedReadsBarrier* barrier) {
  if (plan.layout.arenas.empty()) return fail(Errc::kInvalidArgument, "a read plan needs at least one arena");
  QLOAD_TRY(check_host_memory(plan, options.plan));
  ReadLoad load{.catalog = catalog, .plan = plan, .options = options, .context = context};
  QLOAD_TRY(load.set_up());

  // The model's tensors are known now (the arenas exist): streaming hands them over as they
  // complete. Tensors of other processes arrive after the graph: those loads hand over at the end.
  load.describe();
  if (context.on_tensor && barrier == nullptr) load.start_stream(begin);

  // Shared reads: receives posted before anything is read.
  if (barrier != nullptr) {  // (a failure here passes the barrier in load(), so no one waits)
    QLOAD_ASSIGN_OR_RETURN(SharedExchange started, SharedExchange::start(plan, load.targets, barrier->communicator()));
    load.exchange.emplace(std::move(started));
  }

  ReadLoadState state{
      .catalog = catalog, .plan = plan, .pool = *load.pool, .targets = load.targets, .expected = expected};
  const std::uint32_t workers = cpu_workers(options);
  std::optional<TraceSpan> building(std::in_place, context.trace, "load", "build graph");
  QLOAD_ASSIGN_OR_RETURN(TaskGraph graph, build_read_graph(state,
                                                           {.reads_in_flight = options.reads_in_flight,
                                                            .cpu_workers = workers,
                                                            .copy_lanes = options.copy_lanes,
                                                            .compute_digests = options.computes_digests()},
                                                           load.stream ? &*load.stream : nullptr,
                                                           load.exchange ? &*load.exchange : nullptr));
  // h2d tasks wait for their copies on a thread of their own: no CPU worker sits idle behind
  // one; nor behind the tensor callback.
  building.reset();
  std::size_t threads = workers + (load.stream ? 1 : 0);
  for (const auto& t : load.targets) threads += t->on_host() ? 0 : options.copy_lanes;
  Result<ExecutionStats> stats = execute(graph, load.reader.get(),
                                         {.cpu_threads = threads,
                                          .trace = context.trace,
                                          .on_task_done = progress_reporter(context, plan),
                                          .stop = context.stop});
  Status read = stats ? Status{} : Status(fail(stats.error()));
  {
    TraceSpan span(context.trace, "load", "check files unchanged");
    for (io::FileId id = 0; id < load.reader->file_count() && read; ++id)
      read = load.reader->file(id).check_unchanged();
  }
  std::uint64_t received = 0;
  if (barrier != nullptr) {
    QLOAD_ASSIGN_OR_RETURN(received, load.finish_shared(read, *barrier));
  }
  QLOAD_TRY(read);
  return load.model(state.digests, *stats, begin, received);
}

}  // namespace qload::scheduler::detail
