#include "qload/session/pull_stream.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace qload::session {

PullStream::PullStream(Loader loader, std::size_t max_queued) : max_queued_(std::max<std::size_t>(max_queued, 1)) {
  worker_ = std::thread([this, loader = std::move(loader)] { run(loader); });
}

PullStream::~PullStream() {
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  stop_.request_stop();  // a load still planning or reading ends without handing over a tensor
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void PullStream::run(const Loader& loader) {
  LoadHooks hooks;
  hooks.stop = stop_.get_token();
  hooks.on_tensor = [this](std::uint32_t index, const scheduler::DeviceTensor& t,
                           const std::shared_ptr<const void>& keep_alive) -> Status {
    if (!t.host && !keep_alive)  // GPU memory cannot be copied out here: it must be qload's own arena
      return fail(Error(Errc::kUnsupported, "a pulled stream hands over GPU memory only from qload's own arenas")
                      .with_tensor(t.name));
    auto out = std::make_unique<StreamedTensor>();
    out->index = index;
    out->view = t;
    if (keep_alive) {
      out->arena = keep_alive;
    } else {
      out->bytes = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(t.nbytes));
      if (t.nbytes > 0) std::memcpy(out->bytes.get(), t.data, static_cast<std::size_t>(t.nbytes));
      out->view.data = out->bytes.get();
      out->view.writable = true;
    }
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.size() < max_queued_ || cancelled_; });
    if (cancelled_) return fail(Errc::kCancelled, "the stream was closed before the load finished");
    queue_.push_back(std::move(out));
    changed_.notify_all();
    return {};
  };
  Result<LoadOutcome> outcome = loader(hooks);
  std::lock_guard lock(mutex_);
  if (!outcome && !cancelled_) error_ = outcome.error();
  if (outcome) report_ = outcome->model.report();
  done_ = true;
  changed_.notify_all();
}

Result<StreamItem> PullStream::take(std::unique_lock<std::mutex>& lock) {
  if (!queue_.empty()) {
    std::unique_ptr<StreamedTensor> t = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();  // room for the loader
    return StreamItem(std::move(t));
  }
  if (!done_) return StreamItem(StreamPending{});
  if (error_) return fail(*error_);
  return StreamItem(StreamEnd{});
}

Result<StreamItem> PullStream::next() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || done_; });
  return take(lock);
}

Result<StreamItem> PullStream::next_for(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, wait, [&] { return !queue_.empty() || done_; });
  return take(lock);
}

std::optional<scheduler::LoadReport> PullStream::report() const {
  std::lock_guard lock(mutex_);
  if (!done_ || !queue_.empty()) return std::nullopt;
  return report_;
}

}  // namespace qload::session
