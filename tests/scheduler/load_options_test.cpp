// LoadOptions from the environment: typed values, units, and conflicts refused.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "qload/scheduler/load.hpp"

using namespace qload;
using namespace qload::scheduler;

namespace {
auto env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST_CASE("load options: environment variables set the budgets and the mode", "[scheduler][options]") {
  LoadOptions o;
  REQUIRE(o.apply_environment(env_of({{"QLOAD_STAGING_BYTES", "64MiB"},
                                      {"QLOAD_SLOT_BYTES", "4096K"},
                                      {"QLOAD_READS_IN_FLIGHT", "3"},
                                      {"QLOAD_CPU_WORKERS", "1"},
                                      {"QLOAD_LOAD_MODE", "mmap"},
                                      {"QLOAD_IO", "pread"}})));
  CHECK(o.staging.total_bytes == 64u << 20);
  CHECK(o.staging.slot_bytes == 4u << 20);
  CHECK(o.reads_in_flight == 3);
  CHECK(o.cpu_workers == 1);
  CHECK(o.plan.mode == LoadMode::kMmap);
  CHECK(o.io.engine == io::EngineKind::kPread);
  CHECK(o.validate());
  LoadOptions untouched;
  REQUIRE(untouched.apply_environment(env_of({})));
  CHECK(untouched.staging.total_bytes == StagingOptions{}.total_bytes);
}

TEST_CASE("load options: a variable contradicting an explicit setting, or a bad value, is an error",
          "[scheduler][options]") {
  LoadOptions o;
  o.reads_in_flight = 2;
  CHECK(o.apply_environment(env_of({{"QLOAD_READS_IN_FLIGHT", "4"}})).error().code() == Errc::kInvalidArgument);
  CHECK(o.apply_environment(env_of({{"QLOAD_READS_IN_FLIGHT", "2"}})));  // agreeing is fine
  LoadOptions p;
  for (const auto& [name, value] : std::map<std::string, std::string>{{"QLOAD_STAGING_BYTES", "12XB"},
                                                                      {"QLOAD_SLOT_BYTES", "-1"},
                                                                      {"QLOAD_CPU_WORKERS", "0"},
                                                                      {"QLOAD_READS_IN_FLIGHT", "2MiB"},
                                                                      {"QLOAD_LOAD_MODE", "fast"}}) {
    INFO(name << "=" << value);
    CHECK(p.apply_environment(env_of({{name, value}})).error().code() == Errc::kInvalidArgument);
  }
}
