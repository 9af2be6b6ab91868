#include "qload/runtime/units.hpp"

#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <string>
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
  static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 14> kUnits{{
      {"B", 1},
      {"K", 1ull << 10},  // the shell's and ulimit's shorthand: binary
      {"M", 1ull << 20},
      {"G", 1ull << 30},
      {"T", 1ull << 40},
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

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  const auto bad = [&] {
    return fail(Errc::kInvalidArgument, fmt::format("'{}' is not a duration (examples: 30s, 500ms, 2m, 1.5h)", text));
  };
  std::size_t digits = 0;
  while (digits < text.size() && ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) ++digits;
  if (digits == 0) return bad();
  std::string_view unit = text.substr(digits);
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static constexpr std::array<std::pair<std::string_view, double>, 7> kUnits{{
      {"ns", 1},
      {"us", 1e3},
      {"ms", 1e6},
      {"s", 1e9},
      {"", 1e9},  // a bare number is seconds, as it always was for QLOAD_RENDEZVOUS_TIMEOUT
      {"m", 60e9},
      {"h", 3600e9},
  }};
  double scale = 0;
  for (const auto& [name, value] : kUnits)
    if (unit == name) scale = value;
  if (scale == 0) return bad();
  const std::string_view number = text.substr(0, digits);
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc{} || end != number.data() + number.size()) return bad();
  const double ns = value * scale;
  if (!(ns < 9.2e18)) return fail(Errc::kOverflow, fmt::format("duration '{}' is too long", text));
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

Result<bool> parse_bool(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (std::string_view yes : {"1", "true", "yes", "on"})
    if (lower == yes) return true;
  for (std::string_view no : {"0", "false", "no", "off"})
    if (lower == no) return false;
  return fail(Errc::kInvalidArgument, fmt::format("'{}' is not a boolean (1/0, true/false, yes/no, on/off)", text));
}

std::string format_duration(std::chrono::nanoseconds d) {
  const std::int64_t ns = d.count();
  if (ns == 0) return "0s";
  for (const auto& [unit, scale] : {std::pair<std::string_view, std::int64_t>{"h", 3600'000'000'000},
                                    {"m", 60'000'000'000},
                                    {"s", 1'000'000'000},
                                    {"ms", 1'000'000},
                                    {"us", 1'000}})
    if (ns != 0 && ns % scale == 0) return fmt::format("{}{}", ns / scale, unit);
  return fmt::format("{}ns", ns);
}

std::string format_byte_size(std::uint64_t bytes) {
  // The shortest exact spelling, binary or decimal: "256MiB", "512MB", "4097".
  std::string best = std::to_string(bytes);
  static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 8> kUnits{{{"TiB", 1ull << 40},
                                                                                     {"GiB", 1ull << 30},
                                                                                     {"MiB", 1ull << 20},
                                                                                     {"KiB", 1ull << 10},
                                                                                     {"TB", 1'000'000'000'000},
                                                                                     {"GB", 1'000'000'000},
                                                                                     {"MB", 1'000'000},
                                                                                     {"KB", 1'000}}};
  for (const auto& [unit, scale] : kUnits) {
    if (bytes == 0 || bytes % scale != 0) continue;
    std::string text = fmt::format("{}{}", bytes / scale, unit);
    if (text.size() < best.size()) best = std::move(text);
  }
  return best;
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
