// The C++ API a server embeds: open a source, plan, load, use the tensors, release.
//
//   auto catalog = scheduler::open_source("models/llama");      // formats::open_catalog
//   auto plan = scheduler::make_plan(*catalog, options.plan);     // what goes where
//   auto model = scheduler::load(*catalog, *plan, options);       // Result<Model>
//   (or load(*catalog, *plan, options, {.on_tensor = ...}) with the call's hooks)
//   const DeviceTensor* w = model->find("lm_head.weight");
//
// A load returns a complete Model or an error: on error every descriptor, staging slot,
// arena, mapping and thread is released before load() returns. See docs/embedding.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stop_token>
#include <string>

#include "qload/distributed/communicator.hpp"
#include "qload/formats/catalog.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"
#include "qload/runtime/settings.hpp"
#include "qload/runtime/trace.hpp"
#include "qload/scheduler/model.hpp"
#include "qload/scheduler/plan.hpp"
#include "qload/scheduler/staging_pool.hpp"

namespace qload::scheduler {

// What one call of load() is handed besides its options: the caller's hooks and the objects it
// shares for that call only, none owned. Options describe a load (settings, a lockfile records
// them); the context is how this call reports, streams, stops and talks to other processes.
struct LoadContext {
  TraceRecorder* trace = nullptr;  // lanes "read", "verify", "place", "h2d", "load" (set-up)
  // A plan whose processes share reads (ParallelLayout::share_reads) fills the tensors other
  // processes read through this (every rank's load uses its own, over one rendezvous). The
  // load returns once every rank has read and every shared tensor arrived.
  distributed::Communicator* communicator = nullptr;
  // Progress: called with bytes read from files so far and the total to read (read mode),
  // on the loading thread, after each read. Must be quick.
  std::function<void(std::uint64_t done_bytes, std::uint64_t total_bytes)> progress;
  // Streaming: called once for every tensor of the model as soon as its bytes are in place on
  // its device (and its digest checked, when one is expected), while the rest still loads, so
  // a server can copy it into its own parameters early. `index` is the tensor's index in the
  // Model this load returns. Calls come one at a time, in completion order, on a loader
  // thread; the bytes stay valid until load() returns, then as long as its Model. Returning an
  // error stops the load: load() fails with that error (kCancelled to stop on purpose), with
  // everything released. A load can still fail after some tensors were handed over (a file
  // changed under it, another process failed): the caller must then drop them. In mmap mode
  // and with shared reads, every tensor is handed over once all are in place.
  // `keep_alive`, when not null (qload's own arenas of a read-mode load, host or GPU, and mmap
  // mode's mappings), owns the memory the tensor's bytes live in: holding a copy keeps them
  // valid whatever happens to the load or its Model, so a caller can hand the bytes out
  // without copying them. Null: the bytes are valid only as above.
  using TensorCallback = std::function<Status(std::uint32_t index, const DeviceTensor& tensor,
                                              const std::shared_ptr<const void>& keep_alive)>;
  TensorCallback on_tensor;
  // Cancellation: once a stop is requested (from any thread), the load starts nothing more and
  // fails with kCancelled as soon as the reads and decodes already running have finished,
  // everything released as for any error.
  std::stop_token stop;
};

struct LoadOptions {
  PlanOptions plan;        // mode (read / mmap), device, alignment, chunking, direct path
  StagingOptions staging;  // slot size and staging budget (read mode)
  io::ReaderOptions io;    // engine, O_DIRECT, queue depth (read mode)
  // Named budgets for the executor: reads handed to the I/O layer at once, and CPU tasks
  // (verify, place) at once, which is also the number of worker threads; 0 workers means one
  // per hardware thread.
  std::uint32_t reads_in_flight = 8;
  std::uint32_t cpu_workers = 0;
  // Copy lanes per GPU: h2d deliveries in flight to one device, each with its own stream and
  // event (and a conversion scratch buffer when the load converts there). Two keep a copy
  // engine busy while the previous chunk's event is being waited for.
  std::uint32_t copy_lanes = 2;
  // Whether to compute each tensor's XXH3-64 as its bytes pass (reported per tensor). kAuto
  // hashes exactly when expected_xxh3_64 gives something to check them against: hashing
  // costs about a fifth of a warm load on two cores, wasted when nothing reads the digests.
  // kOn always hashes (the report's digests); kOff never (expected digests are then refused).
  enum class Digests : std::uint8_t { kAuto, kOn, kOff };
  Digests digests = Digests::kAuto;
  // Digests recorded earlier (a lockfile): a tensor whose bytes hash differently fails the
  // load with kChecksumMismatch naming file, tensor and offset; a name not in the catalog is
  // kNotFound.
  std::map<std::string, std::uint64_t, std::less<>> expected_xxh3_64;
  // A staging pool to borrow instead of allocating one per load (a server loading several
  // models reuses one pool). Not owned; it must not be used by anything else during the load.
  StagingPool* staging_pool = nullptr;
  Logger log;

  // kInvalidArgument for a bad value or conflicting settings (never "last one wins").
  Status validate() const;

  // Whether this load hashes: `digests` with kAuto resolved against expected_xxh3_64. The one
  // place auto is decided, so the read and mmap paths (and the report) agree.
  bool computes_digests() const noexcept {
    return digests == Digests::kOn || (digests == Digests::kAuto && !expected_xxh3_64.empty());
  }

  // Sets every field the settings table governs (runtime/settings.hpp: engine, queue depth,
  // O_DIRECT, load mode, staging and slot bytes, budgets, digests, alignment...) from `settings`;
  // the rest (devices, dtype policy...) is left alone. A default Settings gives the
  // defaults above.
  Status apply(const Settings& settings);
};

// Opens a checkpoint (file, directory or index json) with the format driver that recognises
// it (formats::open_catalog).
Result<formats::Catalog> open_source(const std::string& source);

// Loads `catalog` as `plan` lays it out. Errors carry file / tensor / offset context:
// kIo, kTruncated, kOutOfMemory..., kChecksumMismatch, kFileChanged (a file differs at the
// end of the load from when it was opened).
Result<Model> load(const formats::Catalog& catalog, const Plan& plan, const LoadOptions& options,
                   const LoadContext& context = {});
// make_plan(catalog, options.plan), then load.
Result<Model> load(const formats::Catalog& catalog, const LoadOptions& options, const LoadContext& context = {});
// open_source, then load.
Result<Model> load_source(const std::string& source, const LoadOptions& options, const LoadContext& context = {});

}  // namespace qload::scheduler
