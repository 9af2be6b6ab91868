#include "qload/io/page_cache.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace qload::io {

Result<double> page_cache_resident_fraction(int fd, std::uint64_t size) {
  if (size == 0) return 1.0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return fail(Error::from_errno(errno, "mmap to ask the page cache"));
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  const int rc = ::mincore(map, size, resident.data());
  const int err = errno;
  ::munmap(map, size);
  if (rc != 0) return fail(Error::from_errno(err, "mincore"));
  const auto in_cache = std::count_if(resident.begin(), resident.end(), [](unsigned char v) { return (v & 1) != 0; });
  return static_cast<double>(in_cache) / static_cast<double>(resident.size());
}

}  // namespace qload::io
