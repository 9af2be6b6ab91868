#include "qload/runtime/mapped_region.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

namespace qload {

MappedRegion& MappedRegion::operator=(MappedRegion&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Result<MappedRegion> MappedRegion::map(int fd, std::uint64_t offset, std::uint64_t bytes, const std::string& path) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  if (offset % page != 0)
    return fail(Error(Errc::kInvalidArgument, fmt::format("mapping offset {} is not page-aligned", offset))
                    .with_file(path)
                    .with_offset(offset));
  MappedRegion region;
  if (bytes == 0) return region;
  if (bytes > SIZE_MAX || offset > static_cast<std::uint64_t>(INT64_MAX))
    return fail(Error(Errc::kOverflow, fmt::format("cannot map {} bytes at {}", bytes, offset)).with_file(path));
  void* p = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
                   static_cast<off_t>(offset));
  if (p == MAP_FAILED) return fail(Error::from_errno(errno, "mmap").with_file(path).with_offset(offset));
  region.data_ = static_cast<std::byte*>(p);
  region.bytes_ = bytes;
  return region;
}

void MappedRegion::will_need() const noexcept {
  if (data_ != nullptr) (void)::madvise(data_, bytes_, MADV_WILLNEED);
}

void MappedRegion::reset() noexcept {
  if (data_ != nullptr) ::munmap(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace qload
