// LoadOptions from the settings table: every governed field follows its setting, and the
// table's defaults are LoadOptions' own.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <variant>

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

TEST_CASE("load options: every choice the settings table lists for a setting LoadOptions takes is one it accepts",
          "[scheduler][options]") {
  // A choice spelt in the table but not in load_settings.cpp's names (or the other way round)
  // would be accepted by the settings and refused by the load.
  std::size_t checked = 0;
  for (const SettingSpec& spec : setting_table()) {
    const auto* field = std::get_if<std::string Settings::*>(&spec.field);
    if (spec.kind != SettingKind::kChoice || field == nullptr) continue;
    std::string_view rest = spec.choices;
    while (!rest.empty()) {
      const std::string_view choice = rest.substr(0, rest.find('|'));
      rest = choice.size() < rest.size() ? rest.substr(choice.size() + 1) : std::string_view{};
      Settings s;
      s.** field = std::string(choice);
      LoadOptions o;
      INFO(spec.name << " = " << choice);
      if (std::string_view(spec.name) != "share_cached") CHECK(o.apply(s));  // the session's, not LoadOptions'
      ++checked;
    }
    Settings bad;
    bad.** field = "no-such-choice";
    LoadOptions o;
    const Status refused = o.apply(bad);
    if (std::string_view(spec.name) == "share_cached") continue;
    INFO(spec.name);
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error().message(), Catch::Contains("'no-such-choice'"));
  }
  CHECK(checked >= 15);
}
