// The session layer: what every client (the CLI, the C ABI, the Python package) goes through
// to load. A LoadSpec says what to load and how, in client-neutral terms; it becomes a
// LoadRequest (recipe evaluated, settings resolved, options built), then a PlannedLoad
// (checkpoint opened and planned, lock checked), then a model (session/load.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qload/distributed/world.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/settings.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/scripts/recipe.hpp"

namespace qload::session {

// A setting given by the client (a flag, an API option): `where` names it in errors
// ("--set staging_bytes", "qload_options_set").
struct SettingFlag {
  std::string name;
  std::string value;
  std::string where;
};

// How a client names the fields of a LoadSpec, for its errors: "--device" on the command line,
// "qload_options.devices" in the C ABI (spec_names, from the one table in spec_fields.hpp). By
// default, the fields' own names.
struct SpecNames {
  std::string devices = "devices";
  std::string placement = "placement";
  std::string dtype = "dtype";
  std::string dequantize = "dequantize";
  std::string tensor_parallel = "tensor_parallel";
  std::string pipeline_parallel = "pipeline_parallel";
  std::string data_parallel = "data_parallel";
  std::string share_reads = "share_reads";
  std::string lock = "lock";
  std::string recipe = "recipe";
};

// What to load and how. Empty strings and zeros mean "the recipe's, else the default". A
// recipe's choices of what to load (devices, placement, dtype, layout, lock) may not be
// contradicted (kInvalidArgument); its settings sit below the environment and `settings`.
struct LoadSpec {
  std::string source;      // checkpoint (directory, .safetensors, index json) or recipe (.lua)
  std::string recipe;      // a recipe (.lua) applied to the checkpoint `source` (its own `source` unused)
  std::string devices;     // comma-separated; "cuda:local" is LOCAL_RANK's GPU
  std::string placement;   // round-robin | by-layer
  std::string dtype;       // bf16 | f16 | f32: convert floating tensors
  std::string dequantize;  // bf16 | f16 | f32: decode quantized weights (default: keep packed)
  std::string quantize;    // fp8[:per-tensor|per-channel|block] | int8
  bool repack = false;     // GPTQ v1 / AWQ GEMM / act-order -> GPTQ v2, contiguous groups
  std::uint32_t tensor_parallel = 0;
  std::uint32_t pipeline_parallel = 0;
  std::uint32_t data_parallel = 0;
  bool share_reads = false;           // several processes: each tensor read by one of those holding it
  std::string lock;                   // a lockfile the load must match (also a recipe's `verify`)
  std::string trace;                  // write a Chrome trace of the load here (also a recipe's `trace`)
  bool overwrite = false;             // a recipe's `trace` may replace an existing file (the spec's always may)
  std::vector<SettingFlag> settings;  // above every other source
  // Parts of tensors to load instead of the whole ones, by stored tensor name
  // (scheduler::PlanOptions::region): a server that cuts each tensor itself says which part
  // this process keeps, and only that part is read. With a lock, such tensors are read whole
  // so that their digests are checked, and the plan hash is not compared.
  std::map<std::string, scheduler::TensorRegion> regions;
  // Memory the caller owns, by tensor name (scheduler::PlanOptions::destinations): each tensor
  // (or its region) is read, converted or decoded straight into it. With destinations_only,
  // tensors without one are not read at all. With a lock, destined regions are read whole so
  // their digests are checked, and the plan hash (which holds the addresses) is not compared.
  std::map<std::string, scheduler::Destination, std::less<>> destinations;
  bool destinations_only = false;
  SpecNames names;  // of the fields above, in errors
  // The processes of the load, for a server that already knows its own (rank, world size,
  // rendezvous address and token): used instead of the torchrun variables of the environment.
  // Unset: the environment's (world_from_env), or a single process.
  std::optional<distributed::World> world;
  // A server's own NCCL communicators (ncclComm_t), one per device of this process in order,
  // null for a cpu device, over the world's ranks: used, instead of new ones, when GPU memory
  // moves between processes (shared reads). Borrowed: they must outlive the load; qload never
  // destroys them, but aborts them if a broadcast on them fails or hangs (Communicator::create).
  std::vector<void*> nccl_comms;
};

// The spec's world, else the environment's; nullopt for a single process.
Result<std::optional<distributed::World>> world_of(const LoadSpec& spec);

// "NAME=VALUE" texts (`--set`) as settings named `where_prefix NAME` in errors;
// kInvalidArgument without the '='.
Result<std::vector<SettingFlag>> parse_setting_assignments(const std::vector<std::string>& assignments,
                                                           std::string_view where_prefix);

struct LoadRequest {
  std::string source;
  std::optional<scripts::Recipe> recipe;  // when the spec's source was a recipe
  std::string devices = "cpu";            // as given, for reports
  scheduler::LoadOptions options;
  // One process of a multi-process load (torchrun-style environment, world.hpp): its
  // layout's processes and process are the world's size and rank.
  std::optional<distributed::World> world;
  std::vector<void*> nccl_comms;  // the spec's
  // The spec's regions (options.plan.region asks them); each must name a tensor of the checkpoint.
  std::map<std::string, scheduler::TensorRegion> regions;
  // Every setting (runtime/settings.hpp) and where it came from: default < recipe <
  // environment < the spec's; already applied to `options`.
  ResolvedSettings settings;
  std::string lock;              // the lockfile to check: the spec's, else the recipe's `verify`; empty for none
  std::string trace;             // the spec's, else the recipe's; empty for none
  bool trace_overwrite = false;  // whether `trace` may replace a file: the spec's, or the spec said overwrite
};

// Gives a request built earlier its destinations (LoadSpec::destinations), as build_request does
// for a spec's: a client that opens first and learns the caller's memory later (qload_load_into).
// kUnsupported for one rank of a multi-process load.
Status set_destinations(LoadRequest& request, std::map<std::string, scheduler::Destination, std::less<>> destinations,
                        bool only);

// Evaluates the recipe (if the source is one), resolves the settings and builds the options.
// Warnings (an unknown QLOAD_* variable) go to `log`, which the load's options also keep.
Result<LoadRequest> build_request(const LoadSpec& spec, const Logger& log);

// The settings of a load: `recipe`'s (if any), then the environment, then `flags`.
Result<ResolvedSettings> resolve_settings(const scripts::Recipe* recipe, const std::vector<SettingFlag>& flags,
                                          const Logger& log);
// The same for `source`: a `.lua` recipe is evaluated for its settings; anything else (a
// checkpoint, or "") has none of its own.
Result<ResolvedSettings> resolve_settings(const std::string& source, const std::vector<SettingFlag>& flags,
                                          const Logger& log);

// A request with its checkpoint opened and planned: what `qload plan`, `qload lock` and
// `qload load` share.
struct PlannedLoad {
  LoadRequest request;
  formats::Catalog catalog;
  scheduler::Plan plan;
  std::uint64_t plan_hash = 0;  // plan_report.hpp
};
Result<PlannedLoad> plan_request(LoadRequest request);

// plan_request, then the lock (if any) applied.
Result<PlannedLoad> prepare(LoadRequest request);

// Before anything is read: kChecksumMismatch naming the lock unless the recipe hash, the plan
// hash, the files (names, sizes) and the tensor names match it; then every tensor's digest
// becomes an expected digest, so the load fails (exposing nothing) if any byte differs. One
// process of a multi-process load skips the plan hash (a lock records a single-process plan;
// the ranks check their plans against each other instead) and reads whole every tensor it
// holds part of, so every digest it meets is checked.
Status apply_lock(const std::string& lock_file, PlannedLoad& load);

}  // namespace qload::session
