// What a model directory holds and which of its files make the checkpoint:
//   1. exactly one `*.safetensors.index.json`: a sharded checkpoint (two or more: an error
//      listing them, since picking one would be a guess);
//   2. else `model.safetensors`, or the only `*.safetensors`: a single file;
//   3. else every `*.safetensors`, in name order.
// Hidden files (a leading '.') are never part of a checkpoint: writers use them for temp files.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "path_guard.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

inline constexpr std::string_view kSafetensorsSuffix = ".safetensors";
inline constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
// Names matching either suffix that one directory may hold (bounds memory for the listing).
inline constexpr std::size_t kMaxDirectoryFiles = 100'000;
inline constexpr std::uint64_t kMaxConfigBytes = 16ull << 20;

struct ModelLayout {
  std::optional<std::string> index;  // file name of the index, when sharded
  std::vector<std::string> files;    // file names of the data files, unless sharded
};

Result<ModelLayout> choose_layout(const std::filesystem::path& dir);

// Whether `dir` has at least one file matching either suffix (cheap: stops at the first).
bool has_safetensors_files(const std::filesystem::path& dir);

// Reads the model directory's `config.json` when present into catalog.config_json, and its
// `quantization_config` object (re-serialised) into catalog.quantization_config. The file
// must be a JSON object of at most kMaxConfigBytes, opened with open_inside (kCorrupt when it
// resolves outside the directory).
Status read_model_config(const ModelRoot& root, Catalog& catalog);
// The same over config.json's text (`resolved_path` labels errors): the fuzzing entry point.
Status set_model_config(std::string text, const std::string& resolved_path, Catalog& catalog);

}  // namespace qload::formats
