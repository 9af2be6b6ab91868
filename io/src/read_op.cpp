#include "read_op.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include <fmt/format.h>

#include "qload/io/fault_injector.hpp"

namespace qload::io::detail {
namespace {

// Consecutive EINTR/EAGAIN answers after which a read is reported instead of spinning.
constexpr std::uint32_t kMaxConsecutiveRetries = 1000;

std::uint64_t align_down(std::uint64_t value, std::uint64_t alignment) {
  return value & ~(alignment - 1);
}

}  // namespace

const Segment& next_segment(ReadOp& op, const InputFile& file) {
  const std::uint64_t pos = op.request.offset + op.done;
  std::byte* dest = op.request.dest.data() + op.done;
  const std::uint64_t remaining = op.request.dest.size() - op.done;
  const std::uint64_t align = file.direct_alignment();
  Segment seg{false, pos, dest, static_cast<std::uint32_t>(std::min(remaining, kMaxReadBytes))};

  // O_DIRECT works on the stretch where file offset and memory address sit at the same
  // distance from an alignment boundary. A head before it goes through the page cache, then
  // the aligned body goes direct, then the unaligned tail goes through the page cache again.
  if (!op.buffered_only && file.direct_fd() >= 0 && align != 0) {
    const auto addr = reinterpret_cast<std::uintptr_t>(dest);
    if (pos % align == addr % align) {
      const std::uint64_t head = (align - pos % align) % align;
      if (head == 0 && remaining >= align) {
        seg.direct = true;
        seg.length = static_cast<std::uint32_t>(align_down(std::min(remaining, kMaxReadBytes), align));
      } else if (head != 0 && remaining >= head + align) {
        seg.length = static_cast<std::uint32_t>(head);
      }
    }
  }
  op.current = seg;
  return op.current;
}

Step on_result(ReadOp& op, const InputFile& file, int result, const ReaderOptions& options, ReaderStats& stats,
               std::optional<Error>* error) {
  Segment& seg = op.current;
  if (options.faults != nullptr)
    result = options.faults->apply(op.request.file, seg.offset, {seg.dest, seg.length}, result);

  const auto fail_with = [&](Error e) {
    *error = std::move(e).with_offset(seg.offset).with_file(file.path());
    return Step::kFailed;
  };

  if (result == -EINTR || result == -EAGAIN) {
    ++stats.retries;
    if (++op.retries > kMaxConsecutiveRetries)
      return fail_with(Error::from_errno(-result, fmt::format("read gave up after {} retries", op.retries)));
    return Step::kContinue;
  }
  if (result == -EINVAL && seg.direct) {
    // The file system accepted O_DIRECT at open but refuses this read: finish buffered.
    ++stats.retries;
    op.buffered_only = true;
    return Step::kContinue;
  }
  if (result == -EIO && op.eio_attempts < options.eio_retries) {
    ++op.eio_attempts;
    ++stats.retries;
    return Step::kContinue;
  }
  if (result < 0) return fail_with(Error::from_errno(-result, fmt::format("read of {} bytes", seg.length)));
  if (result == 0)
    return fail_with(Error(Errc::kTruncated, fmt::format("file ended {} bytes early (did it shrink during the load?)",
                                                         op.request.dest.size() - op.done)));

  op.retries = 0;
  auto got = static_cast<std::uint64_t>(result);
  if (got < seg.length) {
    ++stats.short_reads;
    if (seg.direct) {
      // Resubmit from the last aligned offset; if not even one block arrived, go buffered.
      got = align_down(got, file.direct_alignment());
      if (got == 0) op.buffered_only = true;
    }
  }
  if (seg.direct) stats.direct_bytes += got;
  op.done += got;
  if (op.done < op.request.dest.size()) return Step::kContinue;
  stats.bytes += op.request.dest.size();
  return Step::kDone;
}

Status validate(const ReadRequest& request, const std::deque<InputFile>& files) {
  if (request.file >= files.size())
    return fail(Errc::kInvalidArgument,
                fmt::format("read names file id {}, but only {} files are open", request.file, files.size()));
  const InputFile& file = files[request.file];
  std::uint64_t end = 0;
  if (__builtin_add_overflow(request.offset, request.dest.size(), &end) || end > file.size())
    return fail(Error(Errc::kTruncated, fmt::format("read of {} bytes ends past the end of the file ({} bytes)",
                                                    request.dest.size(), file.size()))
                    .with_offset(request.offset)
                    .with_file(file.path()));
  return {};
}

}  // namespace qload::io::detail
