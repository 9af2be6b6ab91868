// What a checkpoint holds, from its headers alone: `qload inspect`.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

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

inline constexpr std::string_view kInspectSchema = "qload.inspect/2";

// The inspection as the one JSON document every client gives as it is (`qload inspect --json`,
// Python's qload.inspect, C's qload_inspect_json), versioned by its "schema" field:
// {"schema", "format", "source", "tensor_count", "tensor_bytes",
//  "files": [{"path", "size", "data_offset", "metadata": {key: value}}],
//  "tensors": [{"name", "dtype", "shape", "nbytes", "file" (its path), "offset", "strides" (a
//  strided view only; nbytes is then the span it reads)}],
//  "config" (config.json, parsed; null without one), "quantization_config" (the declared one,
//  parsed; null without one),
//  "quantization": null, or {"method", "config_source", "logical_tensors": [{"name", "scheme",
//  "bits", "group_size", "symmetric", "scales", "scale_dtype", "zero_points", "shape",
//  "parts": {role: stored tensor name}}]}}.
// qload.inspect/1 (the CLI's until 2026-11-29) named nbytes `bytes`, a file's size `bytes`,
// tensor_bytes `total_bytes`, symmetric `sym`, gave a tensor's file as an index and config.json
// only as `has_config`.
nlohmann::json inspection_json(const Inspection& inspection);

}  // namespace qload::session
