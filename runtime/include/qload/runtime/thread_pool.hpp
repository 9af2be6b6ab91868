// A small fixed-size pool of worker threads running queued jobs in FIFO order.
//
// Thread-safety: submit() may be called from any thread, including from a job. The destructor
// finishes the jobs already queued, then joins every worker, so nothing outlives the pool.
//
// Exceptions: qload code reports errors as values, but a job may still throw (std::bad_alloc,
// std::length_error from a container sized by a file). An exception leaving a thread would
// terminate the process that embeds qload, so the worker catches it and hands it to
// `on_exception` (by default a line on stderr), then goes on with the next job. A caller that
// waits for its jobs to report must catch inside the job (as the executor does: the exception
// becomes the task's error); this is the backstop.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace qload {

class ThreadPool {
 public:
  using ExceptionHandler = std::function<void(std::exception_ptr)>;
  // `threads` workers (at least one), named "<name>/<i>" for debuggers and traces.
  explicit ThreadPool(std::size_t threads, std::string name = "qload", ExceptionHandler on_exception = {});
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  // Queues `job`. A job that throws is reported to the pool's exception handler (see above).
  void submit(std::function<void()> job);
  std::size_t size() const noexcept { return workers_.size(); }

 private:
  void run();
  void report(const std::exception_ptr& exception) noexcept;

  ExceptionHandler on_exception_;
  std::string name_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::jthread> workers_;
};

}  // namespace qload
