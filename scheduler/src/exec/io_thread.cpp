#include "exec/io_thread.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>

namespace qload::scheduler::detail {

IoThread::IoThread(io::Reader& reader, CompletionQueue& done)
    : reader_(reader), done_(done), thread_([this] { run(); }) {
  pthread_setname_np(thread_.native_handle(), "qload-io");
}

IoThread::~IoThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void IoThread::submit(const io::ReadRequest& request) {
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back(request);
  }
  wake_.notify_one();
}

// Loop: take what was handed over, submit it as one batch, then block in the Reader until a
// read completes. A read handed over while others are in flight waits for the next
// completion (the Reader cannot be woken from wait()); with several reads in flight that
// costs at most one read's worth of queue depth, never an idle disk.
void IoThread::run() {
  std::vector<io::ReadRequest> batch;
  std::array<io::ReadCompletion, 64> completions;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (!reading()) wake_.wait(lock, [&] { return stopping_ || !inbox_.empty(); });
      if (stopping_ && inbox_.empty() && !reading()) return;
      batch.swap(inbox_);
    }
    if (!batch.empty()) submit_batch(batch);
    if (!reading()) continue;
    auto n = reader_.wait(completions, 1);
    if (!n) {
      fail_all(n.error());
      continue;
    }
    for (std::size_t i = 0; i < *n; ++i) {
      const auto tag = static_cast<TaskId>(completions[i].tag);
      std::erase(in_reader_, tag);
      done_.push(Completion{.task = tag, .status = std::move(completions[i].status), .end = Clock::now()});
    }
  }
}

void IoThread::submit_batch(std::vector<io::ReadRequest>& batch) {
  if (broken_) {
    for (const io::ReadRequest& r : batch)
      done_.push(Completion{.task = static_cast<TaskId>(r.tag), .status = fail(Error(*broken_)), .end = Clock::now()});
  } else if (reader_.submit(batch)) {
    for (const io::ReadRequest& r : batch) in_reader_.push_back(static_cast<TaskId>(r.tag));
  } else {
    // The Reader refuses a whole batch for one bad request: resubmit one by one so only the
    // bad one fails (with the Reader's error naming it).
    for (const io::ReadRequest& r : batch) {
      Status s = reader_.submit(std::span(&r, 1));
      if (s) {
        in_reader_.push_back(static_cast<TaskId>(r.tag));
      } else {
        done_.push(Completion{.task = static_cast<TaskId>(r.tag), .status = std::move(s), .end = Clock::now()});
      }
    }
  }
  batch.clear();
}

// The engine itself broke (not one read): whatever it still had can no longer be attributed,
// so every read in it fails with that error. The Reader's destructor still waits for the
// kernel before any buffer goes away.
void IoThread::fail_all(const Error& error) {
  broken_ = error;
  for (const TaskId t : in_reader_)
    done_.push(Completion{.task = t, .status = fail(Error(error)), .end = Clock::now()});
  in_reader_.clear();
}

}  // namespace qload::scheduler::detail
