// qload command line: parses arguments (CLI11) and runs one subcommand (command_line.hpp).
#include <cstdio>

#include "command_line.hpp"

int main(int argc, char** argv) {
  qload::cli::CommandLine cli;
  try {
    cli.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return cli.app.exit(e);  // --help
    std::fprintf(stderr, "qload: error: usage: %s (see qload --help)\n", e.what());
    return 64;  // sysexits EX_USAGE
  }
  return cli.run();
}
