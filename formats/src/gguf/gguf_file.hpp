// Reading a GGUF header through a descriptor already open (and, for a model directory's
// files, already checked to be inside it): the catalog reads only the file it checked.
#pragma once

#include <string>

#include "../file_io.hpp"
#include "qload/formats/gguf.hpp"

namespace qload::formats {

// read_gguf_header over `file` (`path` names it in errors).
Result<GgufHeader> read_gguf_header(const OpenedFile& file, const std::string& path);

}  // namespace qload::formats
