// A one-line progress bar on stderr for interactive terminals: bytes, GB/s and ETA, redrawn
// at most ten times a second. Not thread-safe: the loader calls it from one thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace qload::cli {

class ProgressBar {
 public:
  // Draws only when `enabled` (the CLI passes isatty(stderr) and not --json).
  explicit ProgressBar(bool enabled) : enabled_(enabled), start_(Clock::now()) {}
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() { finish(); }

  void update(std::uint64_t done_bytes, std::uint64_t total_bytes);
  // Clears the line (once).
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_{};
};

}  // namespace qload::cli
