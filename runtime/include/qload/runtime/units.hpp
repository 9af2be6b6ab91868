// Sizes, durations and switches written by people: "8MiB", "1GiB", "512KB", "4096"; "30s",
// "500ms"; "on", "false". The one parser for each, used by every source of settings.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "qload/runtime/error.hpp"

namespace qload {

// Parses a non-negative byte count with an optional unit: B, KiB/MiB/GiB/TiB (powers of
// 1024; K/M/G/T too), KB/MB/GB/TB (powers of 1000); an optional space between number and
// unit. A fraction is allowed with a unit ("1.5GiB") if the result is a whole number of bytes.
Result<std::uint64_t> parse_byte_size(std::string_view text);

// A non-negative duration: a number (fractions allowed) and a unit ns, us, ms, s, m or h; a
// bare number is seconds.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

// 1/0, true/false, yes/no, on/off, in any case.
Result<bool> parse_bool(std::string_view text);

// The largest unit that divides it exactly: "30s", "500ms", "2m".
std::string format_duration(std::chrono::nanoseconds d);

// Exact and parseable back, the shortest such spelling: "256MiB", "512MB", "4097".
std::string format_byte_size(std::uint64_t bytes);

// "1.50 GiB", "8.00 MiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

}  // namespace qload
