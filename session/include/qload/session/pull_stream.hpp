// A load its consumer pulls tensor by tensor: Python's qload.stream and C's qload_stream_next.
//
// The load runs on a thread of its own and hands over each tensor as soon as it is complete,
// through a bounded queue (at most `max_queued` tensors wait for the consumer, so a slow
// consumer slows the load instead of piling up memory). The consumer takes them in completion
// order; after the last one it gets the end, or the load's error. Dropping the stream cancels a
// load still running (everything it holds is released) and joins its thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <variant>

#include "qload/runtime/error.hpp"
#include "qload/scheduler/model.hpp"
#include "qload/session/load.hpp"

namespace qload::session {

// One tensor handed over: its description and bytes (host memory, or a GPU arena of qload's),
// kept alive by itself.
struct StreamedTensor {
  std::uint32_t index = 0;             // its index in the model the load builds
  scheduler::DeviceTensor view;        // shape, strides, dtype; data in the arena or in `bytes`
  std::shared_ptr<const void> arena;   // zero-copy: keeps view.data alive (a mapping, an arena)
  std::unique_ptr<std::byte[]> bytes;  // else a copy (the arena is reused as the load goes on)
};

// What next() gives: a tensor, the end (every tensor was handed over and the load succeeded),
// or nothing yet (next_for's time ran out).
struct StreamEnd {};
struct StreamPending {};
using StreamItem = std::variant<std::unique_ptr<StreamedTensor>, StreamEnd, StreamPending>;

class PullStream {
 public:
  // Runs one load with the hooks the stream gives it (session::load of a spec or of a built
  // request); it must not throw.
  using Loader = std::function<Result<LoadOutcome>(const LoadHooks&)>;

  // Starts `loader` on the stream's thread. A tensor on a GPU is handed over in qload's own
  // arena (zero-copy, its copies complete); one in the caller's GPU memory fails the load
  // (kUnsupported: the caller has it already).
  explicit PullStream(Loader loader, std::size_t max_queued = 4);
  ~PullStream();
  PullStream(const PullStream&) = delete;
  PullStream& operator=(const PullStream&) = delete;

  // The next tensor, or the end, waiting as long as it takes; the load's error once the tensors
  // it handed over before failing have been taken.
  Result<StreamItem> next();
  // The same, waiting at most `wait` (StreamPending when nothing came): a consumer that must
  // look at something else meanwhile (Python checks for Ctrl-C).
  Result<StreamItem> next_for(std::chrono::milliseconds wait);

  // The load's report once it has succeeded and every tensor was taken; nullopt before, or
  // when it failed.
  std::optional<scheduler::LoadReport> report() const;

 private:
  void run(const Loader& loader);
  Result<StreamItem> take(std::unique_lock<std::mutex>& lock);

  std::size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<StreamedTensor>> queue_;
  std::optional<scheduler::LoadReport> report_;  // once the load has succeeded
  std::optional<Error> error_;
  bool done_ = false;
  bool cancelled_ = false;
  std::stop_source stop_;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace qload::session
