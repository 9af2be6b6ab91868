#include "qload/session/system.hpp"

#include "qload/io/build_info.hpp"
#include "qload/runtime/version.hpp"
#include "qload/scripts/lua_state.hpp"

namespace qload::session {

SystemReport system_report() {
  SystemReport r{.version = std::string(version()),
                 .compiler = std::string(compiler()),
                 .liburing = std::string(io::liburing_version()),
                 .xxhash = std::string(io::xxhash_version()),
                 .luajit = scripts::luajit_version(),
                 .lua_check = "ok",
                 .uring = io::probe_uring(),
                 .cuda = probe_cuda(),
                 .nccl = probe_nccl()};
  if (auto L = scripts::LuaState::create(); !L) {
    r.lua_check = L.error().to_string();
  } else if (auto got = L->eval_to_string("return 6 * 7", "version-check"); !got || *got != "42") {
    r.lua_check = got ? "unexpected result " + *got : got.error().to_string();
  }
  return r;
}

Result<io::SelfTestReport> self_test(const io::SelfTestOptions& options, const Logger& log) {
  return io::run_self_test(options, log);
}

}  // namespace qload::session
