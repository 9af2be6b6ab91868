// Small tensors whose bytes describe other tensors (Catalog::embedded), read while the catalog is
// built, by every driver whose files can hold them (safetensors, PyTorch .bin).
#pragma once

#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// Reads every bitsandbytes quant_state tensor (`*.quant_state.bitsandbytes__nf4` / `__fp4`, U8
// JSON: the only record of a 4-bit weight's shape and block size) into catalog.embedded.
// kUnsupported naming it past kEmbeddedMaxBytes or stored as a strided view.
Status read_embedded_metadata(Catalog& catalog);

}  // namespace qload::formats
