// Keeps every file a checkpoint names inside its model directory. Shard names come from an
// untrusted index, so they are checked lexically first (no absolute paths, no `..`), and the
// joined path is then resolved, symlinks included, and must land inside an allowed root.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "file_io.hpp"
#include "qload/runtime/error.hpp"

namespace qload::formats {

struct ModelRoot {
  std::filesystem::path dir;                   // the directory as the user named it
  std::vector<std::filesystem::path> allowed;  // canonical directories files may resolve into
};

// The model directory and where its files may resolve to: the directory itself and, for a
// Hugging Face cache snapshot (`models--<org>--<name>/snapshots/<rev>/`, whose files are symlinks
// to `../../blobs/<hash>`), that repository's `blobs/` directory when it is a directory itself
// (not a link), as huggingface_hub makes it.
Result<ModelRoot> model_root(const std::filesystem::path& dir);

// kCorrupt naming `source` and `tensor` when `name` is empty, absolute, has a `..`
// component, or contains a backslash or a NUL byte.
Status check_relative_name(std::string_view name, const std::string& source, std::string_view tensor);

// `root.dir / name` as a string, after checking that the path resolves inside an allowed root
// (kCorrupt otherwise). A missing file passes here and fails when it is opened. A check on a
// path only: a file of the model directory is then opened with open_inside.
Result<std::string> resolve_inside(const ModelRoot& root, std::string_view name);

// Opens `path` (resolve_inside's result) as open_regular_file does, then checks the descriptor
// itself: where the kernel says it points (/proc/self/fd) must be inside an allowed root
// (kCorrupt otherwise). A symlink renamed over the file after resolve_inside looked cannot
// slip through: no byte is read before this check, and every read then goes through `fd`.
Result<OpenedFile> open_inside(const ModelRoot& root, const std::string& path);

}  // namespace qload::formats
