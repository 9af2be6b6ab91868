#include "qload/runtime/host_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>

#include <fmt/format.h>

namespace qload {
namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<HostBuffer> HostBuffer::allocate(std::size_t size, std::size_t alignment) {
  if (!std::has_single_bit(alignment))
    return fail(Errc::kInvalidArgument, fmt::format("alignment {} is not a power of two", alignment));
  HostBuffer buf;
  if (size == 0) return buf;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (size >= kHugePage && alignment < kHugePage) alignment = kHugePage;
  if (alignment < page) alignment = page;
  const std::size_t slack = alignment > page ? alignment : 0;
  std::size_t map_bytes = 0;
  if (__builtin_add_overflow(size, slack, &map_bytes))
    return fail(Errc::kOverflow, fmt::format("host buffer of {} bytes is too large", size));
  void* map = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return fail(Error::from_errno(errno, fmt::format("mmap of {} bytes for a host buffer", map_bytes)));
  const auto start = reinterpret_cast<std::uintptr_t>(map);
  const auto aligned = (start + alignment - 1) & ~(std::uintptr_t{alignment} - 1);
  buf.map_ = map;
  buf.map_bytes_ = map_bytes;
  buf.data_ = reinterpret_cast<std::byte*>(aligned);
  buf.size_ = size;
  // Advisory: a kernel without THP simply ignores it.
  if (size >= kHugePage) (void)::madvise(buf.data_, size, MADV_HUGEPAGE);
  return buf;
}

void HostBuffer::reset() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace qload
