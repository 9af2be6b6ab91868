#include "qload/session/hash.hpp"

#include "qload/formats/driver.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"

namespace qload::session {
namespace {

bool is_checkpoint(const std::string& path) {
  for (const formats::FormatDriver* driver : formats::drivers())
    if (driver->recognizes(path)) return true;
  return false;
}

Result<HashedSource> hash_checkpoint(io::Reader& reader, const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(const formats::Catalog catalog, formats::open_catalog(path));
  QLOAD_ASSIGN_OR_RETURN(formats::CheckpointDigest digest, formats::digest_checkpoint(reader, catalog));
  HashedSource out{.checkpoint = true, .tensors = std::move(digest.tensors)};
  for (formats::FileDigestEntry& f : digest.files)
    out.files.push_back({.path = std::move(f.path), .bytes = f.bytes, .xxh3_128 = f.xxh3_128});
  return out;
}

Result<HashedSource> hash_file(io::Reader& reader, const std::string& path) {
  QLOAD_ASSIGN_OR_RETURN(const io::FileId id, reader.open_file(path));
  QLOAD_ASSIGN_OR_RETURN(const io::FileDigest d, io::digest_file(reader, id));
  return HashedSource{.files = {{.path = path, .bytes = d.bytes, .xxh3_128 = d.xxh3_128, .xxh3_64 = d.xxh3_64}}};
}

}  // namespace

Result<Hashes> hash(const std::vector<std::string>& paths, const std::vector<SettingFlag>& flags, const Logger& log) {
  QLOAD_ASSIGN_OR_RETURN(const ResolvedSettings settings, resolve_settings(nullptr, flags, log));
  scheduler::LoadOptions options;
  QLOAD_TRY(options.apply(settings.values()));
  QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<io::Reader> reader, io::make_reader(options.io, log));
  Hashes out{.engine = std::string(reader->engine())};
  for (const std::string& path : paths) {
    QLOAD_ASSIGN_OR_RETURN(HashedSource source,
                           is_checkpoint(path) ? hash_checkpoint(*reader, path) : hash_file(*reader, path));
    out.sources.push_back(std::move(source));
  }
  return out;
}

}  // namespace qload::session
