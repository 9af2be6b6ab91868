// The two load modes behind load(), and what they share.
#pragma once

#include <chrono>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/scheduler/load.hpp"
#include "tensor_digests.hpp"

namespace qload::scheduler::detail {

using LoadClock = std::chrono::steady_clock;

// Read mode: staging pool -> DAG (read, verify, place) -> host arena.
Result<Model> load_read(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const ExpectedDigests& expected, LoadClock::time_point begin);
// Mmap mode: read-only mappings; verify tasks only.
Result<Model> load_mmap(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const ExpectedDigests& expected, LoadClock::time_point begin);

// One DeviceTensor per catalog tensor; `regions[p.region]` is the base its placement is
// relative to (kNoRegion: no bytes, null data).
std::vector<DeviceTensor> describe_tensors(const formats::Catalog& catalog, const Plan& plan,
                                           const std::vector<const std::byte*>& regions, bool writable);

// Fills the report fields every mode shares (counts, timing, digests, stage stats).
// The kept quantized weights of plan.quant, their parts located in `tensors`.
std::vector<QuantizedWeight> describe_quantized(const formats::Catalog& catalog, const Plan& plan,
                                                const std::vector<DeviceTensor>& tensors);

void fill_report(LoadReport& report, const formats::Catalog& catalog, const Plan& plan,
                 const std::vector<std::uint64_t>& digests, const ExecutionStats& stats, LoadClock::time_point begin);

// kFileChanged if `size_now` differs from the size the catalog validated.
Status check_catalog_size(const formats::CatalogFile& file, std::uint64_t size_now);

// Shared reads: sends every tensor from its reader to the other processes (every process calls
// it, in catalog order), filling this process's copies of the tensors it did not read.
Status broadcast_shared(Model& model, const Plan& plan, Communicator& communicator);

// Whether the load computes tensor `i`'s digest: not for a tensor another process holds, nor
// for one this process reads only in part.
bool digest_computed(const Plan& plan, std::uint32_t i);

std::uint32_t cpu_workers(const LoadOptions& options);

}  // namespace qload::scheduler::detail
