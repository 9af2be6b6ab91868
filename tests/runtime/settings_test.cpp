// The settings table: one parser per type for every source, precedence default < recipe <
// environment < option, errors that name the source, and warnings for unknown QLOAD_* names.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "qload/runtime/settings.hpp"
#include "qload/runtime/units.hpp"

using namespace qload;

namespace {

const SettingSpec& spec(std::string_view name) {
  const SettingSpec* s = find_setting(name);
  REQUIRE(s != nullptr);
  return *s;
}

}  // namespace

TEST_CASE("settings: the table is consistent", "[settings]") {
  REQUIRE(setting_table().size() == kSettingCount);
  std::set<std::string_view> names;
  std::set<std::string_view> envs;
  const ResolvedSettings defaults;
  for (const SettingSpec& s : setting_table()) {
    INFO(s.name);
    CHECK(names.insert(s.name).second);
    CHECK(envs.insert(s.env).second);
    CHECK(s.env.starts_with("QLOAD_"));
    CHECK_FALSE(s.doc.empty());
    CHECK(find_setting(s.name) == &s);
    CHECK(find_setting(s.env) == &s);
    CHECK(defaults.origin(s).source == SettingSource::kDefault);
    // Every default's text parses back to itself.
    ResolvedSettings again;
    REQUIRE(again.set(s.name, defaults.text(s), SettingSource::kOption, "test"));
    CHECK(again.text(s) == defaults.text(s));
  }
}

TEST_CASE("settings: one syntax per type, whatever the source", "[settings]") {
  ResolvedSettings r;
  // Sizes: binary and decimal units, the K/M/G shorthand, plain bytes.
  REQUIRE(r.set("staging_bytes", "512MB", SettingSource::kRecipe, "io.staging"));
  CHECK(r.values().staging_bytes == 512'000'000);
  REQUIRE(r.set("staging_bytes", "1G", SettingSource::kRecipe, "io.staging"));
  CHECK(r.values().staging_bytes == 1u << 30);
  REQUIRE(r.set("slot_bytes", "4MiB", SettingSource::kEnvironment, "QLOAD_SLOT_BYTES"));
  CHECK(r.values().slot_bytes == 4u << 20);
  REQUIRE(r.set("max_gap_bytes", "0", SettingSource::kEnvironment, "QLOAD_MAX_GAP_BYTES"));
  CHECK(r.values().max_gap_bytes == 0);
  // Durations: units, and a bare number is seconds (what QLOAD_RENDEZVOUS_TIMEOUT always took).
  REQUIRE(r.set("rendezvous_timeout", "500ms", SettingSource::kEnvironment, "QLOAD_RENDEZVOUS_TIMEOUT"));
  CHECK(r.values().rendezvous_timeout == std::chrono::milliseconds(500));
  REQUIRE(r.set("rendezvous_timeout", "30", SettingSource::kEnvironment, "QLOAD_RENDEZVOUS_TIMEOUT"));
  CHECK(r.values().rendezvous_timeout == std::chrono::seconds(30));
  REQUIRE(r.set("rendezvous_timeout", "2m", SettingSource::kEnvironment, "QLOAD_RENDEZVOUS_TIMEOUT"));
  CHECK(r.values().rendezvous_timeout == std::chrono::minutes(2));
  CHECK(r.text(spec("rendezvous_timeout")) == "2m");
  // Switches: auto, or on and off in the usual boolean spellings, kept as their canonical text.
  CHECK(r.values().digests == "auto");
  for (const char* off : {"0", "false", "no", "off", "OFF"}) {
    REQUIRE(r.set("digests", off, SettingSource::kOption, "--set digests"));
    CHECK(r.values().digests == "off");
    CHECK(r.text(spec("digests")) == "off");
    for (const char* on : {"1", "true", "Yes", "on"}) {
      REQUIRE(r.set("digests", on, SettingSource::kOption, "--set digests"));
      CHECK(r.values().digests == "on");
    }
    REQUIRE(r.set("digests", "auto", SettingSource::kOption, "--set digests"));
    CHECK(r.values().digests == "auto");
  }
  // Choices and counts.
  REQUIRE(r.set("io_engine", "pread", SettingSource::kOption, "--engine"));
  CHECK(r.values().io_engine == "pread");
  REQUIRE(r.set("cpu_workers", "0", SettingSource::kOption, "--set cpu_workers"));
  CHECK(r.values().cpu_workers == 0);
}

