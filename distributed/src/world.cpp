#include "qload/distributed/world.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <string_view>

#include <fmt/format.h>

#include "qload/runtime/unique_fd.hpp"

namespace qload::distributed {
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

// The first line of the token file, after checking that only its owner can read it.
Result<std::string> read_token_file(const std::string& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return fail(Error::from_errno(errno, "QLOAD_WORLD_TOKEN_FILE: open").with_file(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return fail(Error::from_errno(errno, "QLOAD_WORLD_TOKEN_FILE: stat").with_file(path));
  if (!S_ISREG(st.st_mode)) return fail(bad("QLOAD_WORLD_TOKEN_FILE", fmt::format("{} is not a regular file", path)));
  if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid())
    return fail(Error(Errc::kPermissionDenied,
                      fmt::format("environment variable QLOAD_WORLD_TOKEN_FILE: {} is mode {:04o}, owner uid {}: a "
                                  "world token must be readable by its owner only (chmod 600)",
                                  path, st.st_mode & 07777, st.st_uid))
                    .with_file(path));
  std::string text(4096, '\0');
  const ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (n < 0) return fail(Error::from_errno(errno, "QLOAD_WORLD_TOKEN_FILE: read").with_file(path));
  text.resize(static_cast<std::size_t>(n));
  return text.substr(0, text.find_first_of("\r\n"));
}

Result<std::string> token_from_env(const EnvLookup& env) {
  const char* direct = env("QLOAD_WORLD_TOKEN");
  const char* file = env("QLOAD_WORLD_TOKEN_FILE");
  const bool has_direct = direct != nullptr && *direct != '\0', has_file = file != nullptr && *file != '\0';
  if (has_direct && has_file)
    return fail(bad("QLOAD_WORLD_TOKEN", "and QLOAD_WORLD_TOKEN_FILE are both set: give the token one way"));
  std::string token;
  if (has_direct) token = direct;
  if (has_file) {
    QLOAD_ASSIGN_OR_RETURN(token, read_token_file(file));
  }
  if ((has_direct || has_file) && token.size() < kMinWorldTokenBytes)
    return fail(bad(has_direct ? "QLOAD_WORLD_TOKEN" : "QLOAD_WORLD_TOKEN_FILE",
                    fmt::format("the token is {} bytes; at least {} (e.g. `openssl rand -hex 32`)", token.size(),
                                kMinWorldTokenBytes)));
  return token;
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
  w.master_addr = addr == nullptr ? "" : addr;
  QLOAD_ASSIGN_OR_RETURN(w.token, token_from_env(env));
  if (w.token.empty() && !w.one_node())
    return fail(bad("QLOAD_WORLD_TOKEN",
                    fmt::format("is required for a world over several nodes (WORLD_SIZE {}, LOCAL_WORLD_SIZE {}): "
                                "give every rank the same secret, e.g. from `openssl rand -hex 32`, in "
                                "QLOAD_WORLD_TOKEN or a file named by QLOAD_WORLD_TOKEN_FILE",
                                w.size, w.local_size)));
  if (const char* dir = env("XDG_RUNTIME_DIR"); dir != nullptr) w.runtime_dir = dir;
  if (w.master_addr.empty() && !w.one_node())
    return fail(bad("MASTER_ADDR", fmt::format("is required for a world over several nodes (WORLD_SIZE {}, "
                                               "LOCAL_WORLD_SIZE {}): rank 0's address",
                                               w.size, w.local_size)));
  QLOAD_ASSIGN_OR_RETURN(w, complete_world(std::move(w)));
  return std::optional<World>(std::move(w));
}

Result<World> complete_world(World w) {
  if (w.size == 0 || w.rank >= w.size || w.local_size == 0 || w.local_rank >= w.local_size || w.local_size > w.size)
    return fail(Errc::kInvalidArgument,
                fmt::format("world: rank {} of {}, local rank {} of {}", w.rank, w.size, w.local_rank, w.local_size));
  if (w.size == 1) return w;
  if (w.master_addr.empty() && !w.one_node())
    return fail(Errc::kInvalidArgument,
                fmt::format("world: a world over several nodes (size {}, {} on this node) needs rank 0's address "
                            "(MASTER_ADDR)",
                            w.size, w.local_size));
  if (w.master_addr.empty()) w.master_addr = "127.0.0.1";  // one node: rank 0 is this machine
  if (!w.token.empty() && w.token.size() < kMinWorldTokenBytes)
    return fail(Errc::kInvalidArgument,
                fmt::format("world: the token is {} bytes; at least {}", w.token.size(), kMinWorldTokenBytes));
  if (w.token.empty() && !w.one_node())
    return fail(Errc::kInvalidArgument,
                fmt::format("world: a world over several nodes (size {}, {} on this node) needs a token", w.size,
                            w.local_size));
  return w;
}

}  // namespace qload::distributed
