#include "qload/runtime/version.hpp"

namespace qload {

std::string_view version() noexcept {
  return QLOAD_VERSION_STRING;
}
std::string_view compiler() noexcept {
  return __VERSION__;
}

}  // namespace qload
