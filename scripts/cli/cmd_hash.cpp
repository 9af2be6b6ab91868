// `qload hash PATH...`: digests read through the same I/O engine a load uses. For a
// checkpoint (a directory, .safetensors file or index), every file's XXH3-128 (equal to
// `xxhsum -H2`) and every tensor's XXH3-64 over exactly its stored bytes, in one pass; any
// other file gets its file digests only (XXH3-64 equals `xxhsum -H3`).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/formats/checkpoint_digest.hpp"
#include "qload/formats/driver.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"
#include "qload/session/request.hpp"

namespace qload::cli {
namespace {

struct Output {
  nlohmann::json files = nlohmann::json::array();
  nlohmann::json tensors = nlohmann::json::array();
};

Status hash_checkpoint(io::Reader& reader, const std::string& path, bool json, Output& out) {
  QLOAD_ASSIGN_OR_RETURN(const formats::Catalog catalog, formats::open_catalog(path));
  QLOAD_ASSIGN_OR_RETURN(const formats::CheckpointDigest digest, formats::digest_checkpoint(reader, catalog));
  for (const auto& f : digest.files) {
    if (json)
      out.files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"xxh3_128", f.xxh3_128.hex()}});
    else
      fmt::print("{}  {}\n", f.xxh3_128.hex(), escape_for_terminal(f.path));
  }
  for (const auto& t : digest.tensors) {
    if (json)
      out.tensors.push_back({{"name", t.name}, {"xxh3_64", io::hex64(t.xxh3_64)}});
    else
      fmt::print("  {}  {}\n", io::hex64(t.xxh3_64), escape_for_terminal(t.name));
  }
  return {};
}

Status hash_file(io::Reader& reader, const std::string& path, bool json, Output& out) {
  QLOAD_ASSIGN_OR_RETURN(const io::FileId id, reader.open_file(path));
  QLOAD_ASSIGN_OR_RETURN(const io::FileDigest d, io::digest_file(reader, id));
  if (json)
    out.files.push_back(
        {{"path", path}, {"bytes", d.bytes}, {"xxh3_128", d.xxh3_128.hex()}, {"xxh3_64", io::hex64(d.xxh3_64)}});
  else
    fmt::print("{}  {}  {}\n", d.xxh3_128.hex(), io::hex64(d.xxh3_64), escape_for_terminal(path));
  return {};
}

bool is_checkpoint(const std::string& path) {
  for (const formats::FormatDriver* driver : formats::drivers())
    if (driver->recognizes(path)) return true;
  return false;
}

}  // namespace

int run_hash(const HashArgs& args) {
  const Logger log = Logger::to_stderr(LogLevel::kWarn);
  std::vector<session::SettingFlag> flags;
  if (!args.engine.empty()) flags.push_back({"io_engine", args.engine, "--engine"});
  auto settings = session::resolve_settings(nullptr, flags, log);
  if (!settings) return report(settings.error());
  scheduler::LoadOptions options;
  if (Status s = options.apply(settings->values()); !s) return report(s.error());
  auto reader = io::make_reader(options.io, log);
  if (!reader) return report(reader.error());

  Output out;
  for (const std::string& path : args.paths) {
    const Status s = is_checkpoint(path) ? hash_checkpoint(**reader, path, args.json, out)
                                         : hash_file(**reader, path, args.json, out);
    if (!s) return report(s.error());
  }
  if (args.json)
    fmt::print("{}\n", nlohmann::json{{"schema", "qload.hash/1"},
                                      {"engine", std::string((*reader)->engine())},
                                      {"files", out.files},
                                      {"tensors", out.tensors}}
                           .dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}

}  // namespace qload::cli
