// libFuzzer target: qload's command line. The input is argv (NUL-separated words); it is
// parsed with the CLI's own CommandLine and, for load, plan and lock, turned into the session
// request (settings from --set and the environment, devices, layout, lock and trace paths)
// without reading any checkpoint.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "qload/runtime/log.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> words{"qload"};
  std::string word;
  for (std::size_t i = 0; i < size && words.size() < 64; ++i) {
    if (data[i] == 0) {
      words.push_back(std::move(word));
      word.clear();
    } else {
      word.push_back(static_cast<char>(data[i]));
    }
  }
  words.push_back(std::move(word));
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());

  qload::cli::CommandLine cli;
  try {
    cli.app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    return 0;  // a usage error: what the CLI reports with exit 64
  }
  for (const qload::cli::LoadArgs* args : {&cli.load_args, &cli.plan_args, &cli.lock_args.load}) {
    if (args->spec.source.empty()) continue;
    auto spec = qload::cli::load_spec(*args);
    if (spec) (void)qload::session::build_request(*spec, qload::Logger{});
  }
  return 0;
}
