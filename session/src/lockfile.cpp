#include "qload/session/lockfile.hpp"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qload/formats/strict_json.hpp"
#include "qload/io/digest.hpp"
#include "qload/runtime/version.hpp"

namespace qload::session {
namespace {

constexpr std::string_view kSchema = "qload.lock/1";
// A lock names every tensor with a 16-digit digest: 256 MiB is millions of tensors.
constexpr std::uint64_t kMaxLockfileBytes = 256ull << 20;
using nlohmann::json;

Error lock_error(const std::string& path, const std::string& message) {
  return Error(Errc::kCorrupt, "lockfile: " + message).with_file(path);
}

Result<std::uint64_t> parse_hex64(const std::string& path, const std::string& field, const json& value) {
  if (!value.is_string() || value.get<std::string>().size() != 16)
    return fail(lock_error(path, fmt::format("'{}' must be 16 hex digits", field)));
  const std::string text = value.get<std::string>();
  std::uint64_t out = 0;
  for (const char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return fail(lock_error(path, fmt::format("'{}' must be 16 lowercase hex digits", field)));
    out = out << 4 | static_cast<std::uint64_t>(digit);
  }
  return out;
}

template <typename T>
Result<T> field(const std::string& path, const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) return fail(lock_error(path, fmt::format("missing '{}'", key)));
  // nlohmann converts any number to any arithmetic type, and a float beyond the target's range
  // (1e300 as uint64) is undefined behaviour: counts must be written as unsigned integers.
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_unsigned())
      return fail(lock_error(path, fmt::format("'{}' must be a whole number of bytes", key)));
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fail(lock_error(path, fmt::format("'{}' has the wrong type", key)));
  }
}

std::filesystem::path checkpoint_root(const formats::Catalog& catalog) {
  const std::filesystem::path source = std::filesystem::absolute(catalog.source).lexically_normal();
  return std::filesystem::is_directory(source) ? source : source.parent_path();
}

std::string short_hex(std::uint64_t v) {
  return io::hex64(v);
}

}  // namespace

std::string path_in_checkpoint(const formats::Catalog& catalog, const std::string& file) {
  const std::filesystem::path absolute = std::filesystem::absolute(file).lexically_normal();
  return absolute.lexically_relative(checkpoint_root(catalog)).generic_string();
}

namespace {

Result<Lockfile> lock_from_json(const json& doc, const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(const std::string schema, field<std::string>(path, doc, "schema"));
  // The value is not echoed: a file that is not a lock (some other JSON) may hold anything there.
  if (schema != kSchema)
    return fail(lock_error(path, fmt::format("the \"schema\" is not '{}' (not a qload lockfile?)", kSchema)));
  Lockfile lock;
  QLOAD_ASSIGN_OR_RETURN(lock.qload_version, field<std::string>(path, doc, "qload_version"));
  QLOAD_ASSIGN_OR_RETURN(lock.recipe, field<std::string>(path, doc, "recipe"));
  if (doc.contains("recipe_xxh3_64") && !doc["recipe_xxh3_64"].is_null()) {
    QLOAD_ASSIGN_OR_RETURN(lock.recipe_hash, parse_hex64(path, "recipe_xxh3_64", doc["recipe_xxh3_64"]));
  }
  if (!doc.contains("plan_xxh3_64")) return fail(lock_error(path, "missing 'plan_xxh3_64'"));
  QLOAD_ASSIGN_OR_RETURN(lock.plan_hash, parse_hex64(path, "plan_xxh3_64", doc["plan_xxh3_64"]));
  QLOAD_ASSIGN_OR_RETURN(const json files, field<json>(path, doc, "files"));
  if (!files.is_array()) return fail(lock_error(path, "'files' must be a list"));
  for (const json& f : files) {
    if (!f.is_object()) return fail(lock_error(path, "'files' entries must be objects"));
    LockedFile file;
    QLOAD_ASSIGN_OR_RETURN(file.path, field<std::string>(path, f, "path"));
    QLOAD_ASSIGN_OR_RETURN(file.bytes, field<std::uint64_t>(path, f, "bytes"));
    QLOAD_ASSIGN_OR_RETURN(file.xxh3_128, field<std::string>(path, f, "xxh3_128"));
    if (file.xxh3_128.size() != 32) return fail(lock_error(path, fmt::format("file '{}': bad xxh3_128", file.path)));
    lock.files.push_back(std::move(file));
  }
  QLOAD_ASSIGN_OR_RETURN(const json tensors, field<json>(path, doc, "tensors"));
  if (!tensors.is_object()) return fail(lock_error(path, "'tensors' must be an object of name: xxh3_64"));
  for (const auto& [name, digest] : tensors.items()) {
    QLOAD_ASSIGN_OR_RETURN(lock.tensors[name], parse_hex64(path, "tensors." + name, digest));
  }
  return lock;
}

}  // namespace

