#include "command_line.hpp"

#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace qload::cli {
namespace {

// What every command that reads a checkpoint takes.
constexpr const char* kCheckpointHelp =
    "Checkpoint: directory, .safetensors, .gguf or PyTorch file, or index json; or a Hugging Face model id "
    "(org/name or org/name@revision) read from the local Hugging Face cache (HF_HUB_CACHE, HF_HOME; "
    "a path of that name wins)";

// What to load and how: shared by load, plan and lock (a recipe's settings are the defaults).
void add_load_options(CLI::App* cmd, LoadArgs& a) {
  cmd->add_option("path", a.spec.source, std::string(kCheckpointHelp) + ", or a recipe (.lua)")->required();
  cmd->add_option("--recipe", a.spec.recipe,
                  "A recipe (.lua) applied to the checkpoint PATH: its devices, dtype, quant rules, layout and "
                  "settings (its own source, if any, is not used)");
  cmd->add_option("--device,--devices", a.spec.devices,
                  "Destination device(s), comma-separated: cpu, cpu:N, cuda:N, cuda:local (LOCAL_RANK's GPU) "
                  "(default cpu, or the recipe's). Under WORLD_SIZE > 1 (torchrun), this process's devices of "
                  "the layout (docs/parallel.md)");
  cmd->add_option("--placement", a.spec.placement, "With several devices: round-robin (default) or by-layer");
  cmd->add_option("--dtype", a.spec.dtype, "Convert floating tensors (f16/bf16/f32) to bf16, f16 or f32 on load");
  cmd->add_option("--dequantize", a.spec.dequantize, "Dequantize quantized weights to bf16, f16 or f32");
  cmd->add_option("--quantize", a.spec.quantize,
                  "Quantize linear weights on load: fp8[:per-tensor|per-channel|block] or int8");
  cmd->add_flag("--repack", a.spec.repack,
                "Repack GPTQ v1 / AWQ GEMM / act-order weights to GPTQ v2 with contiguous groups (<p>.perm)");
  cmd->add_flag("--mmap", a.mmap, "Zero-copy: tensors point into read-only file mappings");
  cmd->add_option("--tp,--tensor-parallel", a.spec.tensor_parallel,
                  "Tensor-parallel ranks: each tensor split over them (llama-style rules; docs/parallel.md)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pp,--pipeline-parallel", a.spec.pipeline_parallel, "Pipeline stages: whole layers per stage")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dp,--data-parallel", a.spec.data_parallel, "Data-parallel replicas")->check(CLI::PositiveNumber);
  cmd->add_option("--set", a.set,
                  "NAME=VALUE: any setting (qload config lists them; docs/settings.md), over the recipe and "
                  "QLOAD_* variables; repeatable");
  cmd->add_flag("--share-reads", a.spec.share_reads,
                "Under WORLD_SIZE > 1: each tensor is read by one of the processes holding it, which sends "
                "the others their copies (host memory through Gloo while the load goes on, GPU memory "
                "through NCCL)");
}

CLI::App* add_synth(CLI::App& app, SynthArgs& a) {
  auto& so = a.options;
  CLI::App* synth =
      app.add_subcommand("synth", "Write a deterministic llama-shaped checkpoint (tests, demos, benchmarks)");
  synth->add_option("out", a.out, "Output directory")->required();
  synth->add_option("--layers", so.layers, "Decoder layers")->capture_default_str();
  synth->add_option("--hidden", so.hidden, "Hidden size")->capture_default_str();
  synth->add_option("--intermediate", so.intermediate, "MLP intermediate size")->capture_default_str();
  synth->add_option("--vocab", so.vocab, "Vocabulary size")->capture_default_str();
  synth->add_option("--heads", so.heads, "Attention heads")->capture_default_str();
  synth->add_option("--kv-heads", so.kv_heads, "Key/value heads")->capture_default_str();
  synth->add_option("--shards", so.shards, "Number of safetensors files")->capture_default_str();
  synth->add_option("--dtype", a.dtype, "bf16, f16 or f32")->capture_default_str();
  synth->add_option("--seed", so.seed, "Seed of the deterministic values")->capture_default_str();
  synth->add_option("--quant", so.quant,
                    fmt::format("Write the linear weights quantized: {}", fmt::join(session::kSynthQuantNames, ", ")));
  return synth;
}

CLI::App* add_load(CLI::App& app, LoadArgs& a) {
  CLI::App* load = app.add_subcommand("load", "Load a checkpoint (or run a recipe) and report how it went");
  add_load_options(load, a);
  load->add_flag("--json", a.json, "One JSON object on stdout instead of the summary");
  load->add_flag("--stream", a.stream,
                 "Hand each tensor over as soon as it is complete, as a server's loader takes them, and report the "
                 "time to the first tensor and to each tenth of the bytes");
  load->add_flag("--no-digests", a.no_digests,
                 "Never hash tensors (digests=off; the default, auto, hashes only for a lock, which off refuses)");
  load->add_option("--trace", a.spec.trace, "Write a Chrome trace (Perfetto) of the load to this file");
  load->add_flag("--overwrite", a.spec.overwrite, "Let a recipe's trace replace an existing file");
  load->add_option("--dump", a.dump, "Write what was loaded to DIR/<device>.safetensors");
  load->add_option("--locked", a.spec.lock,
                   "Load only if the checkpoint, recipe and plan match this lockfile (`qload lock`)");
  return load;
}

CLI::App* add_verify(CLI::App& app, VerifyArgs& a) {
  CLI::App* verify = app.add_subcommand("verify", "Re-hash a checkpoint (or a recipe's) against a lockfile");
  verify->add_option("path", a.path, std::string(kCheckpointHelp) + ", or a recipe (.lua)")->required();
  verify->add_option("--recipe", a.recipe, "A recipe (.lua) applied to the checkpoint PATH");
  verify->add_option("--lock", a.lock, "The lockfile")->required();
  verify->add_flag("--json", a.json, "One JSON object on stdout");
  return verify;
}

CLI::App* add_convert(CLI::App& app, ConvertArgs& a) {
  CLI::App* convert = app.add_subcommand(
      "convert", "Load with --dequantize / --quantize / --dtype and write the result as a safetensors checkpoint");
  convert->add_option("source", a.source, kCheckpointHelp)->required();
  convert->add_option("out", a.out, "Output directory (model.safetensors, config.json)")->required();
  convert->add_option("--dtype", a.dtype, "Convert floating tensors to bf16, f16 or f32");
  convert->add_option("--dequantize", a.dequantize, "Dequantize quantized weights to bf16, f16 or f32");
  convert->add_option("--quantize", a.quantize, "Quantize linear weights: fp8[:per-tensor|per-channel|block] or int8");
  return convert;
}

CLI::App* add_config(CLI::App& app, ConfigArgs& a) {
  CLI::App* config = app.add_subcommand("config", "Every setting's effective value and where it came from");
  config->add_option("source", a.path, "A recipe (.lua) whose settings count, or a checkpoint");
  config->add_option("--set", a.set, "NAME=VALUE: a setting as a flag would give it; repeatable");
  config->add_flag("--json", a.json, "One JSON object on stdout");
  config->add_flag("--markdown", a.markdown, "The table of settings (names, types, defaults, docs)");
  config->add_flag("--spec-fields", a.spec_fields,
                   "The table of what a load can be asked, as `qload load`, C and Python spell it");
  return config;
}

}  // namespace

