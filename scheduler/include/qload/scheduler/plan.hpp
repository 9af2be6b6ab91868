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
// Host file-image layout (the default for cpu arenas): tensors kept as stored lie in the arena
// as in their file, congruent modulo kFileImageAlignment, in spans of neighbouring tensors
// (gaps of at most max_gap_bytes read through). Each span is read straight into place in
// chunk_bytes reads cut on aligned file offsets, its first read rounded down and its last up
// (within the file), so every byte but a span's last partial block can go O_DIRECT.
//
// Mmap mode: every file with tensor bytes gets one read-only mapping covering exactly the
// validated tensor bytes (its start rounded down to a page), and tensors point into it.
//
// All arithmetic is overflow-checked: offsets and sizes come from untrusted headers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qload/formats/catalog.hpp"
#include "qload/formats/quant.hpp"
#include "qload/formats/quant_codec.hpp"
#include "qload/runtime/device.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/scheduler/plan_options.hpp"
#include "qload/scheduler/sharding.hpp"

namespace qload::scheduler {

// Where one tensor lands: `region` indexes PlanLayout::arenas (read mode) or
// PlanLayout::mappings (mmap mode), `offset` is the byte offset of its first byte in that region.
// A zero-byte tensor in mmap mode has no region (kNoRegion): it needs no bytes.
inline constexpr std::uint32_t kNoRegion = 0xffffffffu;
struct TensorPlacement {
  std::uint32_t region = 0;
  std::uint64_t offset = 0;
  // Under a parallel layout, the tensor's copies are Plan::copies.shards[first_shard, +shard_count)
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
  // holders' copies into its relay arena (CopyPlan::relay_region) as it reads, from where they
  // are sent: CopyPlan::relayed[relay_index].
  bool received = false;
  std::uint32_t reader = 0;
  bool relayed = false;
  std::uint32_t relay_index = 0;
  bool direct = false;  // read mode: read straight into the arena, not through staging
  // Host file-image layout (PlanOptions::host_layout): placed congruent to its file offset,
  // as a member of a span of its file read whole into place (make_chunks); `starts_span` on
  // the first member of each span. A span's reads are rounded out to kFileImageAlignment into
  // padding the layout leaves free around it.
  bool image = false;
  bool starts_span = false;
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
  // The caller's memory (PlanOptions::destinations) on `device`, from `address` for `bytes`:
  // one such arena per device holds every destination there, each tensor at its address minus
  // `address`. Never allocated, zeroed or freed by the load, and only the destinations' bytes
  // are written (the gaps between them are someone else's memory).
  bool external = false;
  std::uintptr_t address = 0;
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
  // A caller's destination with gaps between its rows (Destination::row_pitch): bytes from one
  // placed dim-0 row to the next in the arena. 0: rows packed.
  std::uint64_t row_pitch = 0;
  // The placed bytes of one dim-0 row of slice.shape; 0 for a scalar or no rows.
  std::uint64_t row_bytes() const noexcept {
    return slice.shape.rank() == 0 || slice.shape[0] == 0 ? 0 : bytes / slice.shape[0];
  }
  // The arena bytes from the first placed byte to the last: bytes, or with a row pitch the rows
  // and the gaps between them.
  std::uint64_t extent() const noexcept {
    return row_pitch == 0 || bytes == 0 ? bytes : (slice.shape[0] - 1) * row_pitch + row_bytes();
  }
};

// How the processes of a shared-read load exchange tensors (ParallelLayout::share_reads).
enum class SharedReads : std::uint8_t {
  kNone,
  kBroadcast,  // processes hold whole replicas: each reader broadcasts its own copies
  kRelay,      // processes hold different copies: each reader scatters the others' (Plan::copies.relayed)
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
  // A direct read into one shard (Plan::copies.shards index) of a tensor split by whole rows: the
  // slice lands at `shard_offset` in that shard. kNoRegion otherwise.
  std::uint32_t shard = kNoRegion;
  std::uint64_t shard_offset = 0;
};

// One read request: bytes [file_offset, file_offset + bytes) of `file`.
struct ReadChunk {
  std::uint32_t file = 0;
  std::uint64_t file_offset = 0;
  std::uint64_t bytes = 0;
  // Lands in the arena, not in staging: one piece of one tensor, or (a file-image span) every
  // piece of its tensors, read to where the first piece's tensor places it minus its chunk_offset.
  bool direct = false;
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
  std::uint32_t logical = 0;      // kDequantize, kRepack, kRequantize: index into Plan::decode.quant->logical
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
  // (Plan::decode.sharded_weights). Empty: the whole parts decode (a replica, or no tensor split).
  struct ShardInput {
    std::uint32_t tensor = 0;  // the part (catalog index), whole in scratch
    ShardSlice slice;          // the rank's slice of it
    std::uint64_t offset = 0;  // where the slice goes in the scratch arena
    std::uint64_t bytes = 0;
  };
  std::vector<ShardInput> shard_inputs;
  std::uint32_t rank = 0;
};

// A plan in four parts, each with one job.

// Where every tensor lands: the regions (device arenas in read mode, file mappings in mmap
// mode) and each stored tensor's place in them.
// A destination's rows in the caller's order (Destination::rows) that are a permutation of the
// tensor's rows: the tensor is read whole and straight into the destination, in file order (its
// digest is the stored bytes'), then its rows are moved in place so that row j holds stored row
// source[j].
struct RowPermutation {
  std::uint32_t tensor = 0;           // index into catalog.tensors
  std::vector<std::uint64_t> source;  // [row of the destination]: the stored row it takes
};

struct PlanLayout {
  std::vector<ArenaPlan> arenas;             // read mode: one per device, in PlanOptions::devices order
  std::vector<RowPermutation> permuted;      // tensors read straight into a destination, then permuted
  std::vector<MappingPlan> mappings;         // mmap mode: one per file holding tensor bytes
  std::vector<TensorPlacement> tensors;      // parallel to catalog.tensors
  std::uint32_t scratch_region = kNoRegion;  // index of the scratch arena in `arenas`, if any
  std::uint64_t tensor_alignment = 0;        // PlanOptions::tensor_alignment (read mode)
  std::uint64_t tensor_bytes = 0;            // sum of tensor sizes as stored
  std::uint64_t placed_bytes = 0;            // sum of tensor sizes as placed (after conversion)
  std::uint32_t converted_tensors = 0;       // tensors whose dtype the policy changes
};

// Which file bytes are read, in which requests (read mode).
struct ReadPlan {
  std::vector<ReadChunk> chunks;             // in file order
  std::uint64_t read_bytes = 0;              // sum of chunk sizes (tensors + gaps + alignment)
  std::uint64_t max_staged_chunk_bytes = 0;  // largest chunk that goes through staging
  std::uint32_t direct_tensors = 0;          // tensors read straight into their arena
};

// Tensor parallel: each rank's shard of one quantized weight, whose parts are split
// consistently (every part's ShardPlacement::rank).
struct ShardedWeight {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> dims;  // [rank]: N, K (N of all its experts)
  std::uint64_t groups = 0;                                   // formats::QuantParams::groups
  std::uint64_t experts = 0;                                  // stacked experts: each rank's count
  // The weight rank `rank` holds, as a weight of its own geometry (rows, cols, groups, experts).
  formats::LogicalTensor shard(const formats::LogicalTensor& whole, std::uint32_t rank) const;
};

// What is decoded once bytes are in: the detected quantization and the jobs that dequantize,
// quantize, repack or gather tensors.
struct DecodePlan {
  std::optional<formats::QuantizedCatalog> quant;  // the detected scheme (none if detection failed)
  std::string quant_warning;                       // why detection failed when no policy needed it (the load goes on)
  std::vector<DecodeJob> jobs;
  std::map<std::uint32_t, ShardedWeight> sharded_weights;  // by index into quant->logical
};

// Every copy of every stored tensor under a parallel layout, and how the processes of a
// shared-read load exchange them.
struct CopyPlan {
  std::vector<ShardPlacement> shards;             // every copy of every stored tensor
  SharedReads shared_reads = SharedReads::kNone;  // ParallelLayout::share_reads
  std::vector<RelayedTensor> relayed;             // SharedReads::kRelay, the same on every process, file order
  std::uint32_t relay_region = kNoRegion;         // the relay arena (SharedReads::kRelay: copies sent), if any
};

struct Plan {
  LoadMode mode = LoadMode::kRead;
  PlanLayout layout;
  ReadPlan reads;
  DecodePlan decode;
  CopyPlan copies;
};

// Plans loading `catalog`. Errors: kInvalidArgument (options), kUnsupported (mmap to a GPU),
// kOverflow (offset + size, arena size), kOutOfMemory (arena over max_arena_bytes), kTruncated
// (a tensor past its file's validated end), kCorrupt (bytes inconsistent with dtype x shape,
// unknown file index); each names the tensor and file.
Result<Plan> make_plan(const formats::Catalog& catalog, const PlanOptions& options);

}  // namespace qload::scheduler
