// Shared setup for the io tests: which engines to run, and reading through a Reader.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "qload/io/reader.hpp"
#include "support/scratch.hpp"

namespace qload::testing {

struct EngineCase {
  io::EngineKind engine;
  io::DirectMode direct;
  std::string label() const {
    return std::string(io::engine_name(engine)) + (direct == io::DirectMode::kOff ? "/buffered" : "/direct-auto");
  }
};

// Every engine x direct mode. io_uring is required (the CI machines have it): a machine
// without it fails here unless QLOAD_TEST_NO_URING=1 says that is expected.
inline std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> cases;
  const io::UringProbe probe = io::probe_uring();
  const char* no_uring = std::getenv("QLOAD_TEST_NO_URING");
  if (!probe.usable && !(no_uring && std::string(no_uring) == "1"))
    FAIL("io_uring is unavailable here (" << probe.reason << "); set QLOAD_TEST_NO_URING=1 to test pread only");
  for (auto direct : {io::DirectMode::kAuto, io::DirectMode::kOff}) {
    if (probe.usable) cases.push_back({io::EngineKind::kUring, direct});
    cases.push_back({io::EngineKind::kPread, direct});
  }
  return cases;
}

inline std::unique_ptr<io::Reader> make_test_reader(const EngineCase& c, std::uint32_t depth = 8,
                                                    io::FaultInjector* faults = nullptr) {
  io::ReaderOptions options{.engine = c.engine, .direct = c.direct, .queue_depth = depth, .faults = faults};
  auto reader = io::make_reader(options, Logger{});
  if (!reader) FAIL("make_reader: " << reader.error().to_string());
  REQUIRE(std::string((*reader)->engine()) == std::string(io::engine_name(c.engine)));
  return std::move(*reader);
}

}  // namespace qload::testing
