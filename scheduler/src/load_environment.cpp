// Environment overrides for LoadOptions: each knob a typed field with a default, overridable
// from the environment; a variable that contradicts an explicit setting is an error.
#include <charconv>
#include <functional>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "qload/scheduler/load.hpp"

namespace qload::scheduler {
namespace {

// "123", "64KiB", "16MiB", "1GiB" (binary units; "K", "M", "G" too).
Result<std::uint64_t> parse_bytes(std::string_view name, std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  int shift = -1;
  if (unit.empty()) shift = 0;
  if (unit == "K" || unit == "KiB") shift = 10;
  if (unit == "M" || unit == "MiB") shift = 20;
  if (unit == "G" || unit == "GiB") shift = 30;
  if (ec != std::errc{} || end == text.data() || shift < 0 || value > (UINT64_MAX >> shift))
    return fail(Errc::kInvalidArgument, fmt::format("{}='{}' is not a byte count (e.g. 256MiB)", name, text));
  return value << shift;
}

// Sets `field` from variable `name` unless it was set away from `default_value` to
// something else.
template <typename T>
Status override_field(const char* name, const char* text, T parsed, T& field, T default_value) {
  if (field != default_value && field != parsed)
    return fail(Errc::kInvalidArgument, fmt::format("{}={} conflicts with the value {} set by the caller", name, text,
                                                    static_cast<std::uint64_t>(field)));
  field = parsed;
  return {};
}

}  // namespace

Status LoadOptions::apply_environment(const std::function<const char*(const char*)>& env) {
  const LoadOptions defaults;
  QLOAD_TRY(io.apply_environment(env));
  if (const char* v = env("QLOAD_LOAD_MODE"); v != nullptr && *v != '\0') {
    const std::string_view text(v);
    if (text != "read" && text != "mmap")
      return fail(Errc::kInvalidArgument, fmt::format("QLOAD_LOAD_MODE='{}' (expected read or mmap)", text));
    const LoadMode mode = text == "mmap" ? LoadMode::kMmap : LoadMode::kRead;
    QLOAD_TRY(override_field("QLOAD_LOAD_MODE", v, mode, plan.mode, defaults.plan.mode));
  }
  for (auto [name, field, default_value] :
       {std::tuple{"QLOAD_STAGING_BYTES", &staging.total_bytes, defaults.staging.total_bytes},
        std::tuple{"QLOAD_SLOT_BYTES", &staging.slot_bytes, defaults.staging.slot_bytes}}) {
    const char* v = env(name);
    if (v == nullptr || *v == '\0') continue;
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t bytes, parse_bytes(name, v));
    QLOAD_TRY(override_field(name, v, bytes, *field, default_value));
  }
  for (auto [name, field, default_value] :
       {std::tuple{"QLOAD_READS_IN_FLIGHT", &reads_in_flight, defaults.reads_in_flight},
        std::tuple{"QLOAD_CPU_WORKERS", &cpu_workers, defaults.cpu_workers}}) {
    const char* v = env(name);
    if (v == nullptr || *v == '\0') continue;
    QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, parse_bytes(name, v));
    if (n == 0 || n > 4096 || std::string_view(v).find_first_not_of("0123456789") != std::string_view::npos)
      return fail(Errc::kInvalidArgument, fmt::format("{}='{}' is not a count in 1..4096", name, v));
    QLOAD_TRY(override_field(name, v, static_cast<std::uint32_t>(n), *field, default_value));
  }
  return {};
}

}  // namespace qload::scheduler
