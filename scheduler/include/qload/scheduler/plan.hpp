// The plan: what goes where, decided before any byte is read.
//
// Read mode: every tensor goes to one device (a simple placement when there are several) and
// gets an aligned offset in that device's arena (host memory for cpu devices, GPU memory for
// cuda:N), sized up front, in the tensor's placed dtype (a dtype policy converts floating
// tensors on load). The file bytes are cut into read chunks that coalesce
// neighbouring tensors in file order into reads of up to chunk_bytes. A tensor that fits in a
// chunk is never split (its digest is one hash, its chunk independent of the others); a larger
// one spans several chunks. Tensors of at least direct_min_bytes skip staging and are read
// straight into their arena slot (see docs/scheduler.md for when that pays); only on the host
// and without conversion. A converted tensor is only ever split at element boundaries, so each
// piece converts on its own.
//
// Mmap mode: every file with tensor bytes gets one read-only mapping covering exactly the
// validated tensor bytes (its start rounded down to a page), and tensors point into it.
//
// All arithmetic is overflow-checked: offsets and sizes come from untrusted headers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/device.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/scheduler/sharding.hpp"

namespace qload::scheduler {

enum class LoadMode : std::uint8_t {
  kRead,  // read (io_uring / pread) through the staging pool into owned host arenas
  kMmap,  // zero-copy: tensors point into read-only mappings of the files (cpu only)
};
std::string_view load_mode_name(LoadMode mode) noexcept;

// Which device a tensor goes to when a load has several.
enum class Placement : std::uint8_t {
  kRoundRobin,  // the i-th tensor in file order to devices[i % n]
  // Whole decoder layers per device, in order: the tensor named "...layers.<L>..." (also
  // "h.<L>", "blocks.<L>", "layer.<L>") to devices[L * n / layer_count]; layer-less tensors
  // whose name contains "embed" to the first device, every other layer-less one (final
  // norm, lm_head) to the last: where a pipeline's first and last stages need them.
  kByLayer,
};
std::string_view placement_name(Placement placement) noexcept;
// "round-robin" or "by-layer"; kInvalidArgument otherwise.
Result<Placement> parse_placement(std::string_view text);

// What to do with one weight, when a per-weight rule decides (PlanOptions::weight_policy).
struct WeightPolicy {
  enum class Action : std::uint8_t {
    kKeep,        // as stored: a quantized weight stays packed, a plain one unquantized
    kDequantize,  // a quantized weight decoded to `dtype`; a plain weight is kept
    kRepack,      // a quantized weight repacked as PlanOptions::repack does; a plain one kept
    kQuantize,    // a plain linear weight quantized to `target`; a quantized weight: an error
    // Both: a quantized weight decoded to `dtype`, then quantized to `target` when
    // quantize-on-load could take the decoded weight (2-D, its name not excluded), else left
    // decoded; a plain linear weight quantized to `target`.
    kRequantize,
  };
  Action action = Action::kKeep;
  DType dtype = DType::kBF16;                                            // kDequantize, kRequantize
  formats::QuantizeTarget target = formats::QuantizeTarget::kFp8Tensor;  // kQuantize, kRequantize
};

// The parallel layout of a load (docs/parallel.md): devices = data x pipeline x tensor, in
// that order, device index (d * pipeline + p) * tensor + t. Pipeline stage p holds whole
// decoder layers (as the by-layer placement assigns them), tensor rank t one shard of each of
// its tensors (PlanOptions::split), data replica d a full copy. Every byte of the checkpoint
// is still read once: a staged chunk feeds every shard and replica.
//
// Multi-process loads (one process per node, or per GPU): the layout's devices are spread over
// `processes` processes holding the same number of devices each (PlanOptions::devices, in
// order), process p the layout's devices [p * n, (p + 1) * n). Every process plans the whole
// layout, but places only its own devices' copies and reads only the byte ranges they need.
struct ParallelLayout {
  std::uint32_t tensor = 1;
  std::uint32_t pipeline = 1;
  std::uint32_t data = 1;
  std::uint32_t processes = 1;
  std::uint32_t process = 0;  // this process, < processes
  // Several processes share their reads (LoadOptions::communicator): each tensor is read by
  // one of the processes that hold a copy of it, chosen to balance the bytes, and reaches the
  // others after every process has read, so the world reads the checkpoint once. Processes
  // holding whole replicas (each one's devices a multiple of tensor x pipeline) get the
  // reader's own copies broadcast (TCP for host memory, NCCL for GPUs); otherwise (tensor or
  // pipeline parallel over processes, one process per GPU) the reader keeps the stored tensor
  // in host scratch and scatters each holder's copies to it over TCP. No decoding on load.
  bool share_reads = false;
  std::uint32_t devices() const noexcept { return tensor * pipeline * data; }
  bool trivial() const noexcept { return devices() == 1; }
};

struct PlanOptions {
  LoadMode mode = LoadMode::kRead;
  // Destinations, one arena each (no duplicates). mmap mode: exactly one cpu device.
  std::vector<Device> devices = {Device{}};
  Placement placement = Placement::kRoundRobin;
  // Dtype policy: floating tensors stored as F16, BF16 or F32 are converted to this dtype
  // (F16, BF16 or F32) as they are placed; other dtypes stay as stored. Parts of quantized
  // weights (scales, ...) are never converted. Read mode only.
  std::optional<DType> dtype;
  // Quantized weights (formats::detect_quantization) are dequantized to this dtype (F32, BF16
  // or F16) on load; unset: kept as their packed parts, byte for byte. Read mode only.
  std::optional<DType> dequantize;
  // Unquantized linear weights (2-D F16/BF16/F32 tensors named "*.weight" whose name has no
  // "embed", "embd", "norm" or "lm_head" and is not GGUF's "output.weight") are quantized on
  // load to this target; the scale lands in "<prefix>.weight_scale" ("weight_scale_inv" for
  // 128x128 blocks). With `dequantize` too, quantized weights that decode to such a weight are
  // requantized: decoded to `dequantize`, then quantized from those values (what converting
  // twice gives). Read mode only.
  std::optional<formats::QuantizeTarget> quantize;
  // Kept quantized weights in GPTQ v1 or AWQ GEMM, or with act-order g_idx, are repacked to
  // GPTQ v2 (true zero points) with contiguous groups; an act-order weight gets
  // "<prefix>.perm" (I32 [K]): input column k of the repacked weight is column perm[k] of the
  // original, so a server feeds x[perm]. Not with `dequantize`. Read mode only.
  bool repack = false;
  // GPTQ v1 zero points read by whole words (true) or per field (false), overriding what
  // detection chose from the checkpoint's writer (QuantParams::gptq_v1_whole_word); nullopt: keep.
  std::optional<bool> gptq_v1_whole_word;
  // Per-weight rules (a recipe's quant rules), asked once at plan time for every quantized
  // weight (by its logical name, "<prefix>.weight") and every plain weight quantize-on-load
  // could take: a policy overrides dequantize / quantize / repack for that weight, nullopt
  // leaves it to them. An error fails the plan. Read mode only.
  std::function<Result<std::optional<WeightPolicy>>(std::string_view name)> weight_policy;
  // Per-tensor placement (a recipe's placement hook), asked once per stored tensor at plan
  // time: an index into `devices`, or nullopt for `placement`. A decode output goes where its
  // first input goes. An error fails the plan.
  std::function<Result<std::optional<std::uint32_t>>(std::string_view name)> place;
  // Tensor, pipeline and data parallel placement; when not trivial it replaces `placement`
  // and needs parallel.devices() / parallel.processes devices. Read mode only. Quantizing and
  // repacking on load are refused (kUnsupported) with tensor or data parallelism or several
  // processes; dequantization is not: each device's copy of a dequantized weight is its shard
  // (or replica), decoded there.
  ParallelLayout parallel;
  // How each stored tensor splits over the tensor ranks (a recipe's rules), asked once per
  // tensor at plan time when parallel.tensor > 1; nullopt: the llama-style default
  // (sharding.hpp llama_split).
  std::function<Result<std::optional<Split>>(std::string_view name)> split;
  // Multi-process layouts: a tensor this process holds any part of is read whole, so its digest
  // can be computed and checked (LoadOptions::expected_xxh3_64); otherwise only the byte ranges
  // its copies need are read, and such a tensor gets no digest.
  bool whole_tensor_reads = false;
  std::uint64_t tensor_alignment = 256;  // each tensor's arena offset is a multiple (power of two)
  // Largest coalesced read; must fit a staging slot. 16 MiB: see StagingOptions.
  std::uint64_t chunk_bytes = std::uint64_t{16} << 20;
  // Neighbouring tensors separated by at most this many unused file bytes share a read
  // (reading a small gap is cheaper than another request).
  std::uint64_t max_gap_bytes = std::uint64_t{64} << 10;
  // Reads start on a multiple of this (when the chunk still fits), so O_DIRECT can take the
  // body of the read into a page-aligned slot. A power of two; 1 disables.
  std::uint64_t read_alignment = 4096;
  // Tensors of at least this many bytes are read straight into the arena, skipping the
  // staging copy; 0 disables the direct path. 1 MiB: on these 2-core machines the staging
  // copy halves warm-cache throughput, and at 1 MiB a read's fixed cost is already small;
  // smaller tensors still coalesce into large staged reads (docs/scheduler.md).
  std::uint64_t direct_min_bytes = std::uint64_t{1} << 20;
  // Budget for one device arena (read mode): a plan over it fails with kOutOfMemory. 0: no
  // budget; a read-mode load then refuses host arenas larger than the host's physical memory
  // before anything is allocated or read (a plan allocates nothing, so it is not refused).
  std::uint64_t max_arena_bytes = 0;

