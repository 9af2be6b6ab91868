// The I/O self-test behind `qload selftest`: writes a file of known pseudo-random bytes and
// checks that every available engine, buffered and O_DIRECT, returns exactly those bytes
// (random reads compared byte for byte, whole-file XXH3 compared with a one-shot hash).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"

namespace qload::io {

struct SelfTestOptions {
  std::string directory = "/tmp";                  // where the scratch file is written (then removed)
  std::uint64_t file_bytes = (64u << 20) + 12345;  // odd on purpose: exercises unaligned tails
  std::uint32_t random_reads = 256;
  std::uint64_t seed = 1;
};

struct SelfTestCase {
  std::string engine;       // "io_uring" / "pread"
  std::string direct;       // "auto" / "off"
  std::uint64_t bytes = 0;  // bytes read in this case
  double seconds = 0;       // time for the whole-file digest
  std::uint64_t direct_bytes = 0;
  bool passed = false;
  std::string failure;  // what differed, if !passed
};

struct SelfTestReport {
  std::string file;
  std::string expected_xxh3_128;
  std::string uring_status;  // "available" or the probe's reason
  std::vector<SelfTestCase> cases;
  bool passed() const;
};

// Fails only when the test could not run (no scratch space, ...); wrong bytes are reported
// in the cases, not as an error.
Result<SelfTestReport> run_self_test(const SelfTestOptions& options, const Logger& log);

}  // namespace qload::io