Result<Lockfile> parse_lockfile(std::string_view text, const std::string& path) {
  if (text.size() > kMaxLockfileBytes)
    return fail(lock_error(path, fmt::format("{} bytes; a lockfile is at most {}", text.size(), kMaxLockfileBytes)));
  auto doc = formats::parse_strict_json_object(text, path);
  if (!doc) return fail(std::move(doc.error()).with_note("reading a lockfile"));
  return lock_from_json(*doc, path);
}

Result<Lockfile> read_lockfile(const std::string& path) {
  auto doc = formats::read_strict_json_file(path, kMaxLockfileBytes);
  if (!doc) return fail(std::move(doc.error()).with_note("reading a lockfile"));
  return lock_from_json(*doc, path);
}

Status write_lockfile(const std::string& path, const Lockfile& lock) {
  // Written in this key order (ordered_json), so a lock reads top-down and diffs cleanly.
  using ordered = nlohmann::ordered_json;
  ordered files = ordered::array();
  for (const LockedFile& f : lock.files)
    files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"xxh3_128", f.xxh3_128}});
  ordered tensors = ordered::object();
  for (const auto& [name, digest] : lock.tensors) tensors[name] = io::hex64(digest);
  const ordered doc = {{"schema", kSchema},
                       {"qload_version", lock.qload_version},
                       {"recipe", lock.recipe},
                       {"recipe_xxh3_64", lock.recipe_hash ? ordered(io::hex64(*lock.recipe_hash)) : ordered(nullptr)},
                       {"plan_xxh3_64", io::hex64(lock.plan_hash)},
                       {"files", files},
                       {"tensors", tensors}};
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    try {  // names are valid UTF-8 (the formats layer checks); strict keeps them byte for byte
      out << doc.dump(2, ' ', false, ordered::error_handler_t::strict) << '\n';
    } catch (const ordered::exception& e) {
      return fail(Error(Errc::kInvalidArgument, fmt::format("lockfile: {}", e.what())).with_file(path));
    }
    out.flush();
    if (!out) return fail(Error::from_errno(errno, "write lockfile").with_file(temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(temp.c_str());
    return fail(Error::from_errno(err, "rename lockfile into place").with_file(path));
  }
  return {};
}

Lockfile lock_checkpoint(const formats::Catalog& catalog, const formats::CheckpointDigest& digest) {
  Lockfile lock;
  lock.qload_version = std::string(version());
  for (const formats::FileDigestEntry& f : digest.files)
    lock.files.push_back({path_in_checkpoint(catalog, f.path), f.bytes, f.xxh3_128.hex()});
  for (const formats::TensorDigestEntry& t : digest.tensors) lock.tensors[t.name] = t.xxh3_64;
  return lock;
}

std::vector<std::string> lock_differences(const Lockfile& lock, const formats::Catalog& catalog,
                                          const formats::CheckpointDigest* digest) {
  std::vector<std::string> out;
  std::map<std::string, const LockedFile*> locked;
  for (const LockedFile& f : lock.files) locked[f.path] = &f;
  std::set<std::string> present;
  for (std::size_t i = 0; i < catalog.files.size(); ++i) {
    const formats::CatalogFile& f = catalog.files[i];
    const std::string rel = path_in_checkpoint(catalog, f.path);
    present.insert(rel);
    const auto it = locked.find(rel);
    if (it == locked.end()) {
      out.push_back(fmt::format("file '{}' is not in the lock", rel));
      continue;
    }
    if (it->second->bytes != f.size)
      out.push_back(fmt::format("file '{}' is {} bytes, the lock says {}", rel, f.size, it->second->bytes));
    else if (digest != nullptr && i < digest->files.size() && digest->files[i].xxh3_128.hex() != it->second->xxh3_128)
      out.push_back(fmt::format("file '{}' has XXH3-128 {}, the lock says {}", rel, digest->files[i].xxh3_128.hex(),
                                it->second->xxh3_128));
  }
  for (const LockedFile& f : lock.files)
    if (!present.contains(f.path)) out.push_back(fmt::format("file '{}' of the lock is missing", f.path));
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < catalog.tensors.size(); ++i) {
    const formats::TensorEntry& t = catalog.tensors[i];
    names.insert(t.name);
    const auto it = lock.tensors.find(t.name);
    if (it == lock.tensors.end()) {
      out.push_back(fmt::format("tensor '{}' is not in the lock", t.name));
      continue;
    }
    if (digest != nullptr && i < digest->tensors.size() && digest->tensors[i].xxh3_64 != it->second)
      out.push_back(fmt::format("tensor '{}' has XXH3-64 {}, the lock says {}", t.name,
                                short_hex(digest->tensors[i].xxh3_64), short_hex(it->second)));
  }
  for (const auto& [name, d] : lock.tensors)
    if (!names.contains(name)) out.push_back(fmt::format("tensor '{}' of the lock is missing", name));
  return out;
}

}  // namespace qload::session
