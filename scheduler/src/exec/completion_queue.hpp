// The one queue every finished task reports to: the I/O thread and the CPU workers push, the
// executor loop waits and takes everything at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/scheduler/task_graph.hpp"

namespace qload::scheduler::detail {

using Clock = std::chrono::steady_clock;

struct Completion {
  TaskId task = 0;
  Status status;
  Clock::time_point start{};  // when the work itself began (unset: the executor's start time)
  Clock::time_point end{};
};

class CompletionQueue {
 public:
  void push(Completion c) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(c));
    }
    ready_.notify_one();
  }
  // Blocks until at least one completion is queued, or wake() was called, then takes them all
  // (none after a wake alone).
  std::vector<Completion> take_all() {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !items_.empty() || woken_; });
    woken_ = false;
    std::vector<Completion> out;
    out.swap(items_);
    return out;
  }
  // Makes the waiting take_all() return (a stop request the loop must look at). Any thread.
  void wake() {
    {
      std::lock_guard lock(mutex_);
      woken_ = true;
    }
    ready_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Completion> items_;
  bool woken_ = false;
};

}  // namespace qload::scheduler::detail
