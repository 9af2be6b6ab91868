// Multi-process layouts (one process per node, or per GPU): each process plans the whole
// layout but holds only its own devices. For every tp x pp x dp layout up to 8 devices spread
// over processes of 1 or 2 devices: each process's copies hold exactly the reference's
// elements, it holds no other copy, and it reads exactly the byte ranges its copies need (an
// independent reference from the split rules), each once; together the processes read every
// byte. Digests: a tensor read in part has none; whole_tensor_reads makes them checkable.
// Processes holding whole replicas can share reads: each tensor is read by one of them and
// broadcast over the rendezvous (ranks are threads here, each with its own sockets).
#include <catch2/catch.hpp>

#include <algorithm>
#include <future>
#include <tuple>

#include <fmt/format.h>

#include "qload/distributed/communicator.hpp"
#include "qload/io/digest.hpp"
#include "qload/scheduler/load.hpp"
#include "support/free_port.hpp"
#include "support/llama_checkpoint.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

std::vector<Device> cpu_devices(std::uint32_t n) {
  std::vector<Device> out;
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(Device{.kind = Device::Kind::kCpu, .index = static_cast<int>(i)});
  return out;
}

// Marks the stored bytes rank r's copy of `name` needs: each run of consecutive rows from its
// first row's first column to its last row's last column (the columns between are read too).
void mark_needed(const Llama& m, const std::string& name, std::uint64_t r, std::uint64_t tp, std::vector<bool>& out) {
  const Shape& shape = m.shapes.at(name);
  const SplitExpect e = expected_split(name, shape, r, tp, {kHeads, kKv, kHd});
  const std::uint64_t row_bytes = (shape.rank() == 2 ? shape[1] : 1) * 2;
  for (std::size_t i = 0; i < e.rows.size();) {
    std::size_t j = i + 1;
    while (j < e.rows.size() && e.rows[j] == e.rows[j - 1] + 1) ++j;
    const std::uint64_t begin = e.rows[i] * row_bytes + e.col_begin * 2;
    const std::uint64_t end = e.rows[j - 1] * row_bytes + e.col_end * 2;
    for (std::uint64_t b = begin; b < end; ++b) out[b] = true;
    i = j;
  }
}

}  // namespace

