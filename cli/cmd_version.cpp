// `qload version` / `qload --version`: what this build can do, and what this machine offers.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/session/system.hpp"

namespace qload::cli {

int run_version(const VersionArgs& args) {
  const session::SystemReport system = session::system_report();
  const io::UringProbe& uring = system.uring;
  const CudaInfo& cuda = system.cuda;
  const NcclInfo& nccl = system.nccl;
  if (args.json) {
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& d : cuda.devices)
      devices.push_back({{"index", d.index},
                         {"name", d.name},
                         {"memory_bytes", d.memory_bytes},
                         {"compute", fmt::format("{}.{}", d.compute_major, d.compute_minor)}});
    const nlohmann::json out = {
        {"schema", "qload.version/1"},
        {"version", system.version},
        {"compiler", system.compiler},
        {"liburing", system.liburing},
        {"xxhash", system.xxhash},
        {"luajit", system.luajit},
        {"lua_check", system.lua_check},
        {"io_uring", {{"usable", uring.usable}, {"reason", uring.reason}, {"read_fixed", uring.read_fixed}}},
        {"cuda",
         {{"compiled", cuda.compiled},
          {"runtime_version", cuda.runtime_version},
          {"driver_version", cuda.driver_version},
          {"devices", devices},
          {"unavailable_reason", cuda.unavailable_reason}}},
        {"nccl",
         {{"compiled", nccl.compiled},
          {"header_version", nccl.header_version},
          {"library_version", nccl.library_version},
          {"unavailable_reason", nccl.unavailable_reason}}},
    };
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("qload {} ({})\n", system.version, system.compiler);
  fmt::print("  liburing {}; io_uring here: {}\n", system.liburing,
             uring.usable ? "usable" : "unavailable: " + uring.reason);
  fmt::print("  xxHash {} (XXH3-64, XXH3-128)\n", system.xxhash);
  fmt::print("  {}; recipe interpreter check: {}\n", system.luajit, system.lua_check);
  if (cuda.compiled) {
    fmt::print("  CUDA runtime {}.{} (static), devices for sm_80/sm_90; driver {}\n", cuda.runtime_version / 1000,
               cuda.runtime_version % 1000 / 10, cuda.driver_version ? std::to_string(cuda.driver_version) : "none");
    for (const auto& d : cuda.devices)
      fmt::print("    cuda:{} {} (sm_{}{}, {} GiB)\n", d.index, d.name, d.compute_major, d.compute_minor,
                 d.memory_bytes >> 30);
    if (cuda.devices.empty()) fmt::print("    no GPU: {}\n", cuda.unavailable_reason);
  } else {
    fmt::print("  CUDA: not built\n");
  }
  if (nccl.compiled)
    fmt::print(
        "  NCCL headers {}; library: {}\n", nccl.header_version,
        nccl.library_version ? std::to_string(nccl.library_version) : "not loadable: " + nccl.unavailable_reason);
  else
    fmt::print("  NCCL: not built\n");
  return 0;
}

}  // namespace qload::cli
