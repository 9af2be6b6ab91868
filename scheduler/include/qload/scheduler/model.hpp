// A loaded model: every tensor by name, the memory it lives in, and the load report.
//
// Model owns the arenas (read mode: host memory, or GPU memory for cuda devices) or the file
// mappings (mmap mode) its tensors point into; destroying it (or release()) frees them, so a DeviceTensor's pointer is
// valid exactly as long as its Model. Move-only. Thread-safety: const methods may be called from any number of threads
// at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qload/formats/quant.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/cuda_memory.hpp"
#include "qload/runtime/dtype.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/mapped_region.hpp"
#include "qload/runtime/shape.hpp"
#include "qload/scheduler/executor.hpp"
#include "qload/scheduler/plan.hpp"

namespace qload::scheduler {

struct DeviceTensor {
  std::string name;
  std::string device;               // "cpu", "cpu:1", "cuda:0"...
  const std::byte* data = nullptr;  // first byte; never dereference when nbytes == 0 (may be null)
  bool writable = false;            // false in mmap mode: the file's pages (a write makes a private copy)
  bool host = true;                 // false: `data` is a device pointer (use Model::copy_to_host)
  // In the caller's own memory (PlanOptions::destinations): the Model neither owns nor frees it.
  bool caller_owned = false;
  DType dtype = DType::kU8;  // as placed (after any dtype conversion on load)
  Shape shape;
  std::vector<std::int64_t> strides;  // in elements, row-major (empty for a scalar)
  std::uint64_t nbytes = 0;           // as placed

  // The bytes, writable: null unless `writable` and in host memory.
  std::byte* mutable_data() const noexcept { return writable && host ? const_cast<std::byte*>(data) : nullptr; }
  // The bytes in host memory; empty for a tensor in GPU memory.
  std::span<const std::byte> bytes() const noexcept {
    if (!host) return {};
    return {data, static_cast<std::size_t>(nbytes)};
  }
};

// A quantized weight kept packed (no dequantize policy): what a server hands to its own
// kernels. Its parts are ordinary tensors of the model, placed byte for byte and aligned.
struct QuantizedWeight {
  std::string name;  // "<prefix>.weight" (not itself a tensor of the model)
  formats::QuantParams params;
  std::uint64_t rows = 0;     // N (of this device's shard under tensor parallelism; of all its experts)
  std::uint64_t cols = 0;     // K (likewise)
  std::uint64_t experts = 0;  // stacked experts [E, N, K] on this device (rows = E * N); 0: not stacked
  std::string device;         // where its parts are: a parallel layout describes every copy
  // role ("qweight", "scales", "weight_scale_inv", ...) -> index into Model::tensors()
  std::vector<std::pair<std::string, std::uint32_t>> parts;
};

struct TensorDigest {
  std::string name;
  std::uint64_t xxh3_64 = 0;  // of the tensor's stored bytes (equals `xxhsum -H3` of them)
};

struct LoadReport {
  LoadMode mode = LoadMode::kRead;
  std::string engine;  // "io_uring", "pread" or "mmap"
  std::uint64_t tensors = 0;
  // Bytes of tensor data as stored in the files that this process read, or in mmap mode that its
  // views hand out (a region's view counts its own bytes): the part of the checkpoint it touched.
  std::uint64_t tensor_bytes = 0;
  std::uint64_t placed_bytes = 0;  // bytes of tensor data delivered (after dtype conversion)
  std::uint64_t converted_tensors = 0;
  std::uint64_t decoded_tensors = 0;  // weights dequantized or quantized on load
  std::uint64_t read_bytes = 0;       // bytes read from files (tensors, small gaps, alignment)
  std::uint64_t chunks = 0;           // read requests
  std::uint64_t direct_tensors = 0;   // tensors read straight into the arena
  // Shared reads: bytes of this process's copies that came from other processes' reads, received
  // through the communicator (Gloo for host memory, NCCL for GPUs).
  std::uint64_t shared_received_bytes = 0;
  double seconds = 0;   // the whole load: open, allocate, read, verify, place, check, shared reads' exchange
  double gb_per_s = 0;  // tensor_bytes / seconds / 1e9 (stored bytes: what was read)
  std::uint64_t staging_budget_bytes = 0;
  std::uint64_t peak_staging_bytes = 0;  // most staging bytes leased at once during this load
  // Why host memory could not be pinned for GPU copies (they then ran synchronously), or empty.
  std::string unpinned_reason;
  std::vector<StageStats> stages;  // busy seconds per stage ("read", "verify", "place")
  std::vector<ResourceStats> resources;
  std::vector<TensorDigest> digests;  // per tensor in catalog order; empty if digests were off
  io::ReaderStats io;
  // A streamed load (LoadContext::on_tensor, read mode): seconds from the load's start until the
  // first tensor was handed over, and until each tenth of the model's bytes had been
  // (tenths_seconds[k]: k + 1 tenths). Empty / zero for a load that did not stream.
  double first_tensor_seconds = 0;
  std::vector<double> tenths_seconds;