TEST_CASE("parallel: each process of a multi-process layout holds its devices' copies and reads only their bytes",
          "[scheduler][parallel][multiprocess]") {
  Llama m;
  make_model(m);
  auto catalog = open_source(m.dir.path().string());
  REQUIRE(catalog);
  const auto index_of = [&](const std::string& name) {
    for (std::uint32_t i = 0; i < catalog->tensors.size(); ++i)
      if (catalog->tensors[i].name == name) return i;
    FAIL("no tensor " << name);
    return 0u;
  };
  for (std::uint32_t tp : {1u, 2u, 4u, 8u})
    for (std::uint32_t pp : {1u, 2u})
      for (std::uint32_t dp : {1u, 2u})
        for (std::uint32_t per_process : {1u, 2u}) {
          const std::uint32_t devices = tp * pp * dp;
          if (devices > 8 || devices % per_process != 0 || devices / per_process < 2) continue;
          const std::uint32_t processes = devices / per_process;
          for (const bool convert : {false, true}) {
            std::vector<std::vector<bool>> read_by_any(catalog->tensors.size());
            for (std::size_t t = 0; t < read_by_any.size(); ++t)
              read_by_any[t].assign(catalog->tensors[t].nbytes, false);
            for (std::uint32_t p = 0; p < processes; ++p) {
              INFO("tp " << tp << " pp " << pp << " dp " << dp << ", process " << p << " of " << processes
                         << (convert ? " f32" : " bf16"));
              LoadOptions o;
              o.plan.chunk_bytes = o.staging.slot_bytes = 4096;  // tensors span chunks
              o.plan.direct_min_bytes = 1024;                    // whole-row shards read straight in
              o.digests = LoadOptions::Digests::kOn;
              o.plan.parallel = {.tensor = tp, .pipeline = pp, .data = dp, .processes = processes, .process = p};
              o.plan.devices = cpu_devices(per_process);
              if (convert) o.plan.dtype = DType::kF32;
              auto plan = make_plan(*catalog, o.plan);
              if (!plan) FAIL(plan.error().to_string());
              auto model = load(*catalog, *plan, o);
              if (!model) FAIL(model.error().to_string());
              CHECK(model->report().io.bytes == plan->reads.read_bytes);

              std::vector<std::vector<bool>> needed(catalog->tensors.size());
              std::size_t copies_here = 0;
              for (const auto& [name, shape] : m.shapes) {
                INFO(name);
                const std::uint32_t i = index_of(name);
                needed[i].assign(catalog->tensors[i].nbytes, false);
                const auto stage = static_cast<std::uint32_t>(stage_of(name, pp));
                std::size_t held = 0;
                for (std::uint32_t d = 0; d < dp; ++d)
                  for (std::uint32_t r = 0; r < tp; ++r) {
                    const std::uint32_t global = (d * pp + stage) * tp + r;
                    if (global / per_process != p) continue;
                    const std::string device = Device{.index = static_cast<int>(global % per_process)}.to_string();
                    INFO("rank " << r << " replica " << d << " on " << device);
                    const DeviceTensor* t = model->find(name, device);
                    REQUIRE(t != nullptr);
                    const std::string mismatch = copy_mismatch(m, name, *t, r, tp, convert);
                    if (!mismatch.empty()) FAIL(mismatch);
                    mark_needed(m, name, r, tp, needed[i]);
                    ++held;
                  }
                std::size_t found = 0;
                for (const DeviceTensor& t : model->tensors()) found += t.name == name ? 1 : 0;
                CHECK(found == held);
                copies_here += held;
                // A digest is reported exactly for the tensors read whole, and it is right.
                const bool whole = std::ranges::all_of(needed[i], [](bool b) { return b; }) && held > 0;
                const auto digest = std::ranges::find(model->report().digests, name, &TensorDigest::name);
                CHECK((digest != model->report().digests.end()) == whole);
                if (whole && digest != model->report().digests.end())
                  CHECK(digest->xxh3_64 == io::xxh3_64(std::as_bytes(std::span(m.values.at(name)))));
              }
              CHECK(model->size() == copies_here);
              CHECK(model->report().tensors == copies_here);

              // The plan's pieces read each needed byte once and nothing else.
              std::vector<std::vector<bool>> read(catalog->tensors.size());
              for (std::size_t t = 0; t < read.size(); ++t) read[t].assign(catalog->tensors[t].nbytes, false);
              for (const ReadChunk& chunk : plan->reads.chunks)
                for (const ChunkPiece& piece : chunk.pieces)
                  for (std::uint64_t b = piece.tensor_offset; b < piece.tensor_offset + piece.bytes; ++b) {
                    if (read[piece.tensor][b]) FAIL("byte " << b << " of tensor " << piece.tensor << " is read twice");
                    read[piece.tensor][b] = read_by_any[piece.tensor][b] = true;
                  }
              for (std::size_t t = 0; t < read.size(); ++t) {
                INFO(catalog->tensors[t].name);
                CHECK(read[t] == needed[t]);
              }
            }
            for (const auto& bytes : read_by_any) CHECK(std::ranges::all_of(bytes, [](bool b) { return b; }));
          }
        }
}

TEST_CASE("parallel: a multi-process load checks digests only of tensors it reads whole",
          "[scheduler][parallel][multiprocess]") {
  Llama m;
  make_model(m);
  LoadOptions o;
  o.plan.parallel = {.tensor = 2, .processes = 2, .process = 1};
  o.plan.devices = cpu_devices(1);
  // Rank 1 reads half of the rows of q_proj: its digest cannot be checked there.
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  o.expected_xxh3_64[q] = io::xxh3_64(std::as_bytes(std::span(m.values.at(q))));
  auto refused = load_source(m.dir.path().string(), o);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kInvalidArgument);
  CHECK(refused.error().tensor() == std::optional<std::string_view>(q));
  CHECK_THAT(refused.error().message(), Catch::Contains("whole_tensor_reads"));

  // Read whole, it is checked: the right digest passes, a wrong one fails naming the tensor.
  o.plan.whole_tensor_reads = true;
  auto checked = load_source(m.dir.path().string(), o);
  if (!checked) FAIL(checked.error().to_string());
  const DeviceTensor* shard = checked->find(q, "cpu:0");
  REQUIRE(shard != nullptr);
  CHECK(shard->shape == Shape{kHeads * kHd / 2, kHidden});
  o.expected_xxh3_64[q] ^= 1;
  auto wrong = load_source(m.dir.path().string(), o);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code() == Errc::kChecksumMismatch);
  CHECK(wrong.error().tensor() == std::optional<std::string_view>(q));
}

