#include "qload/runtime/units.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace qload {

Result<std::uint64_t> parse_byte_size(std::string_view text) {
  const auto bad = [&] {
    return fail(Errc::kInvalidArgument,
                fmt::format("'{}' is not a byte size (examples: 4096, 8MiB, 1.5GiB, 512KB)", text));
  };
  std::size_t digits = 0;
  while (digits < text.size() && ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) ++digits;
  if (digits == 0) return bad();
  std::string_view unit = text.substr(digits);
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 10> kUnits{{
      {"B", 1},
      {"KiB", 1ull << 10},
      {"MiB", 1ull << 20},
      {"GiB", 1ull << 30},
      {"TiB", 1ull << 40},
      {"KB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000ull * 1000 * 1000},
      {"TB", 1000ull * 1000 * 1000 * 1000},
      {"", 1},
  }};
  std::uint64_t scale = 0;
  for (const auto& [name, value] : kUnits)
    if (unit == name) scale = value;
  if (scale == 0) return bad();
  const std::string_view number = text.substr(0, digits);
  if (number.find('.') == std::string_view::npos) {
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (ec != std::errc{} || end != number.data() + number.size()) return bad();
    std::uint64_t out = 0;
    if (__builtin_mul_overflow(n, scale, &out))
      return fail(Errc::kOverflow, fmt::format("byte size '{}' does not fit in 64 bits", text));
    return out;
  }
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc{} || end != number.data() + number.size() || scale == 1) return bad();
  const double bytes = value * static_cast<double>(scale);
  if (!(bytes < 1.8e19) || bytes != std::floor(bytes))
    return fail(Errc::kInvalidArgument, fmt::format("byte size '{}' is not a whole number of bytes", text));
  return static_cast<std::uint64_t>(bytes);
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < kNames.size()) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kNames[unit]);
}

}  // namespace qload
