#include "qload/runtime/log.hpp"

#include <unistd.h>

#include <string>

namespace qload {

std::string_view log_level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

Logger Logger::to_stderr(LogLevel min_level) {
  return Logger(
      [](LogLevel level, std::string_view message) {
        std::string line = "qload: ";
        line += log_level_name(level);
        line += ": ";
        line += message;
        line += '\n';
        // Best effort: a failed log write has nowhere to be reported.
        [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
      },
      min_level);
}

}  // namespace qload