TEST_CASE("settings: a bad value is refused naming its source and the setting", "[settings]") {
  struct Bad {
    const char* name;
    const char* text;
    const char* where;
    const char* says;
  };
  for (const Bad& b : {Bad{"rendezvous_timeout", "abc", "QLOAD_RENDEZVOUS_TIMEOUT", "not a duration"},
                       Bad{"rendezvous_timeout", "0", "QLOAD_RENDEZVOUS_TIMEOUT", "outside"},
                       Bad{"staging_bytes", "12XB", "io.staging", "not a byte size"},
                       Bad{"slot_bytes", "5000", "QLOAD_SLOT_BYTES", "multiple of 4096"},
                       Bad{"slot_bytes", "-1", "QLOAD_SLOT_BYTES", "not a byte size"},
                       Bad{"tensor_alignment", "96", "--set tensor_alignment", "power of two"},
                       Bad{"io_depth", "0", "QLOAD_IO_DEPTH", "outside 1..4096"},
                       Bad{"io_depth", "8x", "QLOAD_IO_DEPTH", "not a whole number"},
                       Bad{"reads_in_flight", "2MiB", "QLOAD_READS_IN_FLIGHT", "not a whole number"},
                       Bad{"io_engine", "fast", "QLOAD_IO", "not one of auto|uring|io_uring|pread"},
                       Bad{"load_mode", "fast", "QLOAD_LOAD_MODE", "not one of read|mmap"},
                       Bad{"digests", "maybe", "QLOAD_DIGESTS", "not auto, on or off"}}) {
    INFO(b.where << "=" << b.text);
    ResolvedSettings r;
    const Status s = r.set(b.name, b.text, SettingSource::kEnvironment, b.where);
    REQUIRE_FALSE(s);
    CHECK_THAT(s.error().message(), Catch::StartsWith(std::string(b.where) + "=" + b.text + ": "));
    CHECK_THAT(s.error().message(), Catch::Contains(b.says));
    CHECK(r.origin(spec(b.name)).source == SettingSource::kDefault);  // nothing changed
  }
  ResolvedSettings r;
  const Status unknown = r.set("staging_byte", "1G", SettingSource::kOption, "--set staging_byte");
  REQUIRE_FALSE(unknown);
  CHECK_THAT(unknown.error().message(), Catch::Contains("did you mean staging_bytes?"));
}

TEST_CASE("settings: default < recipe < environment < option, and bad values never hide", "[settings]") {
  ResolvedSettings r;
  REQUIRE(r.set("staging_bytes", "64MiB", SettingSource::kOption, "--set staging_bytes"));
  REQUIRE(r.set("staging_bytes", "32MiB", SettingSource::kEnvironment, "QLOAD_STAGING_BYTES"));
  REQUIRE(r.set("staging_bytes", "16MiB", SettingSource::kRecipe, "io.staging"));
  CHECK(r.values().staging_bytes == 64u << 20);
  CHECK(r.origin(spec("staging_bytes")).source == SettingSource::kOption);
  CHECK(r.origin(spec("staging_bytes")).where == "--set staging_bytes");

  ResolvedSettings up;
  REQUIRE(up.set("io_depth", "4", SettingSource::kRecipe, "io.queue_depth"));
  CHECK(up.values().io_depth == 4);
  REQUIRE(up.set("io_depth", "8", SettingSource::kEnvironment, "QLOAD_IO_DEPTH"));
  CHECK(up.values().io_depth == 8);
  REQUIRE(up.set("io_depth", "16", SettingSource::kOption, "--set io_depth"));
  CHECK(up.values().io_depth == 16);
  CHECK(up.origin(spec("io_depth")).where == "--set io_depth");
  // An overridden source is still checked: a typo in the environment is an error even when a
  // flag decides the value.
  CHECK_FALSE(up.set("io_depth", "many", SettingSource::kEnvironment, "QLOAD_IO_DEPTH"));
}

