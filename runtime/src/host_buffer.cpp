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
    shared_ = std::move(other.shared_);
  }
  return *this;
}

Result<HostBuffer> HostBuffer::allocate(std::size_t size, std::size_t alignment) {
  return map_aligned(size, alignment, -1);
}

Result<HostBuffer> HostBuffer::allocate_shared(std::size_t size, std::size_t alignment) {
  UniqueFd fd(::memfd_create("qload-shared", MFD_CLOEXEC));
  if (!fd) return fail(Error::from_errno(errno, "memfd_create for a shared host buffer"));
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return fail(Error::from_errno(errno, fmt::format("sizing a shared host buffer to {} bytes", size)));
  QLOAD_ASSIGN_OR_RETURN(HostBuffer buf, map_aligned(size, alignment, fd.get()));
  buf.shared_ = std::move(fd);
  return buf;
}

Result<HostBuffer> HostBuffer::map_aligned(std::size_t size, std::size_t alignment, int fd) {
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
  // Anonymous memory is mapped at once; a file's mapping is put over an aligned place in a
  // reservation (munmap of the reservation removes both).
  void* map =
      ::mmap(nullptr, map_bytes, fd < 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return fail(Error::from_errno(errno, fmt::format("mmap of {} bytes for a host buffer", map_bytes)));
  const auto start = reinterpret_cast<std::uintptr_t>(map);
  const auto aligned = (start + alignment - 1) & ~(std::uintptr_t{alignment} - 1);
  if (fd >= 0 && ::mmap(reinterpret_cast<void*>(aligned), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                        0) == MAP_FAILED) {
    const int err = errno;
    ::munmap(map, map_bytes);
    return fail(Error::from_errno(err, fmt::format("mmap of a {} byte shared host buffer", size)));
  }
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
  shared_.reset();
}

}  // namespace qload
