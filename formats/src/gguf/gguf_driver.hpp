// The GGUF driver: a `.gguf` file, or a directory holding exactly one (split GGUFs,
// "-00001-of-0000N.gguf", are not read yet).
#pragma once

#include "qload/formats/driver.hpp"

namespace qload::formats {

const FormatDriver& gguf_driver();

}  // namespace qload::formats
