// qload command line: parses arguments (CLI11) and dispatches to one subcommand.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"qload: fast, verified loading of deep-learning checkpoints"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and build features");

  qload::cli::VersionArgs version_args;
  auto* version = app.add_subcommand("version", "Print the version, build features and what this machine offers");
  version->add_flag("--json", version_args.json, "One JSON object on stdout");

  qload::cli::SelfTestArgs selftest_args;
  auto* selftest = app.add_subcommand("selftest", "Check every I/O engine against a file of known bytes");
  selftest->add_option("--dir", selftest_args.directory, "Directory for the scratch file (default $TMPDIR or /tmp)");
  selftest->add_option("--bytes", selftest_args.bytes, "Size of the scratch file in bytes");
  selftest->add_flag("--json", selftest_args.json, "One JSON object on stdout");

  qload::cli::HashArgs hash_args;
  auto* hash = app.add_subcommand("hash", "XXH3-128 (= xxhsum -H2) and XXH3-64 (= xxhsum -H3) of files");
  hash->add_option("files", hash_args.paths, "Files to hash")->required();
  hash->add_option("--engine", hash_args.engine, "I/O engine: auto, uring or pread (also QLOAD_IO)");
  hash->add_flag("--json", hash_args.json, "One JSON object on stdout");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "qload: error: usage: %s (see qload --help)\n", e.what());
    return 64;  // sysexits EX_USAGE
  }
  if (show_version || *version) return qload::cli::run_version(version_args);
  if (*selftest) return qload::cli::run_selftest(selftest_args);
  if (*hash) return qload::cli::run_hash(hash_args);
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