  // A few human-readable lines.
  std::string summary() const;
};

class Model {
 public:
  struct Parts {
    std::vector<std::shared_ptr<HostBuffer>> arenas;                 // shared with tensors streamed from them
    std::vector<std::shared_ptr<cuda::DeviceBuffer>> device_arenas;  // likewise
    // Mmap mode's mappings, shared with tensors streamed from them (as the arenas are).
    std::shared_ptr<std::vector<MappedRegion>> mappings;
    std::vector<DeviceTensor> tensors;  // catalog order, then tensors produced by decoding
    std::vector<QuantizedWeight> quantized;
    LoadReport report;
  };

  Model() = default;
  explicit Model(Parts parts);
  Model(Model&&) noexcept = default;
  Model& operator=(Model&&) noexcept = default;

  // Every tensor: stored ones in catalog (file) order (under a parallel layout, each copy in
  // device order), then those decoding produced (a dequantized weight, a quantized weight and
  // its scale).
  std::span<const DeviceTensor> tensors() const noexcept { return parts_.tensors; }
  std::size_t size() const noexcept { return parts_.tensors.size(); }
  // The tensor called `name`, or null. O(log n). Under a parallel layout a name has a copy
  // (a shard or replica) per device: this is the first device's.
  const DeviceTensor* find(std::string_view name) const;
  // The copy of `name` on `device` ("cpu:1", "cuda:0"; "cpu:0" and "cpu" are one), or null.
  const DeviceTensor* find(std::string_view name, std::string_view device) const;
  // Like find, but kNotFound naming the tensor.
  Result<const DeviceTensor*> get(std::string_view name) const;
  const LoadReport& report() const noexcept { return parts_.report; }
  // Quantized weights kept packed, with their parts; empty for an unquantized checkpoint.
  // Weights the load dequantized are plain tensors and not listed here.
  std::span<const QuantizedWeight> quantized() const noexcept { return parts_.quantized; }
  // What keeps a mapped model's tensors valid (mmap mode), for a consumer that outlives the
  // model (a stream); null otherwise.
  std::shared_ptr<const void> mappings_owner() const noexcept { return parts_.mappings; }
  // Copies bytes [offset, offset + out.size()) of a tensor (host or GPU memory) into `out`:
  // how --dump and tests read GPU tensors back. kInvalidArgument past the tensor's end.
  Status copy_to_host(const DeviceTensor& tensor, std::uint64_t offset, std::span<std::byte> out) const;

  // Frees the arenas (host and GPU) and mappings now; every pointer into them becomes invalid.
  void release() noexcept;

  // Counts the loader's steps after the model was assembled (the shared reads' exchange) in the
  // report's seconds and GB/s.
  void add_load_seconds(double seconds) noexcept;

 private:
  Parts parts_;
  std::vector<std::uint32_t> by_name_;  // tensor indices sorted by name
};

}  // namespace qload::scheduler
