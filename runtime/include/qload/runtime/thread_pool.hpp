// A small fixed-size pool of worker threads running queued jobs in FIFO order.
//
// Thread-safety: submit() may be called from any thread, including from a job. The destructor
// finishes the jobs already queued, then joins every worker, so nothing outlives the pool.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace qload {

class ThreadPool {
 public:
  // `threads` workers (at least one), named "<name>/<i>" for debuggers and traces.
  explicit ThreadPool(std::size_t threads, std::string name = "qload");
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  // Queues `job`. A job must not throw (qload code reports errors as values); one that does
  // terminates the process, as an unhandled exception on any thread would.
  void submit(std::function<void()> job);
  std::size_t size() const noexcept { return workers_.size(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::jthread> workers_;
};

}  // namespace qload
