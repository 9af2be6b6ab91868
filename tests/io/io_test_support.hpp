// Shared setup for the io tests: which engines to run, and reading through a Reader.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

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
    const char* mode = direct == io::DirectMode::kOff  ? "/buffered"
                       : direct == io::DirectMode::kOn ? "/direct"
                                                       : "/direct-auto";
    return std::string(io::engine_name(engine)) + mode;
  }
};

// Test files are written just before they are read, so they sit in the page cache and kAuto
// would read them buffered: the O_DIRECT paths are tested with kOn, where the temp directory's
// file system takes O_DIRECT at all (tmpfs does not; then kAuto, which falls back quietly).
inline io::DirectMode direct_mode_for_tests() {
  static const io::DirectMode mode = [] {
    ScratchDir dir;
    const std::string probe = dir.file("o_direct_probe");
    write_file(probe, std::vector<std::byte>(4096));
    const int fd = ::open(probe.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) return io::DirectMode::kAuto;
    ::close(fd);
    return io::DirectMode::kOn;
  }();
  return mode;
}

// Every engine x direct mode. io_uring is required (the CI machines have it): a machine
// without it fails here unless QLOAD_TEST_NO_URING=1 says that is expected.
inline std::vector<EngineCase> engine_cases() {
  std::vector<EngineCase> cases;
  const io::UringProbe probe = io::probe_uring();
  const char* no_uring = std::getenv("QLOAD_TEST_NO_URING");
  if (!probe.usable && !(no_uring && std::string(no_uring) == "1"))
    FAIL("io_uring is unavailable here (" << probe.reason << "); set QLOAD_TEST_NO_URING=1 to test pread only");
  for (auto direct : {direct_mode_for_tests(), io::DirectMode::kOff}) {
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
