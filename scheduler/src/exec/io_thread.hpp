// The I/O thread: the only thread touching the Reader while a graph runs. It submits the
// reads the executor hands it, in batches, and reports each completion to the queue.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "exec/completion_queue.hpp"
#include "qload/io/reader.hpp"

namespace qload::scheduler::detail {

class IoThread {
 public:
  IoThread(io::Reader& reader, CompletionQueue& done);
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;
  // Finishes every read handed over (so none writes into a buffer afterwards), then joins.
  ~IoThread();

  // Hands a read over; its tag must be the task id. Thread-safe.
  void submit(const io::ReadRequest& request);

 private:
  void run();
  void submit_batch(std::vector<io::ReadRequest>& batch);
  void fail_all(const Error& error);
  // Reads are in the Reader and it can still report them.
  bool reading() const noexcept { return !broken_ && reader_.pending() > 0; }

  io::Reader& reader_;
  CompletionQueue& done_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<io::ReadRequest> inbox_;
  bool stopping_ = false;
  std::vector<TaskId> in_reader_;  // tags submitted and not completed (for engine failures)
  std::optional<Error> broken_;    // the Reader's own failure: no further reads are issued
  std::jthread thread_;            // last: started once everything above exists
};

}  // namespace qload::scheduler::detail
