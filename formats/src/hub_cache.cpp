#include "qload/formats/hub_cache.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "file_io.hpp"
#include "located_error.hpp"

namespace qload::formats {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t kMaxRepoPart = 96;      // validate_repo_id's bound on org and on name
constexpr std::size_t kMaxRevision = 255;     // a git ref name is at most this long in practice
constexpr std::uint64_t kMaxRefBytes = 4096;  // a ref file holds 40 bytes; anything big is not one
constexpr std::size_t kCommitHexDigits = 40;

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_lower_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// One of org or name, as REPO_ID_REGEX (re.ASCII) takes it: [\w\-.]{1,96} between word
// boundaries, so the first and last characters are word characters.
bool valid_repo_part(std::string_view part) {
  if (part.empty() || part.size() > kMaxRepoPart) return false;
  if (!is_word(part.front()) || !is_word(part.back())) return false;
  return std::ranges::all_of(part, [](char c) { return is_word(c) || c == '-' || c == '.'; });
}

bool valid_revision(std::string_view revision) {
  if (revision.empty() || revision.size() > kMaxRevision) return false;
  if (!std::ranges::all_of(revision, [](char c) { return is_word(c) || c == '-' || c == '.' || c == '/'; }))
    return false;
  // It becomes a path under refs/: no way out of it, and no empty component.
  std::size_t begin = 0;
  while (begin <= revision.size()) {
    const std::size_t end = std::min(revision.find('/', begin), revision.size());
    const std::string_view part = revision.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

bool is_commit_hash(std::string_view text) {
  return text.size() == kCommitHexDigits && std::ranges::all_of(text, is_lower_hex);
}

std::string env_or(const EnvLookup& env, const char* name, std::string fallback) {
  const char* value = env(name);
  return value != nullptr ? std::string(value) : std::move(fallback);
}

// Python's os.path.expanduser: "~" and "~/..." from HOME (else the password database), "~user/..."
// from the password database; anything it cannot expand is left as it is.
std::string expand_user(const std::string& path, const EnvLookup& env) {
  if (path.empty() || path.front() != '~') return path;
  const std::size_t slash = std::min(path.find('/'), path.size());
  const std::string user = path.substr(1, slash - 1);
  std::string home;
  if (user.empty() && env("HOME") != nullptr) {
    home = env("HOME");
  } else {
    std::array<char, 4096> buffer{};
    passwd entry{};
    passwd* found = nullptr;
    const int rc = user.empty() ? ::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &found)
                                : ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (rc != 0 || found == nullptr || found->pw_dir == nullptr) return path;
    home = found->pw_dir;
  }
  while (!home.empty() && home.back() == '/') home.pop_back();
  const std::string expanded = home + path.substr(slash);
  return expanded.empty() ? "/" : expanded;
}

// Python's os.path.expandvars: $NAME (NAME of ASCII word characters) and ${NAME} replaced by
// the variable's value; an unset variable, or a '$' not starting either, is left as written.
std::string expand_vars(const std::string& path, const EnvLookup& env) {
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] != '$') {
      out += path[i++];
      continue;
    }
    std::size_t name_begin = i + 1, name_end = name_begin, after = name_begin;
    if (name_begin < path.size() && path[name_begin] == '{') {
      const std::size_t close = path.find('}', name_begin);
      if (close == std::string::npos) {
        out += path[i++];
        continue;
      }
      name_begin += 1;
      name_end = close;
      after = close + 1;
    } else {
      while (name_end < path.size() && is_word(path[name_end])) ++name_end;
      after = name_end;
    }
    const std::string name = path.substr(name_begin, name_end - name_begin);
    const char* value = (name_end > i + 1 && !name.empty()) ? env(name.c_str()) : nullptr;
    out += value != nullptr ? std::string(value) : path.substr(i, after - i);
    i = after > i + 1 ? after : i + 1;
  }
  return out;
}

std::string expand(const std::string& path, const EnvLookup& env) {
  return expand_vars(expand_user(path, env), env);
}

Result<std::string> read_commit(const fs::path& ref, const HubId& id) {
  QLOAD_ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, read_small_file(ref.string(), kMaxRefBytes));
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (!is_commit_hash(text))
    return fail(located(Errc::kCorrupt,
                        fmt::format("the ref file of {}@{} does not hold a 40-digit commit hash (it holds {} bytes: "
                                    "{}); huggingface_hub writes the bare hash",
                                    id.repo, id.revision, text.size(), quote_name(text)),
                        ref.string()));
  return std::string(text);
}

