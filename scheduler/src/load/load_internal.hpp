// The two load modes behind load(), and what they share.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "exec/arena_target.hpp"
#include "load/tensor_digests.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/scheduler/load.hpp"

namespace qload::scheduler::detail {

using LoadClock = std::chrono::steady_clock;

// The barrier of a shared-read load (ParallelLayout::share_reads): every process passes it
// exactly once, once it has read all it reads or has failed, carrying which; tensors move
// between processes only when every process passed it with success.
class SharedReadsBarrier {
 public:
  explicit SharedReadsBarrier(distributed::Communicator& communicator) : communicator_(communicator) {}
  // kCancelled when another process failed; the rendezvous's error when it broke.
  Status pass(bool ok);
  bool passed() const noexcept { return passed_; }
  distributed::Communicator& communicator() const noexcept { return communicator_; }

 private:
  distributed::Communicator& communicator_;
  bool passed_ = false;
};

// Read mode: staging pool -> DAG (read, verify, place) -> host arena. `barrier` (shared reads
// only) is passed once the reads are done; the shared copies in flight are then waited for.
Result<Model> load_read(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const LoadContext& context, const ExpectedDigests& expected, LoadClock::time_point begin,
                        SharedReadsBarrier* barrier);
// Mmap mode: copy-on-write mappings of the files; verify tasks only.
Result<Model> load_mmap(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                        const LoadContext& context, const ExpectedDigests& expected, LoadClock::time_point begin);

// Where a tensor of the model comes from: a catalog tensor (or, under a parallel layout, one
// copy of it) or an output of a decode job.
struct TensorOrigin {
  bool decoded = false;
  std::uint32_t index = 0;  // into catalog.tensors, or plan.decode.jobs when decoded
};

// The model's tensors: one DeviceTensor per catalog tensor (per copy), then the decode
// outputs; `regions[p.region]` is the base its placement is relative to (kNoRegion: no
// bytes, null data). `origins`, when given, gets each one's origin.
std::vector<DeviceTensor> describe_tensors(const formats::Catalog& catalog, const Plan& plan,
                                           const std::vector<const std::byte*>& regions, bool writable,
                                           std::vector<TensorOrigin>* origins = nullptr);

// LoadContext::on_tensor for every tensor of `model`, in order: how tensors are handed over
// when they cannot be streamed as they complete (mmap mode, shared reads).
Status hand_over_all(const Model& model, const LoadContext& context);

// Fills the report fields every mode shares (counts, timing, digests, stage stats).
// The kept quantized weights of plan.decode.quant, their parts located in `tensors`.
std::vector<QuantizedWeight> describe_quantized(const formats::Catalog& catalog, const Plan& plan,
                                                const std::vector<DeviceTensor>& tensors);

void fill_report(LoadReport& report, const formats::Catalog& catalog, const Plan& plan,
                 const std::vector<std::uint64_t>& digests, const ExecutionStats& stats, LoadClock::time_point begin);

// kFileChanged if `size_now` differs from the size the catalog validated.
Status check_catalog_size(const formats::CatalogFile& file, std::uint64_t size_now);

// Shared reads, SharedReads::kBroadcast: the copies on GPUs, from each tensor's reader to the
// other processes through NCCL (every process calls it, after the load). Host copies moved
// during the load (shared_exchange.hpp).
Status broadcast_gpu_copies(Model& model, const Plan& plan, distributed::Communicator& communicator);

// Whether the load computes tensor `i`'s digest: not for a tensor another process holds, nor
// for one this process reads only in part.
bool digest_computed(const Plan& plan, std::uint32_t i);

std::uint32_t cpu_workers(const LoadOptions& options);

}  // namespace qload::scheduler::detail
