// The qload command line as data: CLI11's app with every subcommand, and the arguments each
// fills. main() parses into it and runs the chosen command; the CLI fuzz target parses into it
// and builds the session request without loading anything.
#pragma once

#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace qload::cli {

class CommandLine {
 public:
  CommandLine();                             // declares every subcommand and option
  CommandLine(const CommandLine&) = delete;  // CLI11 holds pointers into this object
  CommandLine& operator=(const CommandLine&) = delete;

  // After app.parse(): runs the command given (help without one) and returns the exit code.
  int run();

  CLI::App app{"qload: fast, verified loading of deep-learning checkpoints"};
  bool show_version = false;
  VersionArgs version_args;
  SelfTestArgs selftest_args;
  InspectArgs inspect_args;
  SynthArgs synth_args;
  LoadArgs load_args;
  LoadArgs plan_args;
  LockArgs lock_args;
  VerifyArgs verify_args;
  ConvertArgs convert_args;
  HashArgs hash_args;
  ConfigArgs config_args;
  // The subcommands, to tell which one was given.
  CLI::App* version = nullptr;
  CLI::App* selftest = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* synth = nullptr;
  CLI::App* load = nullptr;
  CLI::App* plan = nullptr;
  CLI::App* lock = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* convert = nullptr;
  CLI::App* hash = nullptr;
  CLI::App* config = nullptr;
};

}  // namespace qload::cli
