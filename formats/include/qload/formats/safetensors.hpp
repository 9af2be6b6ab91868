// The safetensors header parser: pure functions over bytes (for tests and fuzzers) and one
// that reads a file's header with pread.
//
// A header is accepted only if it passes every rule of the format (docs/formats.md lists them
// in the order they are checked). Each rejection is a typed Error naming the file, the tensor
// (where one is involved) and the absolute byte offset in the file where the problem is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/header_limits.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

struct SafetensorsLimits {
  // The format's own cap on the header length N (the reference rejects larger headers).
  std::uint64_t max_header_bytes = kMaxHeaderBytes;
  // qload's cap on entries, checked before each entry is stored, so a header of millions of
  // tiny aliasing entries costs bounded memory (security.md, test 38). kUnsupported beyond.
  std::uint64_t max_tensors = kMaxHeaderEntries;
};

struct SafetensorsHeader {
  std::uint64_t file_size = 0;
  std::uint64_t header_bytes = 0;               // N, the JSON length including padding
  std::uint64_t data_offset = 0;                // 8 + N: where the data buffer starts
  std::map<std::string, std::string> metadata;  // __metadata__
  // Every tensor with `file` = 0 and absolute offsets (8 + N + BEGIN), sorted by (offset,
  // nbytes, name): a zero-size tensor sorts before the tensor that starts at the same byte.
  std::vector<TensorEntry> tensors;
};

// Validates `header_json` (the N bytes after the length field) of a file of `file_size`
// bytes. `path` only labels errors. Never throws.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> header_json, std::uint64_t file_size,
                                                   const std::string& path, const SafetensorsLimits& limits = {});

// The same over a whole file held in memory (length field included): the fuzzing entry point.
Result<SafetensorsHeader> parse_safetensors_bytes(std::span<const std::byte> file_bytes, const std::string& path,
                                                  const SafetensorsLimits& limits = {});

// Opens `path` (a regular file; FIFOs and devices are refused without blocking), reads the
// length field and the header with pread, and validates them. The header buffer is allocated
// only after N has been checked against the limit and the file size.
Result<SafetensorsHeader> read_safetensors_header(const std::string& path, const SafetensorsLimits& limits = {});

}  // namespace qload::formats