TEST_CASE("parallel: multi-process layouts that cannot work are refused", "[scheduler][parallel][multiprocess]") {
  Llama m;
  make_model(m);
  const auto try_load = [&](ParallelLayout layout, std::uint32_t devices) {
    LoadOptions o;
    o.plan.parallel = layout;
    o.plan.devices = cpu_devices(devices);
    return load_source(m.dir.path().string(), o);
  };
  auto uneven = try_load({.tensor = 4, .processes = 3}, 1);
  REQUIRE_FALSE(uneven);
  CHECK_THAT(uneven.error().message(), Catch::Contains("needs 4 devices, but 3 processes hold 1 each"));
  auto outside = try_load({.tensor = 2, .processes = 2, .process = 2}, 1);
  REQUIRE_FALSE(outside);
  CHECK_THAT(outside.error().message(), Catch::Contains("process 2 of 2"));
  auto single = try_load({.processes = 2}, 1);
  REQUIRE_FALSE(single);
  CHECK_THAT(single.error().message(), Catch::Contains("one device cannot be spread over 2 processes"));
}

namespace {

// One process of a shared-read load, run as a thread with its own rendezvous and communicator.
struct RankLoad {
  Result<Plan> plan = fail(Errc::kInternal, "not planned");
  Result<Model> model = fail(Errc::kInternal, "not loaded");
};

RankLoad load_rank(const formats::Catalog& catalog, LoadOptions o, std::uint16_t port) {
  RankLoad out;
  const ParallelLayout& par = o.plan.parallel;
  auto rendezvous = distributed::Rendezvous::join(distributed::World{.rank = par.process,
                                                                     .size = par.processes,
                                                                     .local_rank = par.process,
                                                                     .local_size = par.processes,
                                                                     .master_addr = "127.0.0.1",
                                                                     .master_port = port},
                                                  // Generous: up to 8 ranks' loads share a 2-core CI machine
                                                  // with the rest of the suite (one run there timed out at 30 s
                                                  // waiting for a rank); a healthy run takes a few seconds.
                                                  std::chrono::seconds(120));
  if (!rendezvous) {
    out.model = fail(std::move(rendezvous).error());
    return out;
  }
  const std::vector<int> host_slots(o.plan.devices.size(), -1);
  auto communicator = distributed::Communicator::create(*rendezvous, host_slots);
  if (!communicator) {
    out.model = fail(std::move(communicator).error());
    return out;
  }
  out.plan = make_plan(catalog, o.plan);
  if (!out.plan) {
    out.model = fail(out.plan.error());
    (void)communicator->all_ok(false);  // as load() would: the others must not wait for us
    return out;
  }
  out.model = load(catalog, *out.plan, o, {.communicator = &*communicator});
  return out;
}

}  // namespace

