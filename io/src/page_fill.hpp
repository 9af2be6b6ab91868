// Filling fresh anonymous memory with file bytes the page cache holds, without the kernel
// zeroing each page first.
//
// A buffered read into memory that was never touched (a model's freshly allocated parameters,
// a new arena) makes the kernel fault in every destination page: allocate it, zero it, then
// copy the file's bytes over the zeros. On the 2-core development VM that is most of a warm
// load_into (docs/benchmarks-log.md, 2026-11-29). userfaultfd's UFFDIO_COPY allocates each page
// with the bytes already in it: the pages are registered for missing-page handling, filled from
// a mapping of the file in one call per piece, and unregistered; no fault is ever taken on them.
// Measured on that VM, 424 MB from a warm file into fresh memory on 2 threads: 0.08 s against
// 0.11 s for pread.
//
// Only whole, unpopulated pages of private anonymous memory can be filled this way; anything
// else (a page already present, pinned or file-backed memory, a kernel or seccomp policy
// without userfaultfd) is reported as not filled and the caller reads it as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "qload/runtime/unique_fd.hpp"

namespace qload::io::detail {

class PageFiller {
 public:
  // A userfaultfd for user-mode faults only (which unprivileged processes may open since Linux
  // 5.11), or nullopt where the kernel, a seccomp policy or transparent huge pages set to
  // "always" (whose 2 MiB faults are already cheap, and which filled 4 KiB pages would forgo)
  // rule it out.
  static std::optional<PageFiller> open();

  // Copies src[0, pages.size()) into `pages` (page-aligned, a whole number of pages), page by
  // page in order, as far as it can; returns how many bytes from the front are filled (a
  // multiple of the page size, maybe 0). The caller reads the rest. `src` must stay readable;
  // a page of it the file no longer backs ends the filling there, never faults this process.
  // Safe to call from several threads at once on disjoint `pages`.
  std::uint64_t fill(std::span<std::byte> pages, const std::byte* src) const noexcept;

  // The page-aligned middle of `dest`: the pages fill() could take (maybe none).
  static std::span<std::byte> whole_pages(std::span<std::byte> dest) noexcept;

 private:
  explicit PageFiller(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace qload::io::detail
