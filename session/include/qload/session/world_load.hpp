// `qload load` as one process of a multi-process load (docs/parallel.md): the processes meet
// over TCP (runtime/rendezvous.hpp), check that they all planned the same load before reading
// anything, and exchange their outcomes afterwards, so that a load fails on every rank if it
// fails on one.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "qload/distributed/rendezvous.hpp"
#include "qload/session/request.hpp"

namespace qload::session {

// What every rank must agree on, each part a short text: the checkpoint (files, tensor table),
// the layout, and the load's options (recipe hash, dtype and quantization flags).
struct LoadFingerprint {
  std::string checkpoint;
  std::string layout;
  std::string options;
};
LoadFingerprint load_fingerprint(const PlannedLoad& load);

// Tells every rank this one's fingerprint, or why it could not prepare its load (`load`'s
// error), and checks theirs. kCancelled naming the first rank that could not prepare;
// kInvalidArgument naming the first rank whose fingerprint differs from rank 0's, and the parts
// that differ. When `load` holds an error, returns success once the others know it (the
// caller reports its own error).
Status agree_on_load(distributed::Rendezvous& rendezvous, const Result<PlannedLoad>& load);

// Shared reads of a checkpoint every rank's page cache already holds (scheduler::kCachedEnough)
// save no storage read and cost the transfers: with share_cached auto, each process then reads
// its own part from the page cache instead. Every rank tells the others its fraction (or that
// it shares anyway: share_cached always, a lock) and all decide alike from the same numbers;
// when they unshare, `load` is planned again without shared reads. Called by every rank of a
// shared-read load, after agree_on_load.
Status unshare_cached_reads(distributed::Rendezvous& rendezvous, PlannedLoad& load, const Logger& log);

// One rank's outcome as the others learn it.
struct RankOutcome {
  bool ok = false;
  std::string error;                 // when !ok: the rank's error, as it printed it
  std::uint32_t node = 0;            // its node, named by the node's first rank (RANK - LOCAL_RANK)
  std::uint64_t read_bytes = 0;      // bytes it read from storage (tensors, gaps, alignment)
  std::uint64_t tensor_bytes = 0;    // of them, stored tensor bytes
  std::uint64_t received_bytes = 0;  // bytes of its copies that other ranks read (shared reads)
  double seconds = 0;
};

// Tells every rank how this one ended and learns how they did, waiting for the slowest rank's
// load up to `straggler_timeout` (zero: no limit): their outcomes by rank, or kCancelled naming
// the first rank that failed (when this one did not), or the rank that is gone or late.
Result<std::vector<RankOutcome>> share_outcome(distributed::Rendezvous& rendezvous, const RankOutcome& mine,
                                               std::chrono::milliseconds straggler_timeout);

}  // namespace qload::session
