// Read mode: staging pool -> DAG (read, verify, place) -> one host arena.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "load_internal.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/scheduler/executor.hpp"
#include "read_graph.hpp"

namespace qload::scheduler::detail {
namespace {

constexpr std::uint64_t kHugePage = std::uint64_t{2} << 20;

// The pool this load needs within the budget: no more slots than staged chunks, and slots no
// larger than the largest staged chunk (a small checkpoint does not map 256 MiB).
StagingOptions sized_staging(const StagingOptions& budget, const Plan& plan) {
  std::uint64_t staged = 0;
  for (const ReadChunk& c : plan.chunks) staged += c.direct ? 0 : 1;
  const std::uint64_t largest = (std::max<std::uint64_t>(plan.max_staged_chunk_bytes, 1) + 4095) / 4096 * 4096;
  StagingOptions out;
  out.slot_bytes = std::min(budget.slot_bytes, largest);
  const std::uint64_t slots = std::clamp<std::uint64_t>(staged, 1, budget.total_bytes / out.slot_bytes);
  out.total_bytes = slots * out.slot_bytes;
  return out;
}

// The Reader for this load, with every catalog file added (ids = catalog file indices).
Result<std::unique_ptr<io::Reader>> open_reader(const formats::Catalog& catalog, const LoadOptions& options) {
  io::ReaderOptions reader_options = options.io;
  // The executor never hands over more reads than its budget: a deeper queue would only
  // create idle pread threads or SQEs.
  reader_options.queue_depth = std::min(reader_options.queue_depth, options.reads_in_flight);
  QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<io::Reader> reader, io::make_reader(reader_options, options.log));
  for (const formats::CatalogFile& file : catalog.files) {
    QLOAD_ASSIGN_OR_RETURN(const io::FileId id, reader->open_file(file.path));
    QLOAD_TRY(check_catalog_size(file, reader->file(id).size()));
  }
  return reader;
}

// Turns finished "read" tasks into LoadOptions::progress calls.
std::function<void(std::string_view, std::uint64_t)> progress_reporter(const LoadOptions& options, const Plan& plan) {
  if (!options.progress) return {};
  return [progress = options.progress, total = plan.read_bytes, done = std::uint64_t{0}](std::string_view lane,
                                                                                         std::uint64_t bytes) mutable {
    if (lane != "read") return;
    done += bytes;
    progress(done, total);
  };
}

}  // namespace

Result<Model> load_read(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const ExpectedDigests& expected, LoadClock::time_point begin) {
  if (plan.arenas.size() != 1) return fail(Errc::kInvalidArgument, "a read plan needs exactly one (cpu) arena");
  std::optional<StagingPool> owned_pool;
  StagingPool* pool = options.staging_pool;
  if (pool == nullptr) {
    QLOAD_ASSIGN_OR_RETURN(owned_pool, StagingPool::create(sized_staging(options.staging, plan)));
    pool = &*owned_pool;
  }
  if (plan.max_staged_chunk_bytes > pool->slot_bytes())
    return fail(Errc::kInvalidArgument, fmt::format("the plan has {} byte chunks but staging slots of {} bytes",
                                                    plan.max_staged_chunk_bytes, pool->slot_bytes()));
  pool->reset_peak();
  const ArenaPlan& arena_plan = plan.arenas.front();
  QLOAD_ASSIGN_OR_RETURN(HostBuffer arena, HostBuffer::allocate(static_cast<std::size_t>(arena_plan.bytes),
                                                                std::max(arena_plan.alignment, kHugePage)));
  // Declared after the pool and the arena: destroyed first, so no read outlives its memory.
  QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<io::Reader> reader, open_reader(catalog, options));
  if (plan.max_staged_chunk_bytes > 0) QLOAD_TRY(pool->register_with(*reader));

  ReadLoadState state{.catalog = catalog, .plan = plan, .pool = *pool, .arena = arena.data(), .expected = expected};
  const std::uint32_t workers = cpu_workers(options);
  QLOAD_ASSIGN_OR_RETURN(TaskGraph graph, build_read_graph(state, {.reads_in_flight = options.reads_in_flight,
                                                                   .cpu_workers = workers,
                                                                   .compute_digests = options.compute_digests}));
  QLOAD_ASSIGN_OR_RETURN(
      const ExecutionStats stats,
      execute(graph, reader.get(),
              {.cpu_threads = workers, .trace = options.trace, .on_task_done = progress_reporter(options, plan)}));
  for (io::FileId id = 0; id < reader->file_count(); ++id) QLOAD_TRY(reader->file(id).check_unchanged());

  Model::Parts parts;
  parts.tensors = describe_tensors(catalog, plan, {arena.data()}, /*writable=*/true);
  parts.arenas.push_back(std::move(arena));
  LoadReport& report = parts.report;
  report.engine = std::string(reader->engine());
  report.io = reader->stats();
  report.staging_budget_bytes = pool->capacity_bytes();
  report.peak_staging_bytes = pool->peak_leased_bytes();
  fill_report(report, catalog, plan, options.compute_digests ? state.digests : std::vector<std::uint64_t>{}, stats,
              begin);
  return Model(std::move(parts));
}

}  // namespace qload::scheduler::detail
