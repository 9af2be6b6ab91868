// Mmap mode: tensors point into private (copy-on-write) mappings of the validated tensor bytes;
// verification (when on) hashes them through the executor's CPU workers.
#include <fmt/format.h>

#include "load/load_internal.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/input_file.hpp"
#include "qload/runtime/mapping_fault_guard.hpp"
#include "qload/scheduler/executor.hpp"

namespace qload::scheduler::detail {
namespace {

std::uint64_t file_offset_of(const Plan& plan, const TensorPlacement& p) {
  return p.region == kNoRegion ? 0 : plan.layout.mappings[p.region].offset + p.offset;
}

// XXH3-64 of tensor t's mapped bytes; a file truncated under the mapping is an error naming it
// (a SIGBUS otherwise).
Status hash_mapped(const formats::Catalog& catalog, std::uint32_t t, const std::byte* data, std::uint64_t file_offset,
                   std::uint64_t& digest) {
  const formats::TensorEntry& entry = catalog.tensors[t];
  struct Hash {
    std::span<const std::byte> bytes;
    std::uint64_t digest;
  } hash{{data, static_cast<std::size_t>(entry.nbytes)}, 0};
  QLOAD_TRY(guarded_mapped_read(
      hash.bytes, catalog.files[entry.file].path, file_offset,
      [](void* context) {
        auto* h = static_cast<Hash*>(context);
        h->digest = io::xxh3_64(h->bytes);
      },
      &hash));
  digest = hash.digest;
  return {};
}

// One verify task per tensor, in file order (the mappings were asked to read ahead).
TaskGraph build_verify_graph(const formats::Catalog& catalog, const Plan& plan,
                             const std::vector<const std::byte*>& regions, const ExpectedDigests& expected,
                             std::uint32_t workers, std::vector<std::uint64_t>& digests) {
  TaskGraph g;
  const ResourceId cpu = g.add_resource("cpu workers", workers);
  for (std::uint32_t t = 0; t < catalog.tensors.size(); ++t) {
    const TensorPlacement& p = plan.layout.tensors[t];
    if (p.partial) continue;  // a region's view: only its own pages are read, none hashed
    const formats::TensorEntry& entry = catalog.tensors[t];
    const std::byte* data = p.region == kNoRegion ? nullptr : regions[p.region] + p.offset;
    g.add({.lane = "verify",
           .name = entry.name,
           .priority = t,  // catalog order is file order
           .bytes = entry.nbytes,
           .work = CpuWork{[&catalog, &expected, &digests, t, data, file_offset = file_offset_of(plan, p)]() -> Status {
             QLOAD_TRY(hash_mapped(catalog, t, data, file_offset, digests[t]));
             return check_digest(catalog, t, digests[t], expected[t]);
           }},
           .claims = {{cpu, 1}}});
  }
  return g;
}

}  // namespace

Result<Model> load_mmap(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const LoadContext& context, const ExpectedDigests& expected, LoadClock::time_point begin) {
  std::vector<io::InputFile> files;
  QLOAD_TRY(io::reserve_open_files(catalog.files.size()));
  for (const formats::CatalogFile& f : catalog.files) {
    // Tied to the inode the catalog validated: a file renamed or linked over it since is refused.
    QLOAD_ASSIGN_OR_RETURN(io::InputFile file, io::InputFile::open(f.path, io::DirectMode::kOff, f.identity));
    // A mapping past the end of the file would fault (SIGBUS) on access: check first.
    QLOAD_TRY(check_catalog_size(f, file.size()));
    files.push_back(std::move(file));
  }
  Model::Parts parts;
  parts.mappings = std::make_shared<std::vector<MappedRegion>>();
  std::vector<const std::byte*> regions;
  for (const MappingPlan& m : plan.layout.mappings) {
    QLOAD_ASSIGN_OR_RETURN(MappedRegion region,
                           MappedRegion::map(files[m.file].fd(), m.offset, m.bytes, files[m.file].path()));
    // Read ahead for hashing, unless regions are mapped: their other pages are not to be read.
    if (options.computes_digests() && plan.copies.shards.empty()) region.will_need();
    regions.push_back(region.data());
    parts.mappings->push_back(std::move(region));
  }
  std::vector<std::uint64_t> digests(catalog.tensors.size());
  TaskGraph graph;
  if (options.computes_digests())
    graph = build_verify_graph(catalog, plan, regions, expected, cpu_workers(options), digests);
  QLOAD_ASSIGN_OR_RETURN(
      const ExecutionStats stats,
      execute(graph, nullptr, {.cpu_threads = cpu_workers(options), .trace = context.trace, .stop = context.stop}));
  for (const io::InputFile& file : files) QLOAD_TRY(file.check_unchanged());

  parts.tensors = describe_tensors(catalog, plan, regions, /*writable=*/false);
  parts.quantized = describe_quantized(catalog, plan, parts.tensors);
  parts.report.engine = "mmap";
  fill_report(parts.report, catalog, plan, options.computes_digests() ? digests : std::vector<std::uint64_t>{}, stats,
              begin);
  return Model(std::move(parts));
}

}  // namespace qload::scheduler::detail
