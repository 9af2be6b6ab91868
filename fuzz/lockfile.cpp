// libFuzzer target: lockfile text (qload.lock/1).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "qload/session/lockfile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)qload::session::parse_lockfile(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.lock");
  return 0;
}
