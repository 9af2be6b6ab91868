// What a plan is asked for: the load mode, destinations, placement, dtype and quantization
// policies, the parallel layout, and the knobs of read chunking and arena layout. The plan
// itself (what goes where) is plan.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/device.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/shape.hpp"
#include "qload/scheduler/sharding.hpp"

namespace qload::scheduler {

enum class LoadMode : std::uint8_t {
  kRead,  // read (io_uring / pread) through the staging pool into owned host arenas
  kMmap,  // zero-copy: tensors point into private mappings of the files (cpu only)
  kAuto,  // mmap when it can serve the load and the page cache holds the files, else read;
          // make_plan decides, and the plan says which (Plan::mode)
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
  // Several processes share their reads (LoadContext::communicator): each tensor is read by
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

// Host arena layouts (PlanOptions::host_layout).
enum class HostLayout : std::uint8_t { kFileImage, kAligned };
// The congruence a file-image arena keeps between addresses and file offsets: O_DIRECT's
// alignment on every file system qload reads from (a logical block is 512 B or 4 KiB).
inline constexpr std::uint64_t kFileImageAlignment = 4096;

// Memory the caller owns for one tensor (PlanOptions::destinations): where the tensor's (or its
// region's) placed bytes go, row-major, each dim-0 row contiguous and the rows contiguous or
// `row_pitch` apart.
struct Destination {
  Device device;               // cpu (host memory), or cuda:N (device memory)
  std::uintptr_t address = 0;  // the first byte: a host pointer, or a device pointer on `device`
  std::uint64_t bytes = 0;     // the placed bytes (rows x row bytes, without the gaps between rows)
  // Bytes from the start of one dim-0 row to the next: 0 (or the row's own bytes) for packed
  // rows; more for a view of some columns of a larger row-major tensor, such as a quantized
  // weight's column-parallel part inside a fused parameter ([K/8, N_q + N_k + N_v] packed
  // rows): the bytes between rows are the caller's and are never written. Not below the row's
  // bytes (rows would overlap), and a whole number of elements.
  std::uint64_t row_pitch = 0;
  DType dtype = DType::kU8;  // the stored dtype, or F16 / BF16 / F32 for a float one (kept scales too)
  // Only this part of a stored tensor (as PlanOptions::region); nullopt: the whole tensor.
  std::optional<TensorRegion> region;
  // Or whole rows of a stored tensor in the caller's order: ranges [begin, end) of dim 0, placed
  // one after another (a row permutation such as RoPE's interleaving, rows repeated or left
  // out). Empty: not used. Not with `region`.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rows;
  // The caller's shape for it, when it has one (a DLPack tensor's): must equal the shape placed
  // (the tensor's, or its region's). nullopt: only `bytes` is checked.
  std::optional<Shape> shape;
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
  // Per-tensor regions, for a server that cuts each tensor itself (vLLM's weight loaders, under
  // tensor parallelism, narrow every tensor to their rank's part): asked once per stored tensor
  // at plan time. A region replaces the tensor by that part of it (same name, its own shape),
  // and only the region's bytes are read unless whole_tensor_reads; nullopt: the whole tensor.
  // One device, read mode, no parallel layout or placement hook, nothing decoded, quantized or
  // repacked (kUnsupported). An error fails the plan.
  std::function<Result<std::optional<TensorRegion>>(std::string_view name)> region;
  // Caller-owned memory (load_into), by tensor name: a stored tensor, or a tensor decoding
  // produces (a dequantized weight). Each is read, converted or decoded straight into the
  // caller's memory; the load never allocates, zero-fills or frees it, and writes nothing outside
  // it. Read mode, no parallel layout (kUnsupported). Checked at plan time, before any byte is
  // read: the name exists and is not a decode input (kNotFound / kInvalidArgument), `bytes` is
  // exactly what is placed, the dtype is the stored one or a float conversion of a plain float
  // tensor, the address is aligned to the element, and no two destinations overlap.
  std::map<std::string, Destination, std::less<>> destinations;
  // Tensors without a destination: placed in arenas as usual (false), or not read at all (true;
  // decode jobs none of whose outputs has a destination are dropped with them).
  bool destinations_only = false;
  // Multi-process layouts and regions: a tensor this process holds any part of is read whole, so its digest
  // can be computed and checked (LoadOptions::expected_xxh3_64); otherwise only the byte ranges
  // its copies need are read, and such a tensor gets no digest.
  bool whole_tensor_reads = false;
  std::uint64_t tensor_alignment = 256;  // each tensor's arena offset is a multiple (power of two)
  // How host arenas are laid out (read mode; cpu devices, tensors kept in their stored dtype,
  // not under a parallel layout or a region). kFileImage: each file's tensors lie as they lie in
  // the file, every tensor's address congruent to its file offset modulo kFileImageAlignment
  // (its alignment is then its alignment in the file), so whole aligned spans of a file are
  // read with O_DIRECT straight into place in large requests (plan.hpp). kAligned: each tensor
  // at a multiple of tensor_alignment, as on devices. A tensor whose file offset is not a
  // multiple of its element's alignment is placed as kAligned places it.
  HostLayout host_layout = HostLayout::kFileImage;
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

}  // namespace qload::scheduler
