// Digests read through the same I/O engine a load uses: `qload hash`. For a checkpoint (a
// directory, .safetensors file or index), every file's XXH3-128 (equal to `xxhsum -H2`) and
// every tensor's XXH3-64 over exactly its stored bytes, in one pass; any other file gets its
// file digests only (XXH3-64 equals `xxhsum -H3`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qload/formats/checkpoint_digest.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/session/request.hpp"

namespace qload::session {

struct HashedFile {
  std::string path;
  std::uint64_t bytes = 0;
  io::Xxh128 xxh3_128;
  std::optional<std::uint64_t> xxh3_64;  // of a file that is not a checkpoint's
};

// One path given: its files (several for a sharded checkpoint) and, for a checkpoint, its tensors.
struct HashedSource {
  bool checkpoint = false;
  std::vector<HashedFile> files;
  std::vector<formats::TensorDigestEntry> tensors;  // in catalog order
};

struct Hashes {
  std::string engine;                 // the I/O engine that read them
  std::vector<HashedSource> sources;  // per path, in order
};

// Hashes every path; `flags` are settings (io_engine, ...) above the environment's.
Result<Hashes> hash(const std::vector<std::string>& paths, const std::vector<SettingFlag>& flags, const Logger& log);

}  // namespace qload::session