  Status validate() const;
};

// Where one tensor lands: `region` indexes Plan::arenas (read mode) or Plan::mappings (mmap
// mode), `offset` is the byte offset of its first byte in that region. A zero-byte tensor in
// mmap mode has no region (kNoRegion): it needs no bytes.
inline constexpr std::uint32_t kNoRegion = 0xffffffffu;
struct TensorPlacement {
  std::uint32_t region = 0;
  std::uint64_t offset = 0;
  // Under a parallel layout, the tensor's copies are Plan::shards[first_shard, +shard_count)
  // (region and offset are then the first shard's); 0: placed once, here.
  // A multi-process layout may leave a tensor no copy here: region kNoRegion, no shards.
  std::uint32_t first_shard = 0;
  std::uint32_t shard_count = 0;
  // Multi-process layouts: only the byte ranges this process's copies need are read (the
  // tensor's digest cannot be computed here).
  bool partial = false;
  // Shared reads (ParallelLayout::share_reads): process `reader` reads the tensor; on the
  // other processes holding copies it is `received` (not read: it arrives from the reader
  // while the load goes on). Under SharedReads::kRelay the reader (`relayed`) cuts the other
  // holders' copies into its relay arena (Plan::relay_region) as it reads, from where they are
  // sent: Plan::relayed[relay_index].
  bool received = false;
  std::uint32_t reader = 0;
  bool relayed = false;
  std::uint32_t relay_index = 0;
  bool direct = false;       // read mode: read straight into the arena, not through staging
  DType dtype = DType::kU8;  // as placed (the stored dtype unless the dtype policy converts it)
  std::uint64_t bytes = 0;   // as placed
};

struct ArenaPlan {
  // Scratch: a host arena holding the inputs of decode jobs (packed parts, weights to
  // quantize), or copies on their way to other processes, for the duration of the load; never
  // part of the Model.
  bool scratch = false;
  Device device;
  std::uint64_t bytes = 0;      // exact: the end of the last tensor placed in it
  std::uint64_t alignment = 0;  // the arena's own start alignment (>= tensor_alignment)
};

struct MappingPlan {
  std::uint32_t file = 0;
  std::uint64_t offset = 0;  // page-aligned file offset where the mapping starts
  std::uint64_t bytes = 0;   // up to the end of the last tensor byte (never past it)
};

// One copy of a stored tensor under a parallel layout: its tensor-parallel shard (or the whole
// tensor, replicated) on one device.
struct ShardPlacement {
  std::uint32_t tensor = 0;  // index into catalog.tensors
  std::uint32_t rank = 0;    // tensor-parallel rank
  std::uint32_t region = 0;  // arena
  std::uint64_t offset = 0;
  DType dtype = DType::kU8;  // as placed
  std::uint64_t bytes = 0;   // as placed
  Split split = Split::kReplicate;
  ShardSlice slice;
};

// How the processes of a shared-read load exchange tensors (ParallelLayout::share_reads).
enum class SharedReads : std::uint8_t {
  kNone,
  kBroadcast,  // processes hold whole replicas: each reader broadcasts its own copies
  kRelay,      // processes hold different copies: each reader scatters the others' (Plan::relayed)
};

// Under SharedReads::kRelay, a tensor held by several processes: the other holders' copies,
// each cut (and converted) by the reader from the stored tensor as placed, into its relay
// arena, and sent from there.
struct RelayedTensor {
  std::uint32_t tensor = 0;  // index into catalog.tensors
  std::uint32_t reader = 0;
  DType dtype = DType::kU8;  // as placed
  struct Copy {
    std::uint32_t process = 0;
    ShardSlice slice;
    std::uint64_t bytes = 0;   // as placed
    std::uint64_t offset = 0;  // in the reader's relay arena
  };
  // Every holder's copies but the reader's, by process, each process's in its shard order.
  std::vector<Copy> copies;
  std::vector<std::uint64_t> bytes_to;  // [process]: the bytes its copies take (0 for the reader)
};

// A slice of one tensor carried by a chunk.
struct ChunkPiece {
  std::uint32_t tensor = 0;         // index into catalog.tensors
  std::uint64_t chunk_offset = 0;   // where the slice starts in the chunk's read
  std::uint64_t tensor_offset = 0;  // where the slice starts in the tensor
  std::uint64_t bytes = 0;
  // A direct read into one shard (Plan::shards index) of a tensor split by whole rows: the
  // slice lands at `shard_offset` in that shard. kNoRegion otherwise.
  std::uint32_t shard = kNoRegion;
  std::uint64_t shard_offset = 0;
};

// One read request: bytes [file_offset, file_offset + bytes) of `file`.
struct ReadChunk {
  std::uint32_t file = 0;
  std::uint64_t file_offset = 0;
  std::uint64_t bytes = 0;
  bool direct = false;             // lands in the arena (one piece of one tensor), not in staging
  std::vector<ChunkPiece> pieces;  // in file order
};

// A tensor a decode job produces: where it lands (like TensorPlacement) and what it is.
struct DecodeOutput {
  std::string name;
  std::string role;  // kRepack: the part this output is ("qweight", "perm", ...)
  DType dtype = DType::kF32;
  Shape shape;
  std::uint32_t region = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

// Work done on whole tensors once their bytes are in the scratch arena: dequantize one
// logical tensor (rows split over several tasks), quantize one weight into weight + scale,
// repack one quantized weight's parts, requantize one (dequantize it to `through` in host
// memory, then quantize that to `target`; outputs as kQuantize's), or make a strided view
// (formats::TensorEntry::strides) row-major, in the dtype the policy places it in.
struct DecodeJob {
  enum class Kind : std::uint8_t { kDequantize, kQuantize, kRepack, kRequantize, kContiguous };
  Kind kind = Kind::kDequantize;
  std::uint32_t logical = 0;      // kDequantize, kRepack, kRequantize: index into Plan::quant->logical
  DType through = DType::kF32;    // kRequantize
  formats::QuantParams repacked;  // kRepack: the weight's parameters after repacking
  std::uint32_t input = 0;        // kQuantize, kContiguous: the catalog tensor quantized or gathered
  formats::QuantizeTarget target = formats::QuantizeTarget::kFp8Tensor;  // kQuantize, kRequantize
  std::vector<std::uint32_t> inputs;  // catalog tensors read into scratch for this job
  // dequantize: the weight; quantize, requantize: weight, scale; repack: every part, rewritten
  std::vector<DecodeOutput> outputs;
  // Tensor parallel (every kind): this job decodes tensor rank `rank`'s shard of the weight
  // (output shape [N, K] of the shard). Each part is first cut to the rank's slice, in the
  // scratch arena, then the slices decode as a weight of the shard's geometry
  // (Plan::sharded_weights). Empty: the whole parts decode (a replica, or no tensor split).
  struct ShardInput {
    std::uint32_t tensor = 0;  // the part (catalog index), whole in scratch
    ShardSlice slice;          // the rank's slice of it
    std::uint64_t offset = 0;  // where the slice goes in the scratch arena
    std::uint64_t bytes = 0;
  };
  std::vector<ShardInput> shard_inputs;
  std::uint32_t rank = 0;
};

struct Plan {
  LoadMode mode = LoadMode::kRead;
  std::vector<ArenaPlan> arenas;                   // read mode: one per device, in PlanOptions::devices order
  std::vector<MappingPlan> mappings;               // mmap mode: one per file holding tensor bytes
  std::vector<TensorPlacement> tensors;            // parallel to catalog.tensors
  std::vector<ReadChunk> chunks;                   // read mode, in file order
  std::optional<formats::QuantizedCatalog> quant;  // the detected scheme (none if detection failed)
  std::string quant_warning;                       // why detection failed when no policy needed it (the load goes on)
  std::vector<DecodeJob> decodes;
  std::vector<ShardPlacement> shards;  // parallel layouts: every copy of every stored tensor
  // Tensor parallel: each rank's shard of each quantized weight (by index into quant->logical),
  // whose parts are split consistently (every part's ShardPlacement::rank).
  struct ShardedWeight {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> dims;  // [rank]: N, K (N of all its experts)
    std::uint64_t groups = 0;                                   // formats::QuantParams::groups
    std::uint64_t experts = 0;                                  // stacked experts: each rank's count
    // The weight rank `rank` holds, as a weight of its own geometry (rows, cols, groups, experts).
    formats::LogicalTensor shard(const formats::LogicalTensor& whole, std::uint32_t rank) const;
  };
  std::map<std::uint32_t, ShardedWeight> sharded_weights;
  SharedReads shared_reads = SharedReads::kNone;  // ParallelLayout::share_reads
  std::vector<RelayedTensor> relayed;             // SharedReads::kRelay, the same on every process, file order
  std::uint32_t scratch_region = kNoRegion;       // index of the scratch arena in `arenas`, if any
  std::uint32_t relay_region = kNoRegion;         // the relay arena (SharedReads::kRelay: copies sent), if any
  std::uint64_t tensor_alignment = 0;             // PlanOptions::tensor_alignment (read mode)
  std::uint64_t tensor_bytes = 0;                 // sum of tensor sizes as stored
  std::uint64_t placed_bytes = 0;                 // sum of tensor sizes as placed (after conversion)
  std::uint32_t converted_tensors = 0;            // tensors whose dtype the policy changes
  std::uint64_t read_bytes = 0;                   // sum of chunk sizes (tensors + gaps + alignment)
  std::uint64_t max_staged_chunk_bytes = 0;       // largest chunk that goes through staging
  std::uint32_t direct_tensors = 0;
};

// Plans loading `catalog`. Errors: kInvalidArgument (options), kUnsupported (mmap to a GPU),
// kOverflow (offset + size, arena size), kOutOfMemory (arena over max_arena_bytes), kTruncated (a tensor past its
// file's validated end), kCorrupt (bytes inconsistent with dtype x shape, unknown file index); each names the tensor
// and file.
Result<Plan> make_plan(const formats::Catalog& catalog, const PlanOptions& options);

}  // namespace qload::scheduler
