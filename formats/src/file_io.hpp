// Plain POSIX reads for headers and small JSON files. Bulk tensor reads are the io layer's job;
// these are the few small reads needed to build a Catalog.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qload/io/input_file.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::formats {

struct OpenedFile {
  UniqueFd fd;
  std::uint64_t size = 0;
  io::FileIdentity identity;  // of `fd`: what the catalog records (CatalogFile::identity)
};

// Opens `path` read-only through io::open_regular: a FIFO planted where a file should be
// cannot hang the open, and anything that is not a regular file is refused (kInvalidArgument).
// Files of a model directory are opened with open_inside (path_guard.hpp) instead.
Result<OpenedFile> open_regular_file(const std::string& path);

// Reads exactly out.size() bytes at `offset`, retrying EINTR and short reads; end of file
// first is kTruncated. Errors name `path` and the offset.
Status pread_exact(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& path);

// A buffer of `n` bytes, or kOutOfMemory (never a bad_alloc).
Result<std::vector<std::byte>> allocate_bytes(std::uint64_t n, const std::string& path);

// The whole of a regular file no larger than `max_bytes` (kUnsupported beyond).
Result<std::vector<std::byte>> read_small_file(const std::string& path, std::uint64_t max_bytes);
// The same through a file already open (`path` names it in errors).
Result<std::vector<std::byte>> read_small_file(const OpenedFile& file, const std::string& path,
                                               std::uint64_t max_bytes);

}  // namespace qload::formats
