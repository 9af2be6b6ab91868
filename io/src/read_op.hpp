// The engine-independent part of executing one ReadRequest: splitting it into kernel read
// ops (direct body, buffered head and tail, 0x7ffff000 clamp) and interpreting each op's
// result (continue short reads, retry EINTR/EAGAIN/EIO, turn the rest into errors). Both
// engines run requests through this, which is what makes them byte-identical.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>

#include "qload/io/reader.hpp"

namespace qload::io::detail {

// One kernel read: `length` bytes at file `offset` into `dest`.
struct Segment {
  bool direct = false;  // issue on the O_DIRECT descriptor
  std::uint64_t offset = 0;
  std::byte* dest = nullptr;
  std::uint32_t length = 0;
};

struct ReadOp {
  ReadRequest request;
  std::uint64_t done = 0;          // bytes in place
  std::uint32_t retries = 0;       // consecutive EINTR/EAGAIN on the current segment
  std::uint32_t eio_attempts = 0;  // EIO retries spent by this request
  bool buffered_only = false;      // direct I/O given up for the rest of this request
  Segment current;                 // the op in flight
};

// Picks the next kernel read for `op` and stores it in op.current.
const Segment& next_segment(ReadOp& op, const InputFile& file);

enum class Step { kContinue, kDone, kFailed };

// Interprets `result` (bytes read, or -errno) of op.current, after passing it through the
// fault injector if one is set. On kFailed, `*error` holds the error naming file and offset.
Step on_result(ReadOp& op, const InputFile& file, int result, const ReaderOptions& options, ReaderStats& stats,
               std::optional<Error>* error);

// Checks a request against the files known to an engine.
Status validate(const ReadRequest& request, const std::deque<InputFile>& files);

}  // namespace qload::io::detail
