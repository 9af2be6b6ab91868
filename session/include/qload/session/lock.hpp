// Lockfiles (docs/recipes.md): making one for a load, and re-hashing a checkpoint against one.
// Loading under a lock is part of every load (request.hpp apply_lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/session/lockfile.hpp"
#include "qload/session/request.hpp"

namespace qload::session {

// Plans `spec` and hashes every file (XXH3-128) and tensor (XXH3-64) once, through the load's
// I/O engine: the lock for it, with the recipe and plan hashes. kInvalidArgument in a
// multi-process world (WORLD_SIZE > 1): a lock records a single-process plan, and every rank
// of a multi-process load can then load with it.
Result<Lockfile> make_lock(const LoadSpec& spec, const Logger& log);
// Writes `lock` to `path` (lockfile.hpp's format).
Status write_lock(const Lockfile& lock, const std::string& path);

struct Verification {
  std::vector<std::string> differences;  // empty: everything matches
  std::size_t files = 0;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;  // of the files re-hashed
};
// Re-hashes `request`'s checkpoint and compares it (and the recipe's hash) with `lock_file`.
// Differences are a result, not an error; an unreadable lock or checkpoint is an error.
Result<Verification> verify(const LoadRequest& request, const std::string& lock_file);

}  // namespace qload::session
