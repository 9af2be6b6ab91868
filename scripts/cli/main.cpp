// qload command line: parses arguments (CLI11) and dispatches to one subcommand.
#include <CLI/CLI.hpp>

#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

  qload::cli::InspectArgs inspect_args;
  auto* inspect = app.add_subcommand("inspect", "Format, files, tensor table, metadata and quantization config");
  inspect->add_option("path", inspect_args.path, "Checkpoint: directory, .safetensors file or index json")->required();
  inspect->add_flag("--json", inspect_args.json, "One JSON object on stdout");

  qload::cli::SynthArgs synth_args;
  auto& so = synth_args.options;
  auto* synth = app.add_subcommand("synth", "Write a deterministic llama-shaped checkpoint (tests, demos, benchmarks)");
  synth->add_option("out", synth_args.out, "Output directory")->required();
  synth->add_option("--layers", so.layers, "Decoder layers")->capture_default_str();
  synth->add_option("--hidden", so.hidden, "Hidden size")->capture_default_str();
  synth->add_option("--intermediate", so.intermediate, "MLP intermediate size")->capture_default_str();
  synth->add_option("--vocab", so.vocab, "Vocabulary size")->capture_default_str();
  synth->add_option("--heads", so.heads, "Attention heads")->capture_default_str();
  synth->add_option("--kv-heads", so.kv_heads, "Key/value heads")->capture_default_str();
  synth->add_option("--shards", so.shards, "Number of safetensors files")->capture_default_str();
  synth->add_option("--dtype", synth_args.dtype, "bf16, f16 or f32")->capture_default_str();
  synth->add_option("--seed", so.seed, "Seed of the deterministic values")->capture_default_str();
  synth->add_option(
      "--quant", so.quant,
      fmt::format("Write the linear weights quantized: {}", fmt::join(qload::scripts::kSynthQuantNames, ", ")));

  qload::cli::LoadArgs load_args;
  auto* load = app.add_subcommand("load", "Load a checkpoint (or run a recipe) and report how it went");
  load->add_option("path", load_args.path, "Checkpoint (directory, .safetensors, index json) or recipe (.lua)")
      ->required();
  load->add_option("--device,--devices", load_args.device,
                   "Destination device(s), comma-separated: cpu, cpu:N, cuda:N (default cpu, or the recipe's)");
  load->add_option("--placement", load_args.placement, "With several devices: round-robin (default) or by-layer");
  load->add_option("--dtype", load_args.dtype, "Convert floating tensors (f16/bf16/f32) to bf16, f16 or f32 on load");
  load->add_option("--dequantize", load_args.dequantize, "Dequantize quantized weights to bf16, f16 or f32");
  load->add_option("--quantize", load_args.quantize,
                   "Quantize linear weights on load: fp8[:per-tensor|per-channel|block] or int8");
  load->add_flag("--repack", load_args.repack,
                 "Repack GPTQ v1 / AWQ GEMM / act-order weights to GPTQ v2 with contiguous groups (<p>.perm)");
  load->add_flag("--json", load_args.json, "One JSON object on stdout instead of the summary");
  load->add_flag("--mmap", load_args.mmap, "Zero-copy: tensors point into read-only file mappings");
  load->add_flag("--no-digests", load_args.no_digests,
                 "Skip the per-tensor XXH3-64 digests (less CPU; nothing to check bytes against)");
  load->add_option("--trace", load_args.trace, "Write a Chrome trace (Perfetto) of the load to this file");
  load->add_option("--dump", load_args.dump, "Write what was loaded to DIR/<device>.safetensors");

  qload::cli::ConvertArgs convert_args;
  auto* convert = app.add_subcommand(
      "convert", "Load with --dequantize / --quantize / --dtype and write the result as a safetensors checkpoint");
  convert->add_option("source", convert_args.source, "Checkpoint: directory, .safetensors file or index json")
      ->required();
  convert->add_option("out", convert_args.out, "Output directory (model.safetensors, config.json)")->required();
  convert->add_option("--dtype", convert_args.dtype, "Convert floating tensors to bf16, f16 or f32");
  convert->add_option("--dequantize", convert_args.dequantize, "Dequantize quantized weights to bf16, f16 or f32");
  convert->add_option("--quantize", convert_args.quantize,
                      "Quantize linear weights: fp8[:per-tensor|per-channel|block] or int8");

  qload::cli::HashArgs hash_args;
  auto* hash = app.add_subcommand(
      "hash", "Per-file XXH3-128 (= xxhsum -H2) and per-tensor XXH3-64 of checkpoints; file digests of other files");
  hash->add_option("paths", hash_args.paths, "Checkpoints or files")->required();
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
  if (*inspect) return qload::cli::run_inspect(inspect_args);
  if (*convert) return qload::cli::run_convert(convert_args);
  if (*synth) return qload::cli::run_synth(synth_args);
  if (*load) return qload::cli::run_load(load_args);
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