TEST_CASE("parallel: processes sharing reads read each tensor once between them, whatever copies each holds",
          "[scheduler][parallel][multiprocess]") {
  Llama m;
  make_model(m);
  auto catalog = open_source(m.dir.path().string());
  REQUIRE(catalog);
  // tp x pp x dp over `processes`: the first five hold whole replicas (the reader broadcasts
  // its copies), the others different shards and stages (the reader relays every other
  // holder's copies), one process per device or several devices each.
  for (const auto& [tp, pp, dp, processes] :
       {std::tuple{1u, 1u, 2u, 2u}, std::tuple{1u, 1u, 4u, 4u}, std::tuple{2u, 1u, 2u, 2u}, std::tuple{2u, 2u, 2u, 2u},
        std::tuple{1u, 1u, 4u, 2u}, std::tuple{2u, 1u, 1u, 2u}, std::tuple{4u, 1u, 1u, 4u}, std::tuple{4u, 1u, 1u, 2u},
        std::tuple{2u, 2u, 1u, 4u}, std::tuple{1u, 2u, 1u, 2u}, std::tuple{2u, 1u, 2u, 4u}, std::tuple{8u, 1u, 1u, 8u},
        std::tuple{2u, 2u, 2u, 8u}})
    for (const bool convert : {false, true}) {
      INFO("tp " << tp << " pp " << pp << " dp " << dp << " over " << processes << " processes"
                 << (convert ? ", f32" : ""));
      const std::uint32_t per_process = tp * pp * dp / processes;
      const std::uint16_t port = free_port();
      std::vector<std::future<RankLoad>> ranks;
      for (std::uint32_t p = 0; p < processes; ++p) {
        LoadOptions o;
        o.plan.chunk_bytes = o.staging.slot_bytes = 4096;
        o.plan.direct_min_bytes = 1024;
        o.plan.parallel = {
            .tensor = tp, .pipeline = pp, .data = dp, .processes = processes, .process = p, .share_reads = true};
        o.plan.devices = cpu_devices(per_process);
        if (convert) o.plan.dtype = DType::kF32;
        ranks.push_back(std::async(std::launch::async, load_rank, std::cref(*catalog), o, port));
      }
      std::vector<RankLoad> loads;
      for (auto& r : ranks) loads.push_back(r.get());
      std::vector<std::vector<int>> reads(catalog->tensors.size());  // per tensor byte: how many processes read it
      for (std::size_t t = 0; t < reads.size(); ++t) reads[t].assign(catalog->tensors[t].nbytes, 0);
      for (std::uint32_t p = 0; p < processes; ++p) {
        INFO("process " << p);
        if (!loads[p].model) FAIL(loads[p].model.error().to_string());
        const Model& model = *loads[p].model;
        // Every copy on this process's devices is right, whoever read it.
        for (const auto& [name, shape] : m.shapes) {
          const auto stage = static_cast<std::uint32_t>(stage_of(name, pp));
          for (std::uint32_t d = 0; d < dp; ++d)
            for (std::uint32_t r = 0; r < tp; ++r) {
              const std::uint32_t global = (d * pp + stage) * tp + r;
              if (global / per_process != p) continue;
              const DeviceTensor* t =
                  model.find(name, Device{.index = static_cast<int>(global % per_process)}.to_string());
              INFO(name << " rank " << r << " replica " << d);
              REQUIRE(t != nullptr);
              const std::string mismatch = copy_mismatch(m, name, *t, r, tp, convert);
              if (!mismatch.empty()) FAIL(mismatch);
            }
        }
        CHECK(loads[p].plan->copies.shared_reads ==
              (per_process % (tp * pp) == 0 ? SharedReads::kBroadcast : SharedReads::kRelay));
        CHECK(model.report().io.bytes == loads[p].plan->reads.read_bytes);
        // What came from other processes' reads.
        const Plan& plan = *loads[p].plan;
        std::uint64_t received = 0;
        for (const TensorPlacement& placed : plan.layout.tensors)
          for (std::uint32_t k = placed.first_shard; placed.received && k < placed.first_shard + placed.shard_count;
               ++k)
            received += plan.copies.shards[k].bytes;
        CHECK(model.report().shared_received_bytes == received);
        for (const ReadChunk& chunk : loads[p].plan->reads.chunks)
          for (const ChunkPiece& piece : chunk.pieces)
            for (std::uint64_t b = piece.tensor_offset; b < piece.tensor_offset + piece.bytes; ++b)
              ++reads[piece.tensor][b];
      }
      // Between them the processes read every byte exactly once.
      for (std::size_t t = 0; t < reads.size(); ++t) {
        INFO(catalog->tensors[t].name);
        CHECK(std::ranges::all_of(reads[t], [](int n) { return n == 1; }));
      }
    }
}

TEST_CASE("parallel: when a process sharing reads fails, every process fails and none waits",
          "[scheduler][parallel][multiprocess]") {
  Llama m;
  make_model(m);
  auto catalog = open_source(m.dir.path().string());
  REQUIRE(catalog);
  // Replicas (broadcast) and tensor-parallel shards (relayed).
  const ParallelLayout layout =
      GENERATE(ParallelLayout{.data = 2, .processes = 2, .process = 0, .share_reads = true},
               ParallelLayout{.tensor = 2, .processes = 2, .process = 0, .share_reads = true});
  INFO("tp " << layout.tensor << " dp " << layout.data);
  LoadOptions o;
  o.plan.parallel = layout;
  o.plan.devices = cpu_devices(1);
  // A tensor process 1 reads, with a wrong expected digest: process 1 fails verifying it.
  auto plan = make_plan(*catalog, o.plan);
  REQUIRE(plan);
  std::string read_by_1;
  for (std::uint32_t i = 0; i < catalog->tensors.size() && read_by_1.empty(); ++i)
    if (plan->layout.tensors[i].reader == 1) read_by_1 = catalog->tensors[i].name;
  REQUIRE_FALSE(read_by_1.empty());
  o.expected_xxh3_64[read_by_1] = 1;
  const std::uint16_t port = free_port();
  LoadOptions o1 = o;
  o1.plan.parallel.process = 1;
  auto rank0 = std::async(std::launch::async, load_rank, std::cref(*catalog), o, port);
  auto rank1 = std::async(std::launch::async, load_rank, std::cref(*catalog), o1, port);
  RankLoad zero = rank0.get(), one = rank1.get();
  REQUIRE_FALSE(one.model);
  CHECK(one.model.error().code() == Errc::kChecksumMismatch);
  CHECK(one.model.error().tensor() == std::optional<std::string_view>(read_by_1));
  REQUIRE_FALSE(zero.model);
  CHECK(zero.model.error().code() == Errc::kCancelled);

  // Without a communicator a shared-read plan is refused before anything is read.
  o.expected_xxh3_64.clear();
  auto alone = load(*catalog, *plan, o);
  REQUIRE_FALSE(alone);
  CHECK_THAT(alone.error().message(), Catch::Contains("no communicator"));
}
