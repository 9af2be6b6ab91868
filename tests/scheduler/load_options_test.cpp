// LoadOptions from the settings table: every governed field follows its setting, and the
// table's defaults are LoadOptions' own.
#include <catch2/catch.hpp>

#include <string>

#include "qload/scheduler/load.hpp"

using namespace qload;
using namespace qload::scheduler;

TEST_CASE("load options: the settings table's defaults are LoadOptions' defaults", "[scheduler][options]") {
  LoadOptions applied;
  REQUIRE(applied.apply(Settings{}));
  const LoadOptions plain;
  CHECK(applied.io.engine == plain.io.engine);
  CHECK(applied.io.direct == plain.io.direct);
  CHECK(applied.io.queue_depth == plain.io.queue_depth);
  CHECK(applied.plan.mode == plain.plan.mode);
  CHECK(applied.staging.total_bytes == plain.staging.total_bytes);
  CHECK(applied.staging.slot_bytes == plain.staging.slot_bytes);
  CHECK(applied.plan.chunk_bytes == plain.plan.chunk_bytes);
  CHECK(applied.reads_in_flight == plain.reads_in_flight);
  CHECK(applied.cpu_workers == plain.cpu_workers);
  CHECK(applied.copy_lanes == plain.copy_lanes);
  CHECK(applied.digests == plain.digests);
  CHECK(applied.plan.tensor_alignment == plain.plan.tensor_alignment);
  CHECK(applied.plan.max_gap_bytes == plain.plan.max_gap_bytes);
}

TEST_CASE("load options: resolved settings land in their fields, and a slot size alone is valid",
          "[scheduler][options]") {
  ResolvedSettings s;
  std::vector<std::string> warnings;
  REQUIRE(s.apply_environment({{"QLOAD_STAGING_BYTES", "512MB"},
                               {"QLOAD_SLOT_BYTES", "4MiB"},
                               {"QLOAD_READS_IN_FLIGHT", "3"},
                               {"QLOAD_CPU_WORKERS", "1"},
                               {"QLOAD_LOAD_MODE", "mmap"},
                               {"QLOAD_IO", "pread"},
                               {"QLOAD_IO_DEPTH", "12"},
                               {"QLOAD_DIRECT_IO", "off"},
                               {"QLOAD_DIGESTS", "no"},
                               {"QLOAD_TENSOR_ALIGNMENT", "4KiB"}},
                              warnings));
  CHECK(warnings.empty());
  LoadOptions o;
  REQUIRE(o.apply(s.values()));
  CHECK(o.staging.total_bytes == 512'000'000);
  CHECK(o.staging.slot_bytes == 4u << 20);
  // The largest read follows the slot: before the settings table, QLOAD_SLOT_BYTES=4MiB alone
  // left 16 MiB reads that no slot could hold, and every load failed.
  CHECK(o.plan.chunk_bytes == 4u << 20);
  CHECK(o.reads_in_flight == 3);
  CHECK(o.cpu_workers == 1);
  CHECK(o.plan.mode == LoadMode::kMmap);
  CHECK(o.io.engine == io::EngineKind::kPread);
  CHECK(o.io.queue_depth == 12);
  CHECK(o.io.direct == io::DirectMode::kOff);
  CHECK(o.digests == LoadOptions::Digests::kOff);
  CHECK(o.plan.tensor_alignment == 4096);
  CHECK(o.validate());
}

TEST_CASE("load options: digests auto hashes exactly when there are expected digests to check",
          "[scheduler][options]") {
  for (const char* text : {"auto", "on", "off"}) {
    INFO("digests=" << text);
    ResolvedSettings s;
    REQUIRE(s.set("digests", text, SettingSource::kOption, "--set digests"));
    LoadOptions o;
    REQUIRE(o.apply(s.values()));
    const std::string mode = text;
    CHECK(o.computes_digests() == (mode == "on"));
    CHECK(o.validate());
    o.expected_xxh3_64["t"] = 1;  // what a lock sets
    CHECK(o.computes_digests() == (mode != "off"));
    CHECK(o.validate().has_value() == (mode != "off"));  // off with expected digests is refused, never skipped
  }
}