// A link in the snapshot whose blob is gone (a pruned cache, an interrupted download) is
// reported here, naming both, rather than later as a bare "No such file".
Status check_snapshot_links(const fs::path& snapshot, const HubId& id) {
  std::error_code ec;
  fs::recursive_directory_iterator it(snapshot, fs::directory_options::none, ec);
  std::size_t entries = 0;
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++entries > kMaxSnapshotEntries)
      return fail(located(Errc::kCorrupt,
                          fmt::format("the snapshot of {} holds more than {} entries", id.repo, kMaxSnapshotEntries),
                          snapshot.string()));
    const fs::directory_entry& entry = *it;
    if (!entry.is_symlink(ec) || ec) continue;
    if (fs::exists(entry.path(), ec) || ec) continue;
    const fs::path target = fs::read_symlink(entry.path(), ec);
    const fs::path blob = (entry.path().parent_path() / target).lexically_normal();
    return fail(located(Errc::kNotFound,
                        fmt::format("{} in the snapshot of {} is a link to the blob {}, which is missing (a pruned "
                                    "cache or an interrupted download: download the model again)",
                                    quote_name(entry.path().filename().string()), id.repo, quote_name(blob.string())),
                        entry.path().string()));
  }
  if (ec) return fail(Error::from_errno(ec.value(), "list the snapshot").with_file(snapshot.string()));
  return {};
}

// The id to look up for `source`, or nullopt when `source` is to be used as it is: it exists (a
// dangling link too: the local name wins), could not be checked (a permission error on a parent:
// opening it says so), or is not an id.
std::optional<HubId> id_to_resolve(const std::string& source) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(source, ec))) return std::nullopt;
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) return std::nullopt;
  return parse_hub_id(source);
}

}  // namespace

std::optional<HubId> parse_hub_id(std::string_view source) {
  const std::size_t at = source.find('@');
  const std::string_view repo = source.substr(0, at);
  const std::size_t slash = repo.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string_view org = repo.substr(0, slash), name = repo.substr(slash + 1);
  if (!valid_repo_part(org) || !valid_repo_part(name)) return std::nullopt;
  // validate_repo_id's rules over the whole id.
  if (repo.find("--") != std::string_view::npos || repo.find("..") != std::string_view::npos) return std::nullopt;
  if (repo.ends_with(".git")) return std::nullopt;
  HubId id{.repo = std::string(repo), .revision = "main"};
  if (at != std::string_view::npos) {
    const std::string_view revision = source.substr(at + 1);
    if (!valid_revision(revision)) return std::nullopt;
    id.revision = std::string(revision);
  }
  return id;
}

fs::path hub_cache_dir(const EnvLookup& env) {
  // constants.py, step by step: each default is the next variable's fallback, and only the
  // final values are expanded (HF_HOME and HF_HUB_CACHE), as there.
  const fs::path default_home = fs::path(expand_user("~", env)) / ".cache";
  const std::string xdg = env_or(env, "XDG_CACHE_HOME", default_home.string());
  const fs::path hf_home = expand(env_or(env, "HF_HOME", (fs::path(xdg) / "huggingface").string()), env);
  const std::string legacy = env_or(env, "HUGGINGFACE_HUB_CACHE", (hf_home / "hub").string());
  return fs::path(expand(env_or(env, "HF_HUB_CACHE", legacy), env));
}

Result<std::string> resolve_hub_id(const HubId& id, const fs::path& cache_dir) {
  const std::size_t slash = id.repo.find('/');
  const fs::path repo = cache_dir / fmt::format("models--{}--{}", id.repo.substr(0, slash), id.repo.substr(slash + 1));
  std::error_code ec;
  if (!fs::is_directory(repo, ec))
    return fail(located(
        Errc::kNotFound,
        fmt::format("{}: no such file or directory, and the Hugging Face cache {} has no model {} "
                    "(looked for {}; download it with `hf download {}`)",
                    quote_name(id.repo), quote_name(cache_dir.string()), id.repo, quote_name(repo.string()), id.repo),
        repo.string()));
  std::string commit = id.revision;
  if (!is_commit_hash(id.revision)) {
    const fs::path ref = repo / "refs" / id.revision;
    if (!fs::is_regular_file(ref, ec))
      return fail(located(Errc::kNotFound,
                          fmt::format("the Hugging Face cache has {} but not its revision {} (no ref file {})", id.repo,
                                      quote_name(id.revision), quote_name(ref.string())),
                          ref.string()));
    QLOAD_ASSIGN_OR_RETURN(commit, read_commit(ref, id));
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec))
    return fail(located(Errc::kNotFound,
                        fmt::format("{}@{} is commit {}, whose snapshot {} is not in the Hugging Face cache", id.repo,
                                    id.revision, commit, quote_name(snapshot.string())),
                        snapshot.string()));
  QLOAD_TRY(check_snapshot_links(snapshot, id));
  return snapshot.string();
}

Result<std::string> resolve_source(const std::string& source, const fs::path& cache_dir) {
  const std::optional<HubId> id = id_to_resolve(source);
  if (!id) return source;
  return resolve_hub_id(*id, cache_dir);
}

Result<std::string> resolve_source(const std::string& source) {
  const std::optional<HubId> id = id_to_resolve(source);
  if (!id) return source;  // the environment is only read for an id
  return resolve_hub_id(*id, hub_cache_dir([](const char* name) { return std::getenv(name); }));
}

}  // namespace qload::formats
