// Digests of a whole checkpoint in one pass over its files: each file's XXH3-128 (equal to
// `xxhsum -H2`) and each tensor's XXH3-64 over exactly its stored bytes. What `qload hash`
// prints and what a lockfile records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"

namespace qload::formats {

struct FileDigestEntry {
  std::string path;
  std::uint64_t bytes = 0;
  io::Xxh128 xxh3_128;
};

struct TensorDigestEntry {
  std::string name;
  std::uint64_t xxh3_64 = 0;
};

struct CheckpointDigest {
  std::vector<FileDigestEntry> files;      // in catalog file order
  std::vector<TensorDigestEntry> tensors;  // in catalog tensor order
};

// Reads every file of `catalog` once through `reader`.
Result<CheckpointDigest> digest_checkpoint(io::Reader& reader, const Catalog& catalog,
                                           const io::DigestOptions& options = {});

}  // namespace qload::formats
