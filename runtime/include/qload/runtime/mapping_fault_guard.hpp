// Reading a file through a mapping while someone truncates the file raises SIGBUS, which would
// kill the process (and with it an inference server). guarded_mapped_read runs one read of
// mapped bytes so that such a fault becomes an error naming the file instead.
//
// How: a SIGBUS handler, installed once per process and chained to whatever handler was there
// before, jumps back (siglongjmp) into the guarded call when the faulting address lies in the
// range the calling thread declared; any other SIGBUS goes to the previous handler or kills the
// process as before. The signal disposition is process-wide by nature: this is the one piece
// of process state qload installs, and it changes nothing for faults outside guarded reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "qload/runtime/error.hpp"

namespace qload {

// A read of mapped bytes: `read(context)`. It must be plain code that owns nothing with a
// destructor, takes no lock and allocates nothing: a fault leaves it midway (siglongjmp).
using MappedReadFn = void (*)(void* context);

// Runs read(context), which may touch only `range`: bytes of a file mapping of `path` that
// start at `file_offset` in the file. A SIGBUS at an address in `range` (the file shrank under
// the mapping) returns kFileChanged naming `path` and the file offset of the faulting page.
// Safe from any number of threads at once; not nested within one thread.
Status guarded_mapped_read(std::span<const std::byte> range, std::string_view path, std::uint64_t file_offset,
                           MappedReadFn read, void* context);

}  // namespace qload
