// `qload selftest`: the I/O self-check (both engines, buffered and direct, against known bytes).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "commands.hpp"
#include "qload/session/system.hpp"

namespace qload::cli {

int run_selftest(const SelfTestArgs& args) {
  io::SelfTestOptions options;
  if (!args.directory.empty()) {
    options.directory = args.directory;
  } else if (const char* tmp = std::getenv("TMPDIR"); tmp != nullptr && *tmp != '\0') {
    options.directory = tmp;
  }
  if (args.bytes != 0) options.file_bytes = args.bytes;
  const Logger log = Logger::to_stderr(LogLevel::kWarn);
  auto report = session::self_test(options, log);
  if (!report) return cli::report(report.error());

  if (args.json) {
    nlohmann::json cases = nlohmann::json::array();
    for (const auto& c : report->cases)
      cases.push_back({{"engine", c.engine},
                       {"direct", c.direct},
                       {"bytes", c.bytes},
                       {"seconds", c.seconds},
                       {"direct_bytes", c.direct_bytes},
                       {"passed", c.passed},
                       {"failure", c.failure}});
    fmt::print("{}\n", nlohmann::json{{"schema", "qload.selftest/1"},
                                      {"passed", report->passed()},
                                      {"io_uring", report->uring_status},
                                      {"xxh3_128", report->expected_xxh3_128},
                                      {"cases", cases}}
                           .dump(2));
  } else {
    fmt::print("qload I/O self-test: {} bytes of known data, XXH3-128 {}\n", options.file_bytes,
               report->expected_xxh3_128);
    fmt::print("io_uring: {}\n", report->uring_status);
    for (const auto& c : report->cases) {
      const double gbs = c.seconds > 0 ? static_cast<double>(options.file_bytes) / c.seconds / 1e9 : 0;
      fmt::print("  {:<9} direct={:<4} {}  {:6.2f} GB/s  {:3}% via O_DIRECT{}\n", c.engine, c.direct,
                 c.passed ? "ok  " : "FAIL", gbs, c.bytes ? c.direct_bytes * 100 / c.bytes : 0,
                 c.passed ? "" : "\n    " + c.failure);
    }
    fmt::print("{}\n", report->passed() ? "self-test passed" : "self-test FAILED");
  }
  return report->passed() ? 0 : 70;
}

}  // namespace qload::cli
