// The one settings table: every knob that tunes how qload loads (not what it loads), declared
// once with its name, environment variable, recipe key, type, bounds, default and one line of
// documentation. Every source (recipe, environment, command line, C and Python options) goes
// through ResolvedSettings::set, so each setting has one parser and one syntax, and the
// precedence is always default < recipe < environment (QLOAD_*) < command-line flag or API
// option. `qload config` prints the resolved values and where each came from.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "qload/runtime/error.hpp"

namespace qload {

// The values, typed. Defaults here are the built-in defaults (docs/settings.md lists them).
struct Settings {
  std::string io_engine = "auto";
  std::uint32_t io_depth = 32;
  std::string direct_io = "auto";
  std::string load_mode = "read";
  std::uint64_t staging_bytes = std::uint64_t{256} << 20;
  std::uint64_t slot_bytes = std::uint64_t{16} << 20;
  std::uint32_t reads_in_flight = 8;
  std::uint32_t cpu_workers = 0;
  std::uint32_t copy_lanes = 2;
  std::string digests = "auto";
  std::uint64_t tensor_alignment = 256;
  std::string host_layout = "file";
  std::uint64_t max_gap_bytes = std::uint64_t{64} << 10;
  std::chrono::milliseconds rendezvous_timeout{300'000};
  std::chrono::milliseconds nccl_timeout{300'000};
  std::chrono::milliseconds straggler_timeout{1'800'000};  // zero: no limit
  std::string share_cached = "auto";
  std::string gptq_v1_zeros = "auto";
};

// kSwitch: auto, on or off, where on and off take every boolean spelling (1/0, true/false,
// yes/no), so a recipe's Lua boolean and Python's True keep meaning on; stored as its
// canonical text.
enum class SettingKind : std::uint8_t { kBytes, kCount, kDuration, kSwitch, kChoice };
std::string_view setting_kind_name(SettingKind kind) noexcept;

// Where a value came from, in increasing precedence.
enum class SettingSource : std::uint8_t { kDefault, kRecipe, kEnvironment, kOption };
std::string_view setting_source_name(SettingSource source) noexcept;

struct SettingSpec {
  using Field = std::variant<std::string Settings::*, std::uint32_t Settings::*, std::uint64_t Settings::*,
                             std::chrono::milliseconds Settings::*>;
  std::string_view name;        // "staging_bytes": recipes' `settings` table, API options, --set
  std::string_view env;         // "QLOAD_STAGING_BYTES"
  std::string_view recipe_key;  // the older recipe spelling ("io.staging"); empty if none
  SettingKind kind;
  Field field;
  std::string_view choices;  // kChoice: "auto|uring|pread"
  std::uint64_t min = 0;     // kBytes, kCount: inclusive bounds; kDuration: in milliseconds
  std::uint64_t max = UINT64_MAX;
  std::uint64_t multiple_of = 1;  // kBytes
  bool power_of_two = false;      // kBytes
  std::string_view doc;
};

inline constexpr std::size_t kSettingCount = 18;  // setting_table().size(), checked where it is defined

// Every setting, in the order `qload config` and docs/settings.md list them.
std::span<const SettingSpec> setting_table() noexcept;
// The spec named `name` (its table name, or its environment variable); null if none.
const SettingSpec* find_setting(std::string_view name) noexcept;

// Names that start with QLOAD_ but are not settings (build options read by setup.sh and CMake,
// test hooks): the environment check does not warn about them.
bool known_non_setting_variable(std::string_view name) noexcept;

// A process environment as NAME=VALUE pairs (std::getenv cannot enumerate, and tests pass
// their own).
using Environment = std::vector<std::pair<std::string, std::string>>;
Environment process_environment();

struct SettingOrigin {
  SettingSource source = SettingSource::kDefault;
  std::string where;  // "QLOAD_STAGING_BYTES", "recipe.lua: io.staging", "--mmap"; empty for defaults
};

class ResolvedSettings {
 public:
  const Settings& values() const noexcept { return values_; }
  const SettingOrigin& origin(const SettingSpec& spec) const noexcept;

  // Parses `text` as `name`'s type and bounds and sets it, unless a source of higher
  // precedence already did (a bad value is refused even then). `where` names the source in
  // errors: "QLOAD_RENDEZVOUS_TIMEOUT=abc: not a duration (...)". kInvalidArgument for an
  // unknown name (with a did-you-mean) or a bad value; kOverflow for a value out of range.
  Status set(std::string_view name, std::string_view text, SettingSource source, std::string_view where);

  // Applies every QLOAD_* variable that names a setting (empty values are ignored). A
  // variable qload does not know yields a warning with a did-you-mean (appended to `warnings`).
  Status apply_environment(const Environment& environment, std::vector<std::string>& warnings);

  // Settings whose defaults depend on others, once every source has been applied: a
  // slot_bytes still at its default shrinks to fit a smaller staging_bytes (whole 4 KiB
  // pages), so setting the budget alone is always valid. A slot_bytes that was set is left
  // alone (a budget that holds no slot is then an error of the load).
  void fit_defaults();

  // The value of a setting as its canonical text ("256MiB", "300s", "on", "auto"), which
  // set() parses back to the same value.
  std::string text(const SettingSpec& spec) const;

 private:
  Settings values_;
  std::array<SettingOrigin, kSettingCount> origins_{};
};

// The closest table name (or environment variable, when `name` starts with QLOAD_) within a
// small edit distance; empty if nothing is close.
std::string setting_suggestion(std::string_view name);

}  // namespace qload
