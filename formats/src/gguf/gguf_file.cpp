// Reading a GGUF header from a file: the first MiB, then more as the parser asks for it.
#include <algorithm>

#include <fmt/format.h>

#include "gguf_file.hpp"

#include "../located_error.hpp"

namespace qload::formats {

Result<GgufHeader> read_gguf_header(const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(const OpenedFile file, open_regular_file(path));
  return read_gguf_header(file, path);
}

Result<GgufHeader> read_gguf_header(const OpenedFile& file, const std::string& path) {
  std::uint64_t want = std::min<std::uint64_t>(file.size, std::uint64_t{1} << 20);
  for (;;) {
    QLOAD_ASSIGN_OR_RETURN(std::vector<std::byte> prefix, allocate_bytes(want, path));
    QLOAD_TRY(pread_exact(file.fd.get(), prefix, 0, path));
    std::uint64_t wanted = 0;
    Result<GgufHeader> header = parse_gguf_bytes(prefix, file.size, path, &wanted);
    if (header || wanted <= want) return header;
    if (wanted > kMaxGgufHeaderBytes)
      return fail(
          located(Errc::kUnsupported, fmt::format("a GGUF header of more than {} bytes", kMaxGgufHeaderBytes), path));
    want = std::min(file.size, std::max(wanted, want * 2));
  }
}

}  // namespace qload::formats
