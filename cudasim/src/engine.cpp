// A simulated stream's engine thread (sim_state.hpp).
#include <chrono>

#include "sim_state.hpp"

namespace qload::cudasim {

Engine::Engine(int device, std::uint64_t seed, unsigned max_delay_us)
    : device_(device), rng_(seed), max_delay_us_(max_delay_us), thread_([this] { loop(); }) {}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t Engine::enqueue(Operation op) {
  std::lock_guard lock(mutex_);
  queue_.push_back(std::move(op));
  changed_.notify_all();
  return ++enqueued_;
}

void Engine::wait_for(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return completed_ >= ticket; });
}

std::uint64_t Engine::completed() const {
  std::lock_guard lock(mutex_);
  return completed_;
}

std::uint64_t Engine::enqueued() const {
  std::lock_guard lock(mutex_);
  return enqueued_;
}

void Engine::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Pending work runs even when the stream is being destroyed (as cudaStreamDestroy's).
    changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;
    Operation op = std::move(queue_.front());
    queue_.pop_front();
    const unsigned delay = max_delay_us_ == 0 ? 0 : static_cast<unsigned>(rng_() % (max_delay_us_ + 1));
    lock.unlock();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    op.run();
    lock.lock();
    ++completed_;
    changed_.notify_all();
  }
}

}  // namespace qload::cudasim
