// The one JSON reader for every JSON file qload reads (index.json, config.json, lockfiles).
// nlohmann's own parse keeps the last of duplicate keys and skips a byte-order mark; a second
// parser that disagrees with Python's about which value counts is exactly the parser
// differential security.md warns about, so duplicates are errors here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "qload/runtime/error.hpp"

namespace qload::formats {

inline constexpr std::size_t kMaxJsonDepth = 64;

// Parses `text` as one JSON object. kCorrupt, naming `path` and the byte offset, for invalid
// UTF-8, a syntax error, a top level that is not an object (a byte-order mark included),
// duplicate keys in any object, or nesting deeper than `max_depth`. Never throws.
Result<nlohmann::json> parse_strict_json_object(std::string_view text, const std::string& path,
                                                std::size_t max_depth = kMaxJsonDepth);

// The JSON object in the regular file `path` of at most `max_bytes`: read_small_file's checks
// (a FIFO, a directory or a device is refused; never blocks), then parse_strict_json_object's.
Result<nlohmann::json> read_strict_json_file(const std::string& path, std::uint64_t max_bytes,
                                             std::size_t max_depth = kMaxJsonDepth);

// Offset of the first byte that is not JSON whitespace (space, tab, LF, CR), or text.size().
std::size_t skip_json_whitespace(std::string_view text) noexcept;

}  // namespace qload::formats
