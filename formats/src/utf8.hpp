// Strict UTF-8 validation of untrusted text (headers, index and config files).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace qload::formats {

// Index of the first byte that does not start a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or nullopt if all of `text` is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept;

}  // namespace qload::formats