TEST_CASE("settings: the environment applies, and unknown QLOAD_ names get a did-you-mean", "[settings]") {
  ResolvedSettings r;
  std::vector<std::string> warnings;
  REQUIRE(r.apply_environment({{"QLOAD_STAGING_BYTES", "512MB"},
                               {"QLOAD_SLOT_BYTE", "4MiB"},
                               {"QLOAD_IO", ""},  // empty: unset
                               {"QLOAD_WERROR", "ON"},
                               {"QLOAD_TEST_NO_URING", "1"},
                               {"QLOAD_CUDASIM_FAULTS", "nccl_hang:1"},  // the simulator's
                               {"QLOADX", "1"},
                               {"PATH", "/usr/bin"}},
                              warnings));
  CHECK(r.values().staging_bytes == 512'000'000);
  CHECK(r.origin(spec("staging_bytes")).where == "QLOAD_STAGING_BYTES");
  CHECK(r.values().slot_bytes == Settings{}.slot_bytes);
  CHECK(r.origin(spec("io_engine")).source == SettingSource::kDefault);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("QLOAD_SLOT_BYTE is not a qload setting"));
  CHECK_THAT(warnings[0], Catch::Contains("did you mean QLOAD_SLOT_BYTES?"));

  std::vector<std::string> none;
  const Status bad = ResolvedSettings{}.apply_environment({{"QLOAD_RENDEZVOUS_TIMEOUT", "abc"}}, none);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::kInvalidArgument);
  CHECK_THAT(bad.error().message(), Catch::StartsWith("QLOAD_RENDEZVOUS_TIMEOUT=abc: "));
  CHECK_THAT(bad.error().message(), Catch::Contains("not a duration"));
}

TEST_CASE("settings: the process environment is read whole", "[settings]") {
  REQUIRE(::setenv("QLOAD_TEST_SETTINGS_PROBE", "x=y", 1) == 0);
  bool found = false;
  for (const auto& [name, value] : process_environment())
    if (name == "QLOAD_TEST_SETTINGS_PROBE") found = value == "x=y";
  ::unsetenv("QLOAD_TEST_SETTINGS_PROBE");
  CHECK(found);
}

TEST_CASE("settings: a default slot shrinks to a smaller budget; a chosen one does not", "[settings]") {
  ResolvedSettings budget_only;
  REQUIRE(budget_only.set("staging_bytes", "1MB", SettingSource::kEnvironment, "QLOAD_STAGING_BYTES"));
  budget_only.fit_defaults();
  CHECK(budget_only.values().slot_bytes == 1'000'000 / 4096 * 4096);
  CHECK(budget_only.origin(spec("slot_bytes")).source == SettingSource::kDefault);
  CHECK(budget_only.origin(spec("slot_bytes")).where == "fitted to staging_bytes");

  ResolvedSettings both;
  REQUIRE(both.set("staging_bytes", "1MiB", SettingSource::kEnvironment, "QLOAD_STAGING_BYTES"));
  REQUIRE(both.set("slot_bytes", "16MiB", SettingSource::kOption, "--set slot_bytes"));
  both.fit_defaults();
  CHECK(both.values().slot_bytes == 16u << 20);

  ResolvedSettings untouched;
  untouched.fit_defaults();
  CHECK(untouched.values().slot_bytes == Settings{}.slot_bytes);
}
