// How much of a file the page cache holds, without reading it.
#pragma once

#include <cstdint>

#include "qload/runtime/error.hpp"

namespace qload::io {

// Fraction (0..1) of the file's pages resident in the page cache: mincore over a read-only
// mapping, which faults nothing in. An empty file counts as fully resident (nothing to read).
// Linux answers truthfully only for files the caller owns or may write; for others it says
// "all resident", so this can err towards buffered reads, never towards O_DIRECT.
Result<double> page_cache_resident_fraction(int fd, std::uint64_t size);

}  // namespace qload::io
