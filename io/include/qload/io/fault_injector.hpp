// Fault injection for tests: sits between the kernel's answer to a read op and the engine
// that handles it, so both engines' retry and error paths run on real files.
//
// A rule fires on a read op either because the op covers a chosen file offset, or because it
// is the N-th op the injector has seen (for SQLite-style sweeps that fail every op in turn).
// Thread-safe: the pread engine calls it from its workers.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace qload::io {

enum class FaultKind : std::uint8_t {
  kShortRead,  // the op returns half of what it read (or `short_bytes`, if set)
  kEintr,      // the op fails with EINTR (must be retried)
  kEagain,     // the op fails with EAGAIN (must be retried)
  kEio,        // the op fails with EIO (bounded retry, then an error)
  kEnomem,     // the op fails with ENOMEM (an error)
  kFlipByte,   // the op succeeds but one byte of the destination is inverted
};

struct FaultRule {
  FaultKind kind = FaultKind::kEio;
  // Fires on ops of this file (any file if unset)...
  std::optional<std::uint32_t> file;
  // ...whose byte range contains this offset, or, if unset, on the op numbered `nth_op`.
  std::optional<std::uint64_t> offset;
  std::uint64_t nth_op = 0;
  // How many times the rule may fire; kAlways for a persistent fault.
  std::uint32_t times = 1;
  // For kShortRead: the byte count the op reports instead (if smaller than what it read).
  std::optional<std::uint32_t> short_bytes;
  static constexpr std::uint32_t kAlways = 0xffffffffu;
};

class FaultInjector {
 public:
  void add(FaultRule rule);

  // Given an op on `file` at `offset` whose kernel result is `result` (bytes, or -errno) with
  // `dest` its destination, returns the result the engine should see; may modify dest.
  int apply(std::uint32_t file, std::uint64_t offset, std::span<std::byte> dest, int result);

  std::uint64_t ops_seen() const;
  std::uint64_t fired() const;

 private:
  mutable std::mutex mutex_;
  std::vector<FaultRule> rules_;
  std::uint64_t ops_seen_ = 0;
  std::uint64_t fired_ = 0;
};

}  // namespace qload::io