CommandLine::CommandLine() {
  app.require_subcommand(0, 1);
  app.add_flag("--version", show_version, "Print the version and build features");

  version = app.add_subcommand("version", "Print the version, build features and what this machine offers");
  version->add_flag("--json", version_args.json, "One JSON object on stdout");

  selftest = app.add_subcommand("selftest", "Check every I/O engine against a file of known bytes");
  selftest->add_option("--dir", selftest_args.directory, "Directory for the scratch file (default $TMPDIR or /tmp)");
  selftest->add_option("--bytes", selftest_args.bytes, "Size of the scratch file in bytes");
  selftest->add_flag("--json", selftest_args.json, "One JSON object on stdout");

  inspect = app.add_subcommand("inspect", "Format, files, tensor table, metadata and quantization config");
  inspect->add_option("path", inspect_args.path, kCheckpointHelp)->required();
  inspect->add_flag("--json", inspect_args.json, "One JSON object on stdout");

  synth = add_synth(app, synth_args);
  load = add_load(app, load_args);

  plan = app.add_subcommand("plan", "Print what a load would do (no tensor data read) and its plan hash");
  add_load_options(plan, plan_args);
  plan->add_flag("--json", plan_args.json, "The plan as one JSON object");

  lock = app.add_subcommand("lock", "Write a lockfile: recipe and plan hashes, file and tensor digests");
  add_load_options(lock, lock_args.load);
  lock->add_option("-o,--output", lock_args.out, "The lockfile to write")->capture_default_str();

  verify = add_verify(app, verify_args);
  convert = add_convert(app, convert_args);

  hash = app.add_subcommand(
      "hash", "Per-file XXH3-128 (= xxhsum -H2) and per-tensor XXH3-64 of checkpoints; file digests of other files");
  hash->add_option("paths", hash_args.paths, "Checkpoints or files")->required();
  hash->add_option("--engine", hash_args.engine, "I/O engine: auto, uring or pread (also QLOAD_IO)");
  hash->add_flag("--json", hash_args.json, "One JSON object on stdout");

  config = add_config(app, config_args);
}

int CommandLine::run() {
  if (show_version || *version) return run_version(version_args);
  if (*selftest) return run_selftest(selftest_args);
  if (*hash) return run_hash(hash_args);
  if (*inspect) return run_inspect(inspect_args);
  if (*convert) return run_convert(convert_args);
  if (*synth) return run_synth(synth_args);
  if (*load) return run_load(load_args);
  if (*plan) return run_plan(plan_args);
  if (*lock) return run_lock(lock_args);
  if (*verify) return run_verify(verify_args);
  if (*config) return run_config(config_args);
  std::fputs(app.help().c_str(), stdout);
  return 0;
}

}  // namespace qload::cli
