// One rank of a multi-process load (world from the torchrun variables) that misbehaves on
// command, at a known point: after its first read completes, from inside the load.
//   qload_test_world_rank MODEL LAYOUT FAULT
// LAYOUT: dp (data-parallel replicas, sharing reads), tp (tensor-parallel, sharing reads) or
// own (data-parallel, each rank reading its own copy). FAULT: none, kill (SIGKILL itself), stop
// (SIGSTOP itself, until the driver resumes or kills it) or sleep:MS (a slow rank).
// Prints "rank R: N tensors" and exits 0 only with a complete model; otherwise prints the error
// and exits 1. tests/cli/world_faults.sh drives it.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "qload/session/load.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    fmt::print(stderr, "usage: {} MODEL dp|tp|own none|kill|stop|sleep:MS\n", argv[0]);
    return 2;
  }
  const std::string layout = argv[2], fault = argv[3];
  const char* size_text = std::getenv("WORLD_SIZE");
  const auto size = static_cast<std::uint32_t>(size_text != nullptr ? std::strtoul(size_text, nullptr, 10) : 1);
  qload::session::LoadSpec spec{.source = argv[1]};
  if (layout == "tp") {
    spec.tensor_parallel = size;
  } else {
    spec.data_parallel = size;
  }
  spec.share_reads = layout != "own";
  bool struck = false;
  const qload::session::LoadHooks hooks{.progress = [&](std::uint64_t, std::uint64_t) {
    if (struck) return;
    struck = true;
    if (fault == "kill") std::raise(SIGKILL);
    if (fault == "stop") std::raise(SIGSTOP);
    if (fault.starts_with("sleep:"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoul(fault.substr(6))));
  }};
  auto loaded = qload::session::load(spec, qload::Logger::to_stderr(qload::LogLevel::kWarn), hooks);
  if (!loaded) {
    fmt::print(stderr, "qload: error: {}\n", loaded.error().to_string());
    return 1;
  }
  fmt::print("rank {}: {} tensors\n", loaded->request.world ? loaded->request.world->rank : 0,
             loaded->model.tensors().size());
  return 0;
}
