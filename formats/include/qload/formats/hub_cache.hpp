// Hugging Face model ids ("org/name", "org/name@revision") resolved through the local
// Hugging Face cache, offline, as huggingface_hub's snapshot_download(local_files_only=True)
// resolves them: <cache>/models--org--name/refs/<revision> holds a commit hash (a 40-hex
// revision is the commit itself), and <cache>/models--org--name/snapshots/<commit>/ is the model
// directory, its files symlinks into ../../blobs/. Nothing is downloaded here.
//
// A path that exists always wins over an id: only a source that does not exist and matches the
// id grammar is looked up. All functions are pure apart from reading the cache's folders (and,
// for the ones without a cache argument, the environment): thread-safe, no state kept.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "qload/runtime/error.hpp"

namespace qload::formats {

// A model id as qload accepts it.
struct HubId {
  std::string repo;      // "org/name"
  std::string revision;  // a branch, tag or commit; "main" when none was given
};

// The id `source` spells, or nullopt. An id is `org/name` with an optional `@revision`: org and
// name as huggingface_hub's validate_repo_id takes them (ASCII letters, digits, '-', '_', '.';
// 1 to 96 characters each; first and last a letter, digit or '_'; no "--" or ".."; not ending
// in ".git"), and a revision of the same characters and '/' (as in "refs/pr/1"), at most 255
// bytes, with no empty, "." or ".." component. Only the grammar: the filesystem is not looked at.
// A bare `name` (no org) is not taken as an id: it is too easily a mistyped file name.
std::optional<HubId> parse_hub_id(std::string_view source);

// Looks a variable up; null when unset (std::getenv in clients, a map in tests).
using EnvLookup = std::function<const char*(const char*)>;

// The cache folder huggingface_hub 2.x uses (its constants.py): HF_HUB_CACHE, else the legacy
// HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub; '~' and $VAR / ${VAR} expanded as Python's os.path.expanduser and
// expandvars do. A variable set to the empty string counts as set, as it does there.
std::filesystem::path hub_cache_dir(const EnvLookup& env);

// The snapshot folder of `id` in the cache at `cache_dir` (not canonicalised: the path under
// the cache, so the model directory's parent is "snapshots"). kNotFound, naming the path
// looked for, when the repository's folder, the revision's ref file or the commit's snapshot is
// missing, or when a file of the snapshot is a link to a blob that is missing. kCorrupt when
// the ref file does not hold exactly a 40-digit lowercase hex commit (read bounded, never
// trusted), or a snapshot holds more than kMaxSnapshotEntries entries.
Result<std::string> resolve_hub_id(const HubId& id, const std::filesystem::path& cache_dir);

// Checked per snapshot: more entries than any model repository holds.
inline constexpr std::size_t kMaxSnapshotEntries = 1 << 16;

// `source` itself when it exists as a path (even a dangling link: the local name wins) or is not
// an id; otherwise the snapshot resolve_hub_id finds in `cache_dir`. A source that could not be
// checked (a permission error on a parent) is returned as it is: opening it reports why.
Result<std::string> resolve_source(const std::string& source, const std::filesystem::path& cache_dir);
// The same, with the cache folder from the process's environment (hub_cache_dir(std::getenv)).
Result<std::string> resolve_source(const std::string& source);

}  // namespace qload::formats
