#include "file_io.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

#include "located_error.hpp"
#include "qload/io/input_file.hpp"

namespace qload::formats {

Result<OpenedFile> open_regular_file(const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(io::RegularFile opened, io::open_regular(path));
  return OpenedFile{.fd = std::move(opened.fd), .size = opened.identity.size, .identity = opened.identity};
}

Status pread_exact(int fd, std::span<std::byte> out, std::uint64_t offset, const std::string& path) {
  std::size_t done = 0;
  while (done < out.size()) {
    // Linux transfers at most 0x7ffff000 bytes per call.
    const std::size_t want = std::min<std::size_t>(out.size() - done, 0x7ffff000);
    const ssize_t got = ::pread(fd, out.data() + done, want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return fail(Error::from_errno(errno, "pread").with_file(path).with_offset(offset + done));
    if (got == 0)
      return fail(located(Errc::kTruncated,
                          fmt::format("file ended after {} of {} bytes read at offset {}", done, out.size(), offset),
                          path, {}, offset + done));
    done += static_cast<std::size_t>(got);
  }
  return {};
}

Result<std::vector<std::byte>> allocate_bytes(std::uint64_t n, const std::string& path) {
  try {
    return std::vector<std::byte>(n);
  } catch (const std::bad_alloc&) {
    return fail(located(Errc::kOutOfMemory, fmt::format("cannot allocate {} bytes", n), path));
  } catch (const std::length_error&) {
    return fail(located(Errc::kOutOfMemory, fmt::format("cannot allocate {} bytes", n), path));
  }
}

Result<std::vector<std::byte>> read_small_file(const std::string& path, std::uint64_t max_bytes) {
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_regular_file(path));
  return read_small_file(file, path, max_bytes);
}

Result<std::vector<std::byte>> read_small_file(const OpenedFile& file, const std::string& path,
                                               std::uint64_t max_bytes) {
  if (file.size > max_bytes)
    return fail(located(Errc::kUnsupported,
                        fmt::format("file is {} bytes; qload reads at most {} bytes of it", file.size, max_bytes),
                        path));
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, allocate_bytes(file.size, path));
  QLOAD_TRY(pread_exact(file.fd.get(), bytes, 0, path));
  return bytes;
}

}  // namespace qload::formats
