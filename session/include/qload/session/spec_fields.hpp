// The one table of what a client can ask of a load (LoadSpec's fields) and how each client
// spells it: the `qload load` flag, the C ABI's qload_options member or function, the Python
// keyword. The names clients use in errors (SpecNames) come from it, `qload config
// --spec-fields` prints it (docs/cli.md holds it verbatim), and tests check that every client
// takes every field under the name written here (tests/cli/spec_fields.sh for the CLI and C,
// python/tests/test_load.py for Python). An empty name: that client does not take the field,
// as the table says.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "qload/session/request.hpp"

namespace qload::session {

struct SpecField {
  std::string_view field;   // LoadSpec's member (a recipe's field where it has one)
  std::string_view cli;     // `qload load`'s flag
  std::string_view c;       // qload_options' member, or the function that takes it
  std::string_view python;  // the keyword of qload.load / qload.stream, or the function
  std::string_view what;
};

// clang-format off
inline constexpr std::array<SpecField, 20> kSpecFields{{
    {"source", "PATH", "qload_open", "source", "checkpoint (directory, file, index json, Hugging Face id) or recipe"},
    {"recipe", "--recipe", "recipe", "recipe", "a recipe (.lua) applied to the checkpoint"},
    {"devices", "--device", "devices", "device", "cpu, cuda:N, or a comma-separated list"},
    {"placement", "--placement", "placement", "placement", "round-robin or by-layer over several devices"},
    {"dtype", "--dtype", "dtype", "dtype", "convert floating tensors: bf16, f16 or f32"},
    {"dequantize", "--dequantize", "dequantize", "dequantize", "decode quantized weights: bf16, f16 or f32"},
    {"quantize", "--quantize", "quantize", "quantize", "fp8 (per-tensor, per-channel or block) or int8"},
    {"repack", "--repack", "repack", "repack", "GPTQ v1 / AWQ / act-order weights to GPTQ v2"},
    {"tensor_parallel", "--tp", "tensor_parallel", "tensor_parallel", "tensor-parallel ranks"},
    {"pipeline_parallel", "--pp", "pipeline_parallel", "pipeline_parallel", "pipeline stages"},
    {"data_parallel", "--dp", "data_parallel", "data_parallel", "data-parallel replicas"},
    {"share_reads", "--share-reads", "share_reads", "share_reads", "several processes: each tensor read by one of them"},
    {"lock", "--locked", "lock", "lock", "a lockfile the load must match"},
    {"trace", "--trace", "", "", "write a Chrome trace of the load"},
    {"overwrite", "--overwrite", "", "", "a recipe's trace may replace an existing file"},
    {"settings", "--set", "qload_options_set", "settings", "any setting of the settings table"},
    {"regions", "", "qload_options_set_region", "regions", "rows or columns of a tensor to load instead of all"},
    {"destinations", "", "qload_load_into", "load_into", "the caller's own memory to load tensors into"},
    {"world", "", "world_size", "world", "this process's place among the load's processes (else the environment's)"},
    {"nccl_comms", "", "nccl_comms", "", "the server's own NCCL communicators"},
}};
// clang-format on

enum class SpecClient { kCli, kC, kPython };

// How `client` names the fields in errors: "--device" on the command line,
// "qload_options.devices" in C, "device" in Python.
SpecNames spec_names(SpecClient client);

// The table in Markdown (`qload config --spec-fields`).
std::string spec_fields_markdown();

}  // namespace qload::session
