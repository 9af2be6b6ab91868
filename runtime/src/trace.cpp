#include "qload/runtime/trace.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qload {

std::uint32_t TraceRecorder::lane_id(std::string_view lane) {
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    if (lanes_[i] == lane) return static_cast<std::uint32_t>(i + 1);
  lanes_.emplace_back(lane);
  return static_cast<std::uint32_t>(lanes_.size());
}

std::int64_t TraceRecorder::micros(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void TraceRecorder::complete(std::string_view lane, std::string_view name, Clock::time_point start,
                             Clock::time_point end, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  events_.push_back(Event{'X', lane_id(lane), std::string(name), micros(start),
                          std::max<std::int64_t>(micros(end) - micros(start), 0), static_cast<std::int64_t>(bytes)});
}

void TraceRecorder::counter(std::string_view name, std::int64_t value, Clock::time_point at) {
  std::lock_guard lock(mutex_);
  events_.push_back(Event{'C', 0, std::string(name), micros(at), 0, value});
}

std::size_t TraceRecorder::event_count() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

std::string TraceRecorder::to_json() const {
  using nlohmann::json;
  std::lock_guard lock(mutex_);
  const int pid = static_cast<int>(::getpid());
  json events = json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "qload"}}}});
  for (std::size_t i = 0; i < lanes_.size(); ++i)
    events.push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", i + 1}, {"args", {{"name", lanes_[i]}}}});
  for (const Event& e : events_) {
    json j = {{"ph", std::string(1, e.phase)}, {"name", e.name}, {"pid", pid}, {"ts", e.ts_us}};
    if (e.phase == 'X') {
      j["tid"] = e.lane;
      j["dur"] = e.dur_us;
      j["cat"] = lanes_[e.lane - 1];
      if (e.value != 0) j["args"] = {{"bytes", e.value}};
    } else {
      j["tid"] = 0;
      j["args"] = {{"value", e.value}};
    }
    events.push_back(std::move(j));
  }
  // Names come from checkpoints: replace invalid UTF-8 instead of throwing.
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump(-1, ' ', false,
                                                                                  json::error_handler_t::replace);
}

Status TraceRecorder::write(const std::string& path, bool overwrite) const {
  // A unique temporary beside `path` (never a fixed name another file may have).
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return fail(Error::from_errno(errno, "create trace file").with_file(path));
  const std::string text = to_json();
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      return fail(Error::from_errno(err, "write trace file").with_file(tmp));
    }
    done += static_cast<std::size_t>(n);
  }
  ::fchmod(fd, 0644);  // mkstemp's 0600 would surprise whoever opens the trace
  ::close(fd);
  const int rc = overwrite ? ::rename(tmp.c_str(), path.c_str())
                           : ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (rc != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    if (err == EEXIST)
      return fail(Error(Errc::kInvalidArgument,
                        "trace file exists; qload replaces a recipe's trace only when told to (qload load --overwrite)")
                      .with_file(path));
    return fail(Error::from_errno(err, "rename trace file").with_file(path));
  }
  return {};
}

}  // namespace qload
