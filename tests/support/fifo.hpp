// A FIFO planted where a checkpoint file should be, and a bound on how long the code under test
// may take with it: an open() without O_NONBLOCK blocks until a writer comes, which in a test
// would be forever. On time-out the FIFO is given a writer, so the stuck call returns and the
// test fails instead of hanging.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

namespace qload::testing {

// Replaces whatever is at `path` with a FIFO that has no writer.
inline void plant_fifo(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed: " + path);
}

// Runs `call` on a thread; true when it returned within `limit`. Otherwise opens `fifo` for
// writing (a reader blocked in open() lets that succeed), which releases the call, and false.
template <class Call>
bool returns_within(Call&& call, const std::string& fifo, std::chrono::seconds limit = std::chrono::seconds(10)) {
  std::packaged_task<void()> task(std::forward<Call>(call));
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  const bool in_time = done.wait_for(limit) == std::future_status::ready;
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (writer >= 0) ::close(writer);
  }
  runner.join();
  return in_time;
}

}  // namespace qload::testing
