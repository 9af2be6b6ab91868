// What a checkpoint holds, from its headers alone: `qload inspect`.
#pragma once

#include <string>

#include "qload/formats/catalog.hpp"
#include "qload/formats/quant.hpp"
#include "qload/runtime/error.hpp"

namespace qload::session {

struct Inspection {
  formats::Catalog catalog;         // files, tensors, metadata, config
  formats::QuantizedCatalog quant;  // the quantized weights detected (method empty: none)
};

// Opens `source` (file, directory or index json) and detects its quantization. A detection
// error is an error: inspecting exists to say what is wrong with a checkpoint.
Result<Inspection> inspect(const std::string& source);

}  // namespace qload::session
