// `qload hash PATH...`: digests read through the same I/O engine a load uses (session/hash.hpp):
// per checkpoint file XXH3-128 (equal to `xxhsum -H2`) and per tensor XXH3-64; for any other
// file its XXH3-128 and XXH3-64 (equal to `xxhsum -H3`).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/session/hash.hpp"

namespace qload::cli {
namespace {

std::string hex64(std::uint64_t value) {
  return fmt::format("{:016x}", value);
}

void print_text(const session::HashedSource& source) {
  for (const session::HashedFile& f : source.files) {
    if (f.xxh3_64)
      fmt::print("{}  {}  {}\n", f.xxh3_128.hex(), hex64(*f.xxh3_64), escape_for_terminal(f.path));
    else
      fmt::print("{}  {}\n", f.xxh3_128.hex(), escape_for_terminal(f.path));
  }
  for (const auto& t : source.tensors) fmt::print("  {}  {}\n", hex64(t.xxh3_64), escape_for_terminal(t.name));
}

nlohmann::json to_json(const session::Hashes& hashes) {
  nlohmann::json files = nlohmann::json::array(), tensors = nlohmann::json::array();
  for (const session::HashedSource& source : hashes.sources) {
    for (const session::HashedFile& f : source.files) {
      nlohmann::json file = {{"path", f.path}, {"bytes", f.bytes}, {"xxh3_128", f.xxh3_128.hex()}};
      if (f.xxh3_64) file["xxh3_64"] = hex64(*f.xxh3_64);
      files.push_back(std::move(file));
    }
    for (const auto& t : source.tensors) tensors.push_back({{"name", t.name}, {"xxh3_64", hex64(t.xxh3_64)}});
  }
  return {{"schema", "qload.hash/1"}, {"engine", hashes.engine}, {"files", files}, {"tensors", tensors}};
}

}  // namespace

int run_hash(const HashArgs& args) {
  std::vector<session::SettingFlag> flags;
  if (!args.engine.empty()) flags.push_back({"io_engine", args.engine, "--engine"});
  auto hashes = session::hash(args.paths, flags, Logger::to_stderr(LogLevel::kWarn));
  if (!hashes) return report(hashes.error());
  if (args.json) {
    fmt::print("{}\n", to_json(*hashes).dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  for (const session::HashedSource& source : hashes->sources) print_text(source);
  return 0;
}

}  // namespace qload::cli
