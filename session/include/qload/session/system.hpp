// What this build can do and what this machine offers (`qload version`), and the I/O
// self-check against known bytes (`qload selftest`).
#pragma once

#include <string>

#include "qload/io/reader.hpp"
#include "qload/io/self_test.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/nccl.hpp"

namespace qload::session {

struct SystemReport {
  std::string version;   // qload's
  std::string compiler;  // that built it
  std::string liburing, xxhash, luajit;
  std::string lua_check;  // "ok", or why the recipe interpreter failed a trivial evaluation
  io::UringProbe uring;
  CudaInfo cuda;
  NcclInfo nccl;
};

// Probes this machine: io_uring, CUDA devices, NCCL, and a LuaJIT evaluation.
SystemReport system_report();

// io::run_self_test: both I/O engines, buffered and direct, against known bytes.
Result<io::SelfTestReport> self_test(const io::SelfTestOptions& options, const Logger& log);

}  // namespace qload::session
