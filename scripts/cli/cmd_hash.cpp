// `qload hash FILE...`: XXH3 digests of whole files read through the Reader (the same bytes
// a load reads). The XXH3-128 column equals `xxhsum -H2`, the XXH3-64 column `xxhsum -H3`.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"

namespace qload::cli {

int run_hash(const HashArgs& args) {
  const Logger log = Logger::to_stderr(LogLevel::kWarn);
  io::ReaderOptions options;
  auto engine = io::parse_engine(args.engine);
  if (!engine) return report(engine.error());
  options.engine = *engine;
  if (Status s = options.apply_environment(std::getenv); !s) return report(s.error());
  auto reader = io::make_reader(options, log);
  if (!reader) return report(reader.error());

  nlohmann::json files = nlohmann::json::array();
  for (const std::string& path : args.paths) {
    auto id = (*reader)->open_file(path);
    if (!id) return report(id.error());
    auto digest = io::digest_file(**reader, *id);
    if (!digest) return report(digest.error());
    if (args.json) {
      files.push_back({{"path", path},
                       {"bytes", digest->bytes},
                       {"xxh3_128", digest->xxh3_128.hex()},
                       {"xxh3_64", io::hex64(digest->xxh3_64)}});
    } else {
      fmt::print("{}  {}  {}\n", digest->xxh3_128.hex(), io::hex64(digest->xxh3_64), escape_for_terminal(path));
    }
  }
  if (args.json)
    fmt::print(
        "{}\n",
        nlohmann::json{{"schema", "qload.hash/1"}, {"engine", std::string((*reader)->engine())}, {"files", files}}.dump(
            2, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}

}  // namespace qload::cli
