// `qload version` / `qload --version`: what this build can do, and what this machine offers.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/io/build_info.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/cuda.hpp"
#include "qload/runtime/nccl.hpp"
#include "qload/runtime/version.hpp"
#include "qload/scripts/lua_state.hpp"

namespace qload::cli {

int run_version(const VersionArgs& args) {
  const io::UringProbe uring = io::probe_uring();
  const CudaInfo cuda = probe_cuda();
  const NcclInfo nccl = probe_nccl();
  std::string lua_check = "ok";
  if (auto L = scripts::LuaState::create(); !L) {
    lua_check = L.error().to_string();
  } else if (auto r = L->eval_to_string("return 6 * 7", "version-check"); !r || *r != "42") {
    lua_check = r ? "unexpected result " + *r : r.error().to_string();
  }
  const std::string liburing(io::liburing_version());
  const std::string xxhash(io::xxhash_version());

  if (args.json) {
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& d : cuda.devices)
      devices.push_back({{"index", d.index},
                         {"name", d.name},
                         {"memory_bytes", d.memory_bytes},
                         {"compute", fmt::format("{}.{}", d.compute_major, d.compute_minor)}});
    const nlohmann::json out = {
        {"schema", "qload.version/1"},
        {"version", std::string(version())},
        {"compiler", std::string(compiler())},
        {"liburing", liburing},
        {"xxhash", xxhash},
        {"luajit", scripts::luajit_version()},
        {"lua_check", lua_check},
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
  fmt::print("qload {} ({})\n", version(), compiler());
  fmt::print("  liburing {}; io_uring here: {}\n", liburing, uring.usable ? "usable" : "unavailable: " + uring.reason);
  fmt::print("  xxHash {} (XXH3-64, XXH3-128)\n", xxhash);
  fmt::print("  {}; recipe interpreter check: {}\n", scripts::luajit_version(), lua_check);
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
