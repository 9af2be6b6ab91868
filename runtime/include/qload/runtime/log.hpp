// A logger passed to whoever needs to report something that is not an error (an engine
// fallback, a skipped optimisation). No global logger: the embedding program decides where
// lines go; the CLI prints them to stderr.
#pragma once

#include <functional>
#include <string_view>
#include <utility>

namespace qload {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

std::string_view log_level_name(LogLevel level) noexcept;

class Logger {
 public:
  using Sink = std::function<void(LogLevel, std::string_view)>;

  Logger() = default;  // discards everything
  Logger(Sink sink, LogLevel min_level) : sink_(std::move(sink)), min_level_(min_level) {}

  // Writes "qload: <level>: <message>" lines to stderr (one write each, so lines from several
  // threads do not interleave).
  static Logger to_stderr(LogLevel min_level = LogLevel::kInfo);

  bool enabled(LogLevel level) const noexcept { return sink_ && level >= min_level_; }
  void log(LogLevel level, std::string_view message) const {
    if (enabled(level)) sink_(level, message);
  }
  void debug(std::string_view m) const { log(LogLevel::kDebug, m); }
  void info(std::string_view m) const { log(LogLevel::kInfo, m); }
  void warn(std::string_view m) const { log(LogLevel::kWarn, m); }

 private:
  Sink sink_;
  LogLevel min_level_ = LogLevel::kInfo;
};

}  // namespace qload
