// Turns validated safetensors headers into one Catalog, with the checks that span files:
// a tensor name in two files, and a sharded index that disagrees with its shards.
#pragma once

#include <string>
#include <vector>

#include "file_io.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/formats/safetensors.hpp"
#include "qload/formats/safetensors_index.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

struct LoadedFile {
  std::string path;  // as it will be opened for reading
  SafetensorsHeader header;
  io::FileIdentity identity;  // of the descriptor the header was read through
};

// read_safetensors_header over a file already open (`path` names it in errors).
Result<SafetensorsHeader> read_safetensors_header(const OpenedFile& file, const std::string& path,
                                                  const SafetensorsLimits& limits = {});

// Files in the given order, tensors sorted by (file, offset, nbytes, name), names indexed.
// kCorrupt if a tensor name appears in two files.
Result<Catalog> build_catalog(std::vector<LoadedFile> files, const std::string& source);

// Every shard tensor must be mapped to its own shard; every mapped tensor must exist in the
// shard it is mapped to; metadata.total_size, when present, must equal the sum of tensor bytes.
Status check_against_index(const Catalog& catalog, const std::vector<std::string>& shard_names,
                           const SafetensorsIndex& index, const std::string& index_path);

}  // namespace qload::formats
