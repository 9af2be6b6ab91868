// The file-level header reader: 8 bytes of length, then exactly N bytes of header, both with
// pread; nothing of size N is allocated before N passed the limit and the file-size checks.
#include <array>

#include "file_io.hpp"
#include "header_length.hpp"
#include "qload/formats/safetensors.hpp"
#include "safetensors_catalog.hpp"

namespace qload::formats {

Result<SafetensorsHeader> read_safetensors_header(const std::string& path, const SafetensorsLimits& limits) {
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_regular_file(path));
  return read_safetensors_header(file, path, limits);
}

Result<SafetensorsHeader> read_safetensors_header(const OpenedFile& file, const std::string& path,
                                                  const SafetensorsLimits& limits) {
  QLOAD_TRY(check_length_field(file.size, path));
  std::array<std::byte, 8> length{};
  QLOAD_TRY(pread_exact(file.fd.get(), length, 0, path));
  const std::uint64_t n = decode_le64(length);
  QLOAD_TRY(check_header_length(n, file.size, path, limits));
  QLOAD_ASSIGN_OR_RETURN(std::vector<std::byte> header, allocate_bytes(n, path));
  QLOAD_TRY(pread_exact(file.fd.get(), header, kLengthFieldBytes, path));
  return parse_safetensors_header(header, file.size, path, limits);
}

}  // namespace qload::formats
