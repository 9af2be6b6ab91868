// Small tensors whose bytes describe other tensors (Catalog::embedded), read while the catalog is
// built, by every driver whose files can hold them (safetensors, PyTorch .bin).
#pragma once

#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

// Reads every bitsandbytes quant_state tensor (`*.quant_state.bitsandbytes__nf4` / `__fp4`, U8
// JSON: the only record of a 4-bit weight's shape and block size) and every `*.weight_shape`
// (I64 or I32 [2]: compressed-tensors' (N, K) of a packed weight) into catalog.embedded, each
// file opened once. kUnsupported naming a quant_state past kEmbeddedMaxBytes or stored as a
// strided view; a strided weight_shape is left out (detection then infers K as before).
Status read_embedded_metadata(Catalog& catalog);

}  // namespace qload::formats
