#include "qload/runtime/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>

namespace qload {

ThreadPool::ThreadPool(std::size_t threads, std::string name) {
  threads = std::max<std::size_t>(threads, 1);
  workers_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { run(); });
    // Linux limits thread names to 15 characters: shorten the name, keep the index.
    const std::string suffix = "/" + std::to_string(i);
    const std::string label = name.substr(0, 15 - std::min<std::size_t>(suffix.size(), 15)) + suffix;
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
    job();
  }
}

}  // namespace qload
