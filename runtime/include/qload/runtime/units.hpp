// Byte sizes written by people: "8MiB", "1GiB", "512KB", "4096".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "qload/runtime/error.hpp"

namespace qload {

// Parses a non-negative byte count with an optional unit: B, KiB/MiB/GiB/TiB (powers of
// 1024), KB/MB/GB/TB (powers of 1000); an optional space between number and unit. A
// fraction is allowed with a unit ("1.5GiB") if the result is a whole number of bytes.
Result<std::uint64_t> parse_byte_size(std::string_view text);

// "1.50 GiB", "8.00 MiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

}  // namespace qload
