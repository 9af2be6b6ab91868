// Lockfiles: proof that an experiment loaded exactly the weights it thinks it did.
//
// A lock records the qload version, the recipe's hash (its text and every helper module it
// required), the plan's hash (what goes where, decoded how: `qload plan`), and every file's
// size and XXH3-128 and every tensor's XXH3-64, with paths relative to the checkpoint's root
// so a copy of the model elsewhere still matches. `qload lock` writes one; `qload load
// --locked` refuses to expose any tensor when anything differs; `qload verify` re-hashes the
// files against one. The format is JSON ("schema": "qload.lock/1"), stable and diffable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/checkpoint_digest.hpp"
#include "qload/runtime/error.hpp"

namespace qload::session {

struct LockedFile {
  std::string path;  // relative to the checkpoint's root
  std::uint64_t bytes = 0;
  std::string xxh3_128;  // 32 hex digits, as `xxhsum -H2` prints
};

struct Lockfile {
  std::string qload_version;
  std::string recipe;                        // the recipe as given when locked; empty for a plain path
  std::optional<std::uint64_t> recipe_hash;  // Recipe::hash
  std::uint64_t plan_hash = 0;
  std::vector<LockedFile> files;                              // in catalog order
  std::map<std::string, std::uint64_t, std::less<>> tensors;  // stored tensor -> XXH3-64 of its bytes
};

// kNotFound for a missing file; kInvalidArgument for one that is not a regular file (a FIFO is
// refused without blocking); kCorrupt naming the lock file and the field for anything
// malformed (the strict JSON reader's refusals, unknown schema, missing or mistyped fields,
// a size that is not a whole number, bad hex). Errors never quote the file's bytes.
Result<Lockfile> read_lockfile(const std::string& path);
// The same over the text of a lockfile; `path` only labels errors (the fuzzing entry point).
Result<Lockfile> parse_lockfile(std::string_view text, const std::string& path);
// Written atomically (a temporary file renamed over `path`).
Status write_lockfile(const std::string& path, const Lockfile& lock);

// The path of catalog file `file` relative to the root of `catalog.source` (the directory
// itself, or the folder of a file or index).
std::string path_in_checkpoint(const formats::Catalog& catalog, const std::string& file);

// A lock of `catalog` from its digests (recipe and plan fields left for the caller).
Lockfile lock_checkpoint(const formats::Catalog& catalog, const formats::CheckpointDigest& digest);

// What differs between `lock` and the checkpoint, one line each, comparing what is known
// without reading tensor bytes: the files (names, sizes) and tensor names. With `digest`,
// also every file's XXH3-128 and every tensor's XXH3-64. Empty: they match.
std::vector<std::string> lock_differences(const Lockfile& lock, const formats::Catalog& catalog,
                                          const formats::CheckpointDigest* digest = nullptr);

}  // namespace qload::session
