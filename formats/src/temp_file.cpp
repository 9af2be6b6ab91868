#include "temp_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <utility>

namespace qload::formats {

Result<TempFile> TempFile::create_for(const std::string& final_path) {
  const std::filesystem::path target(final_path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string pattern = (dir / ("." + target.filename().string() + ".qload-tmp-XXXXXX")).string();
  TempFile file;
  file.fd_.reset(::mkostemp(pattern.data(), O_CLOEXEC));
  if (!file.fd_) return fail(Error::from_errno(errno, "create temp file").with_file(final_path));
  file.temp_path_ = std::move(pattern);
  file.final_path_ = final_path;
  // mkostemp makes 0600; outputs are ordinary readable files.
  if (::fchmod(file.fd_.get(), 0644) != 0) return fail(Error::from_errno(errno, "fchmod").with_file(final_path));
  return file;
}

TempFile::TempFile(TempFile&& other) noexcept
    : fd_(std::move(other.fd_)),
      temp_path_(std::exchange(other.temp_path_, {})),
      final_path_(std::move(other.final_path_)),
      written_(other.written_) {}

TempFile& TempFile::operator=(TempFile&& other) noexcept {
  if (this != &other) {
    discard();
    fd_ = std::move(other.fd_);
    temp_path_ = std::exchange(other.temp_path_, {});
    final_path_ = std::move(other.final_path_);
    written_ = other.written_;
  }
  return *this;
}

TempFile::~TempFile() {
  discard();
}

void TempFile::discard() noexcept {
  fd_.reset();
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

Status TempFile::append(std::span<const std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(Error::from_errno(errno, "write").with_file(final_path_).with_offset(written_ + done));
    done += static_cast<std::size_t>(n);
  }
  written_ += done;
  return {};
}

Status TempFile::commit() {
  if (::fsync(fd_.get()) != 0) return fail(Error::from_errno(errno, "fsync").with_file(final_path_));
  // close can report a deferred write error (NFS); the descriptor is gone either way.
  if (::close(fd_.release()) != 0) return fail(Error::from_errno(errno, "close").with_file(final_path_));
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
    return fail(Error::from_errno(errno, "rename into place").with_file(final_path_));
  temp_path_.clear();  // committed: the destructor must not remove anything now
  // Make the rename itself durable. The file is complete at this point, so a failure here is
  // reported but nothing is removed.
  const std::filesystem::path parent = std::filesystem::path(final_path_).parent_path();
  const UniqueFd dir(::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir || ::fsync(dir.get()) != 0) return fail(Error::from_errno(errno, "fsync directory").with_file(final_path_));
  return {};
}

}  // namespace qload::formats
