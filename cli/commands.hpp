// The qload CLI's subcommands. Each returns a process exit code (sysexits style, see
// exit_code()), prints its result to stdout and errors as one line on stderr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qload/runtime/error.hpp"
#include "qload/session/request.hpp"
#include "qload/session/synth.hpp"

namespace qload::cli {

// sysexits(3): 64 usage, 65 bad data, 66 missing input, 69 unavailable, 70 internal,
// 74 I/O error; 75 for a checksum mismatch (distinct so scripts can tell "corrupt" apart).
int exit_code(const Error& error);
// Prints "qload: error: <one line>" and returns exit_code(error).
int report(const Error& error);

struct VersionArgs {
  bool json = false;
};
int run_version(const VersionArgs& args);

struct SelfTestArgs {
  std::string directory;
  std::uint64_t bytes = 0;  // 0: default
  bool json = false;
};
int run_selftest(const SelfTestArgs& args);

struct InspectArgs {
  std::string path;
  bool json = false;
};
int run_inspect(const InspectArgs& args);

struct SynthArgs {
  std::string out;
  std::string dtype = "bf16";
  session::SynthOptions options;
};
int run_synth(const SynthArgs& args);

// What to load (the session layer's spec) and how this command reports it.
struct LoadArgs {
  session::LoadSpec spec;
  bool json = false;
  bool stream = false;  // load: hand tensors over as they complete (LoadHooks::on_tensor)
  std::string dump;
  bool mmap = false;             // load_mode=mmap
  bool no_digests = false;       // digests=off
  std::vector<std::string> set;  // --set NAME=VALUE: any setting of the table, above everything else
};
// The spec's fields as this CLI's flags name them ("--device", "--tp"...), for errors.
session::SpecNames flag_names();
// The spec with the setting flags (--set, --mmap, --no-digests) in it.
Result<session::LoadSpec> load_spec(const LoadArgs& args);
// load_spec, then the session's request, with warnings on stderr.
Result<session::LoadRequest> load_request(const LoadArgs& args);
int run_load(const LoadArgs& args);

// `qload plan`: the load's plan (what goes where, decoded how) without reading tensor data.
int run_plan(const LoadArgs& args);

struct LockArgs {
  LoadArgs load;  // what to lock: a checkpoint or recipe, and load options
  std::string out = "qload.lock";
};
int run_lock(const LockArgs& args);

struct VerifyArgs {
  std::string path;    // checkpoint or recipe
  std::string recipe;  // applied to the checkpoint `path`
  std::string lock;
  bool json = false;
};
int run_verify(const VerifyArgs& args);

struct ConvertArgs {
  std::string source;
  std::string out;
  std::string dtype;
  std::string dequantize;
  std::string quantize;
};
int run_convert(const ConvertArgs& args);

struct HashArgs {
  std::vector<std::string> paths;
  std::string engine;  // empty: the io_engine setting (QLOAD_IO, default auto)
  bool json = false;
};
int run_hash(const HashArgs& args);

// `qload config [SOURCE]`: every setting's effective value and where it came from.
struct ConfigArgs {
  std::string path;              // empty, a checkpoint or a recipe (whose settings count)
  std::vector<std::string> set;  // --set NAME=VALUE
  bool json = false;
  bool markdown = false;     // the table of settings as docs/settings.md has it
  bool spec_fields = false;  // the spec table (session/spec_fields.hpp) as docs/cli.md has it
};
int run_config(const ConfigArgs& args);

}  // namespace qload::cli
