// Errors that say where: every formats error names the file, and the tensor and absolute byte
// offset where they are known.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "qload/runtime/error.hpp"

namespace qload::formats {

inline Error located(Errc code, std::string message, const std::string& file, std::string_view tensor = {},
                     std::optional<std::uint64_t> offset = std::nullopt) {
  Error error(code, std::move(message));
  static_cast<void>(std::move(error).with_file(file));
  if (!tensor.empty()) static_cast<void>(std::move(error).with_tensor(std::string(tensor)));
  if (offset) static_cast<void>(std::move(error).with_offset(*offset));
  return error;
}

// Short, terminal-safe quoting of untrusted names inside messages.
inline std::string quote_name(std::string_view name) {
  constexpr std::size_t kMax = 200;  // a hostile name can be megabytes long
  std::string text = escape_for_terminal(name.substr(0, kMax));
  if (name.size() > kMax) text += "...";
  return "'" + text + "'";
}

}  // namespace qload::formats
