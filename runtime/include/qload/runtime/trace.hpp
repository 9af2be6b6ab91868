// Trace events in the Chrome trace JSON format (open the file in Perfetto or chrome://tracing).
//
// Each event belongs to a named lane ("read", "verify", "h2d cuda:0", ...) that becomes one
// track (tid) in the viewer; events on a lane must not overlap partially, so each lane is fed
// by one activity at a time. Recording takes a mutex: events are per chunk or per task, never
// per byte. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "qload/runtime/error.hpp"

namespace qload {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  TraceRecorder() : origin_(Clock::now()) {}

  // A complete event ("ph":"X") from `start` to `end` on `lane`; `bytes` (if non-zero) is
  // shown in the event's args.
  void complete(std::string_view lane, std::string_view name, Clock::time_point start, Clock::time_point end,
                std::uint64_t bytes = 0);
  // A counter sample ("ph":"C"), e.g. staging bytes in use.
  void counter(std::string_view name, std::int64_t value, Clock::time_point at = Clock::now());

  std::size_t event_count() const;
  // The whole trace as Chrome trace JSON text.
  std::string to_json() const;
  // Writes to_json() to `path` (via a temporary file and rename, so readers never see half).
  // Unless `overwrite`, an existing file at `path` is kept and the write fails (kInvalidArgument).
  Status write(const std::string& path, bool overwrite = true) const;

 private:
  struct Event {
    char phase;
    std::uint32_t lane;
    std::string name;
    std::int64_t ts_us;
    std::int64_t dur_us;
    std::int64_t value;
  };
  std::uint32_t lane_id(std::string_view lane);  // caller holds mutex_
  std::int64_t micros(Clock::time_point t) const;

  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<std::string> lanes_;
  std::vector<Event> events_;
};

// Records one complete event on destruction: `TraceSpan span(trace, "read", "chunk 3");`.
// A null recorder makes it free.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* trace, std::string lane, std::string name, std::uint64_t bytes = 0)
      : trace_(trace),
        lane_(std::move(lane)),
        name_(std::move(name)),
        bytes_(bytes),
        start_(trace ? TraceRecorder::Clock::now() : TraceRecorder::Clock::time_point{}) {}
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  ~TraceSpan() {
    if (trace_) trace_->complete(lane_, name_, start_, TraceRecorder::Clock::now(), bytes_);
  }

 private:
  TraceRecorder* trace_;
  std::string lane_;
  std::string name_;
  std::uint64_t bytes_;
  TraceRecorder::Clock::time_point start_;
};

}  // namespace qload
