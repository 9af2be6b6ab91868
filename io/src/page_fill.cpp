#include "page_fill.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string>

#include "qload/io/reader.hpp"

namespace qload::io::detail {
namespace {

#ifndef UFFD_USER_MODE_ONLY
constexpr int UFFD_USER_MODE_ONLY = 1;
#endif

// UFFDIO_COPY moves at most this much per call, so a page already present part-way costs
// little of the work done before it, and registration covers one piece at a time.
constexpr std::uint64_t kPiece = std::uint64_t{2} << 20;

std::uint64_t page_size() noexcept {
  static const std::uint64_t size = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

bool huge_pages_always() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(in, mode);
  return mode.find("[always]") != std::string::npos;
}

// Whether the first page of `pages` is already in memory (then the rest likely is too: a
// buffer being reused, such as the staging pool), so that registering would be wasted.
bool first_page_present(std::span<std::byte> pages) noexcept {
  unsigned char resident = 0;
  return ::mincore(pages.data(), page_size(), &resident) == 0 && (resident & 1) != 0;
}

}  // namespace

std::optional<PageFiller> PageFiller::open() {
  if (huge_pages_always()) return std::nullopt;
  const long fd = ::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd < 0) return std::nullopt;
  UniqueFd owned(static_cast<int>(fd));
  uffdio_api api{.api = UFFD_API, .features = 0, .ioctls = 0};
  if (::ioctl(owned.get(), UFFDIO_API, &api) != 0 || (api.ioctls & (std::uint64_t{1} << _UFFDIO_REGISTER)) == 0)
    return std::nullopt;
  return PageFiller(std::move(owned));
}

std::span<std::byte> PageFiller::whole_pages(std::span<std::byte> dest) noexcept {
  const std::uint64_t page = page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(dest.data());
  const std::uintptr_t first = (begin + page - 1) & ~(page - 1);
  const std::uintptr_t last = (begin + dest.size()) & ~(page - 1);
  if (dest.empty() || last <= first) return {};
  return dest.subspan(first - begin, last - first);
}

std::uint64_t PageFiller::fill(std::span<std::byte> pages, const std::byte* src) const noexcept {
  std::uint64_t filled = 0;
  while (filled < pages.size()) {
    const std::span<std::byte> piece = pages.subspan(filled, std::min(kPiece, pages.size() - filled));
    if (first_page_present(piece)) break;
    uffdio_register reg{};
    reg.range = {.start = reinterpret_cast<std::uintptr_t>(piece.data()), .len = piece.size()};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(fd_.get(), UFFDIO_REGISTER, &reg) != 0) break;  // not private anonymous memory
    uffdio_copy copy{};
    copy.dst = reg.range.start;
    copy.src = reinterpret_cast<std::uintptr_t>(src + filled);
    copy.len = piece.size();
    copy.mode = 0;
    // The kernel copies page by page and stops at the first it cannot fill (EEXIST: present
    // already; EFAULT: the source page is gone); `copy.copy` says how far it got. EAGAIN asks
    // to retry after the address space changed.
    std::uint64_t done = 0;
    for (int attempt = 0; attempt < 4 && done < piece.size(); ++attempt) {
      copy.dst = reg.range.start + done;
      copy.src = reinterpret_cast<std::uintptr_t>(src + filled + done);
      copy.len = piece.size() - done;
      copy.copy = 0;
      const int rc = ::ioctl(fd_.get(), UFFDIO_COPY, &copy);
      if (copy.copy > 0) done += static_cast<std::uint64_t>(copy.copy);
      if (rc == 0 || (errno != EAGAIN && copy.copy <= 0)) break;
    }
    // Unregistering wakes any thread that touched a page not filled; it faults it in normally.
    ::ioctl(fd_.get(), UFFDIO_UNREGISTER, &reg.range);
    filled += done;
    if (done < piece.size()) break;
  }
  return filled;
}

}  // namespace qload::io::detail

namespace qload::io {

bool page_filling_available() {
  return detail::PageFiller::open().has_value();
}

}  // namespace qload::io
