// A file that appears at its final path only when complete (security.md P8): written as a
// hidden temp file in the same directory, then fsync + rename + fsync of the directory.
// Move-only; destroying it uncommitted removes the temp file, so a failure at any step, an
// early return or an exception, leaves nothing behind.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "qload/runtime/error.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::formats {

class TempFile {
 public:
  // Creates `.<name>.qload-tmp-XXXXXX` beside `final_path` (mode 0644 once committed).
  static Result<TempFile> create_for(const std::string& final_path);

  TempFile(TempFile&& other) noexcept;
  TempFile& operator=(TempFile&& other) noexcept;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();

  const std::string& temp_path() const noexcept { return temp_path_; }
  // Appends `bytes`; errors name the final path and the offset in it.
  Status append(std::span<const std::byte> bytes);
  std::uint64_t size() const noexcept { return written_; }
  // fsync, close, rename over the final path, fsync the directory.
  Status commit();

 private:
  TempFile() = default;
  void discard() noexcept;

  UniqueFd fd_;
  std::string temp_path_;  // empty once committed or moved from
  std::string final_path_;
  std::uint64_t written_ = 0;
};

}  // namespace qload::formats
