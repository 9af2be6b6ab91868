#include "qload/dist/world.hpp"

#include <charconv>
#include <string_view>

#include <fmt/format.h>

namespace qload {
namespace {

Error bad(std::string_view name, std::string_view why) {
  return Error(Errc::kInvalidArgument, fmt::format("environment variable {}: {}", name, why));
}

// The variable as a number in [low, high], `fallback` when unset.
Result<std::uint32_t> number(const EnvLookup& env, const char* name, std::uint32_t low, std::uint64_t high,
                             std::optional<std::uint32_t> fallback) {
  const char* text = env(name);
  if (text == nullptr || *text == '\0') {
    if (fallback) return *fallback;
    return fail(bad(name, "is required when WORLD_SIZE is above 1"));
  }
  const std::string_view s(text);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return fail(bad(name, fmt::format("'{}' is not a number", s)));
  if (value < low || value > high) return fail(bad(name, fmt::format("{} is outside {}..{}", value, low, high)));
  return static_cast<std::uint32_t>(value);
}

}  // namespace

Result<std::optional<World>> world_from_env(const EnvLookup& env) {
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t size, number(env, "WORLD_SIZE", 1, 1u << 20, 1u));
  if (size == 1) return std::optional<World>();
  World w;
  w.size = size;
  QLOAD_ASSIGN_OR_RETURN(w.rank, number(env, "RANK", 0, size - 1, std::nullopt));
  QLOAD_ASSIGN_OR_RETURN(w.local_size, number(env, "LOCAL_WORLD_SIZE", 1, size, size));
  QLOAD_ASSIGN_OR_RETURN(w.local_rank, number(env, "LOCAL_RANK", 0, w.local_size - 1, w.rank % w.local_size));
  QLOAD_ASSIGN_OR_RETURN(const std::uint32_t port, number(env, "MASTER_PORT", 1, 65535, 29500u));
  w.master_port = static_cast<std::uint16_t>(port);
  const char* addr = env("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') return fail(bad("MASTER_ADDR", "is required when WORLD_SIZE is above 1"));
  w.master_addr = addr;
  return std::optional<World>(std::move(w));
}

}  // namespace qload
