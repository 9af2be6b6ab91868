#include "qload/io/build_info.hpp"

#include <xxhash.h>

#define QLOAD_STR_(x) #x
#define QLOAD_STR(x) QLOAD_STR_(x)

namespace qload::io {

// liburing 2.3 has no version macros; the build passes pkg-config's version.
std::string_view liburing_version() noexcept {
  return QLOAD_LIBURING_VERSION;
}
std::string_view xxhash_version() noexcept {
  return QLOAD_STR(XXH_VERSION_MAJOR) "." QLOAD_STR(XXH_VERSION_MINOR) "." QLOAD_STR(XXH_VERSION_RELEASE);
}

}  // namespace qload::io
