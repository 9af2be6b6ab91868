#pragma once

#include <string_view>

namespace qload::io {

// Versions of the I/O libraries compiled in ("2.3", "0.8.1").
std::string_view liburing_version() noexcept;
std::string_view xxhash_version() noexcept;

}  // namespace qload::io
