// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF) for
// untrusted text: headers, index and config files, tensor names printed to a terminal.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace qload {

// Length (1..4) of the well-formed UTF-8 sequence at the start of `text`, or 0 if there is
// none (an invalid byte, a truncated sequence, or empty text).
std::size_t utf8_sequence_length(std::string_view text) noexcept;

// Index of the first byte that does not start a well-formed sequence, or nullopt if all of
// `text` is valid.
std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept;

}  // namespace qload
