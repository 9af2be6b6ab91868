#include "qload/runtime/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>

#include "qload/runtime/exception_error.hpp"
#include "qload/runtime/log.hpp"

namespace qload {

ThreadPool::ThreadPool(std::size_t threads, std::string name, ExceptionHandler on_exception)
    : on_exception_(std::move(on_exception)), name_(std::move(name)) {
  threads = std::max<std::size_t>(threads, 1);
  workers_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { run(); });
    // Linux limits thread names to 15 characters: shorten the name, keep the index.
    const std::string suffix = "/" + std::to_string(i);
    const std::string label = name_.substr(0, 15 - std::min<std::size_t>(suffix.size(), 15)) + suffix;
    pthread_setname_np(workers_.back().native_handle(), label.c_str());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  workers_.clear();  // jthread joins
}

void ThreadPool::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void ThreadPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    // One try block per job: free when nothing throws.
    try {
      job();
    } catch (...) {
      report(std::current_exception());
    }
  }
}

void ThreadPool::report(const std::exception_ptr& exception) noexcept {
  try {
    if (on_exception_) return on_exception_(exception);
    Logger::to_stderr(LogLevel::kError)
        .log(LogLevel::kError, error_from_exception(exception, "a job of thread pool '" + name_ + "'").to_string());
  } catch (...) {  // the handler threw, or no memory to say so: nothing more can be done here
  }
}

}  // namespace qload
