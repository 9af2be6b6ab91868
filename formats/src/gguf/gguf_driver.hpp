// The GGUF driver: a `.gguf` file, a directory holding one, or a split GGUF (llama.cpp's
// gguf-split: `<name>-00001-of-0000N.gguf` ... each a whole GGUF file with some of the
// tensors), named by any of its files or by the directory holding exactly those files.
#pragma once

#include "qload/formats/driver.hpp"

namespace qload::formats {

const FormatDriver& gguf_driver();

}  // namespace qload::formats
