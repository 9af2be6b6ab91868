#pragma once

#include <string_view>

namespace qload {

// The project version ("0.1.0") and the compiler that built it.
std::string_view version() noexcept;
std::string_view compiler() noexcept;

}  // namespace qload
