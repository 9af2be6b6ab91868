#include "qload/runtime/settings.hpp"

#include <algorithm>
#include <bit>
#include <charconv>

#include <fmt/format.h>

#include "qload/runtime/spelling.hpp"
#include "qload/runtime/units.hpp"

extern char** environ;  // NOLINT: POSIX, read once by process_environment()

namespace qload {
namespace {

using S = Settings;
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// clang-format off
constexpr std::array<SettingSpec, kSettingCount> kTable{{
    {.name = "io_engine", .env = "QLOAD_IO", .recipe_key = "io.engine", .kind = SettingKind::kChoice,
     .field = &S::io_engine, .choices = "auto|uring|io_uring|pread",
     .doc = "I/O engine: io_uring, or a pread thread pool (which fills fresh pages from the page cache without faulting them in); auto: the pread pool for a warm load into the caller's host memory, else io_uring when the kernel allows it"},
    {.name = "io_depth", .env = "QLOAD_IO_DEPTH", .recipe_key = "io.queue_depth", .kind = SettingKind::kCount,
     .field = &S::io_depth, .min = 1, .max = 4096,
     .doc = "reads the engine keeps in flight (io_uring entries, pread threads)"},
    {.name = "direct_io", .env = "QLOAD_DIRECT_IO", .recipe_key = "io.direct", .kind = SettingKind::kChoice,
     .field = &S::direct_io, .choices = "auto|on|off",
     .doc = "O_DIRECT reads past the page cache: for files the page cache does not already hold (auto: a warm file reads buffered, at memory speed), always, never"},
    {.name = "load_mode", .env = "QLOAD_LOAD_MODE", .recipe_key = "", .kind = SettingKind::kChoice,
     .field = &S::load_mode, .choices = "read|mmap|auto",
     .doc = "read into owned memory through the staging pool, or map the files (zero-copy, cpu only), or auto: mmap when it can serve the load and the page cache holds 90% of the files, else read"},
    {.name = "staging_bytes", .env = "QLOAD_STAGING_BYTES", .recipe_key = "io.staging", .kind = SettingKind::kBytes,
     .field = &S::staging_bytes, .min = 4096,
     .doc = "staging pool budget (pinned for GPUs); holds staging_bytes / slot_bytes slots"},
    {.name = "slot_bytes", .env = "QLOAD_SLOT_BYTES", .recipe_key = "io.chunk", .kind = SettingKind::kBytes,
     .field = &S::slot_bytes, .min = 4096, .max = 1024 * kMiB, .multiple_of = 4096,
     .doc = "one staging slot, and the largest coalesced read"},
    {.name = "reads_in_flight", .env = "QLOAD_READS_IN_FLIGHT", .recipe_key = "", .kind = SettingKind::kCount,
     .field = &S::reads_in_flight, .min = 1, .max = 4096,
     .doc = "reads the scheduler hands to the I/O layer at once"},
    {.name = "cpu_workers", .env = "QLOAD_CPU_WORKERS", .recipe_key = "", .kind = SettingKind::kCount,
     .field = &S::cpu_workers, .min = 0, .max = 4096,
     .doc = "threads for verify, decode and place; 0 for one per hardware thread"},
    {.name = "copy_lanes", .env = "QLOAD_COPY_LANES", .recipe_key = "", .kind = SettingKind::kCount,
     .field = &S::copy_lanes, .min = 1, .max = 64,
     .doc = "host-to-device copies in flight per GPU, each with its own stream"},
    {.name = "digests", .env = "QLOAD_DIGESTS", .recipe_key = "", .kind = SettingKind::kSwitch,
     .field = &S::digests,
     .doc = "hash every tensor (XXH3-64) as its bytes pass: when the load checks them against something (auto: a lock, or expected digests an embedder passes), always (reported per tensor), never (a lock is then refused)"},
    {.name = "tensor_alignment", .env = "QLOAD_TENSOR_ALIGNMENT", .recipe_key = "", .kind = SettingKind::kBytes,
     .field = &S::tensor_alignment, .min = 1, .max = 1024 * kMiB, .power_of_two = true,
     .doc = "each tensor's offset in its device arena is a multiple of this (host arenas: with host_layout aligned)"},
    {.name = "host_layout", .env = "QLOAD_HOST_LAYOUT", .recipe_key = "", .kind = SettingKind::kChoice,
     .field = &S::host_layout, .choices = "file|aligned",
     .doc = "host arenas as file images (file: each tensor's address congruent to its file offset modulo 4 KiB, so its alignment is the file's, and whole files read with O_DIRECT straight into place) or every tensor at a multiple of tensor_alignment (aligned)"},
    {.name = "max_gap_bytes", .env = "QLOAD_MAX_GAP_BYTES", .recipe_key = "", .kind = SettingKind::kBytes,
     .field = &S::max_gap_bytes, .max = 1024 * kMiB,
     .doc = "neighbouring tensors this close in a file share one read"},
    {.name = "rendezvous_timeout", .env = "QLOAD_RENDEZVOUS_TIMEOUT", .recipe_key = "",
     .kind = SettingKind::kDuration, .field = &S::rendezvous_timeout, .min = 1, .max = 86'400'000,
     .doc = "how long the ranks of a multi-process load wait for each other (a bare number is seconds)"},
    {.name = "nccl_timeout", .env = "QLOAD_NCCL_TIMEOUT", .recipe_key = "",
     .kind = SettingKind::kDuration, .field = &S::nccl_timeout, .min = 1, .max = 86'400'000,
     .doc = "how long creating NCCL communicators, or one broadcast, may take before every rank aborts them"},
    {.name = "straggler_timeout", .env = "QLOAD_STRAGGLER_TIMEOUT", .recipe_key = "",
     .kind = SettingKind::kDuration, .field = &S::straggler_timeout, .min = 0, .max = 86'400'000,
     .doc = "how long a rank of a multi-process load that is done waits for the slowest (before shared tensors move, and before all agree the load is done); 0 for no limit"},
    {.name = "share_cached", .env = "QLOAD_SHARE_CACHED", .recipe_key = "", .kind = SettingKind::kChoice,
     .field = &S::share_cached, .choices = "auto|always",
     .doc = "shared reads of a checkpoint the page cache already holds (90% of its bytes, on every rank): auto has each process read its own part from the page cache, as sharing saves no storage read and costs the transfers; always shares it anyway"},
    {.name = "gptq_v1_zeros", .env = "QLOAD_GPTQ_V1_ZEROS", .recipe_key = "", .kind = SettingKind::kChoice,
     .field = &S::gptq_v1_zeros, .choices = "auto|per-field|whole-word",
     .doc = "how GPTQ v1 zero points (stored as z - 1) are read: as their writer did (auto: whole words for GPTQModel's files, else per field), per field like exllama and vLLM, or by whole words like GPTQModel"},
}};
// clang-format on
// kSettingCount must be the table's length: an entry it leaves out would be default-made.
static_assert(std::ranges::none_of(kTable, [](const SettingSpec& spec) { return spec.name.empty(); }),
              "kSettingCount is larger than the settings table");

// (QLOAD_WORLD_TOKEN*: the launcher's secret, read with the world (distributed/world.hpp), never printed
// by `qload config` as a setting would be.)
constexpr std::array<std::string_view, 11> kNonSettings{
    "QLOAD_WERROR",   "QLOAD_CUDA",        "QLOAD_STATIC",          "QLOAD_CUDA_SIM",
    "QLOAD_XXHSUM",   "QLOAD_BUILD_TESTS", "QLOAD_BUILD_BENCH",     "QLOAD_BENCH_NO_PYTHON",
    "QLOAD_SANITIZE", "QLOAD_WORLD_TOKEN", "QLOAD_WORLD_TOKEN_FILE"};

std::size_t index_of(const SettingSpec& spec) noexcept {
  return static_cast<std::size_t>(&spec - kTable.data());
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

Result<std::uint64_t> parse_count(std::string_view text) {
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range) return fail(Errc::kOverflow, "too large");
  if (ec != std::errc{} || end != text.data() + text.size())
    return fail(Errc::kInvalidArgument, fmt::format("'{}' is not a whole number", text));
  return n;
}

// The value `text` denotes for `spec`, checked against its bounds; stored into `values`.
Status parse_into(const SettingSpec& spec, std::string_view text, Settings& values) {
  const auto out_of_range = [&](std::uint64_t n, std::string_view unit) {
    return fail(Errc::kOverflow, fmt::format("{}{} is outside {}..{}{}", n, unit, spec.min,
                                             spec.max == UINT64_MAX ? std::string() : std::to_string(spec.max), unit));
  };
  switch (spec.kind) {
    case SettingKind::kChoice: {
      const std::string_view choices = spec.choices;
      for (std::size_t at = 0; at <= choices.size();) {
        const std::size_t bar = std::min(choices.find('|', at), choices.size());
        if (choices.substr(at, bar - at) == text) {
          values.*std::get<std::string S::*>(spec.field) = std::string(text);
          return {};
        }
        at = bar + 1;
      }
      return fail(Errc::kInvalidArgument, fmt::format("'{}' is not one of {}", text, choices));
    }
    case SettingKind::kSwitch: {
      std::string& field = values.*std::get<std::string S::*>(spec.field);
      if (lower(text) == "auto") {
        field = "auto";
        return {};
      }
      const Result<bool> on = parse_bool(text);
      if (!on)
        return fail(Errc::kInvalidArgument,
                    fmt::format("'{}' is not auto, on or off (or 1/0, true/false, yes/no)", text));
      field = *on ? "on" : "off";
      return {};
    }
    case SettingKind::kCount: {
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, parse_count(text));
      if (n < spec.min || n > spec.max) return out_of_range(n, "");
      values.*std::get<std::uint32_t S::*>(spec.field) = static_cast<std::uint32_t>(n);
      return {};
    }
    case SettingKind::kBytes: {
      QLOAD_ASSIGN_OR_RETURN(const std::uint64_t n, parse_byte_size(text));
      if (n < spec.min || n > spec.max) return out_of_range(n, " bytes");
      if (n % spec.multiple_of != 0)
        return fail(Errc::kInvalidArgument, fmt::format("{} bytes is not a multiple of {}", n, spec.multiple_of));
      if (spec.power_of_two && !std::has_single_bit(n))
        return fail(Errc::kInvalidArgument, fmt::format("{} bytes is not a power of two", n));
      values.*std::get<std::uint64_t S::*>(spec.field) = n;
      return {};
    }
    case SettingKind::kDuration: {
      QLOAD_ASSIGN_OR_RETURN(const std::chrono::nanoseconds d, parse_duration(text));
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d);
      const auto n = static_cast<std::uint64_t>(ms.count());
      if (n < spec.min || n > spec.max) return out_of_range(n, "ms");
      values.*std::get<std::chrono::milliseconds S::*>(spec.field) = ms;
      return {};
    }
  }
  return fail(Errc::kInternal, "unknown setting kind");
}

}  // namespace

std::string_view setting_kind_name(SettingKind kind) noexcept {
  switch (kind) {
    case SettingKind::kBytes: return "bytes";
    case SettingKind::kCount: return "count";
    case SettingKind::kDuration: return "duration";
    case SettingKind::kSwitch: return "switch";
    case SettingKind::kChoice: return "choice";
  }
  return "?";
}

std::string_view setting_source_name(SettingSource source) noexcept {
  switch (source) {
    case SettingSource::kDefault: return "default";
    case SettingSource::kRecipe: return "recipe";
    case SettingSource::kEnvironment: return "environment";
    case SettingSource::kOption: return "option";
  }
  return "?";
}

std::span<const SettingSpec> setting_table() noexcept {
  return kTable;
}

const SettingSpec* find_setting(std::string_view name) noexcept {
  for (const SettingSpec& spec : kTable)
    if (spec.name == name || spec.env == name) return &spec;
  return nullptr;
}

bool known_non_setting_variable(std::string_view name) noexcept {
  // QLOAD_CUDASIM_*: the simulated CUDA runtime's own (cudasim/include/qload/cudasim/control.hpp).
  return name.starts_with("QLOAD_TEST_") || name.starts_with("QLOAD_CUDASIM_") ||
         std::ranges::find(kNonSettings, name) != kNonSettings.end();
}

Environment process_environment() {
  Environment out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return out;
}

std::string setting_suggestion(std::string_view name) {
  const bool env = name.starts_with("QLOAD_");
  const std::string wanted = env ? std::string(name) : lower(name);
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(3, wanted.size() / 3) + 1;
  for (const SettingSpec& spec : kTable) {
    const std::string_view candidate = env ? spec.env : spec.name;
    const std::size_t d = edit_distance(wanted, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

const SettingOrigin& ResolvedSettings::origin(const SettingSpec& spec) const noexcept {
  return origins_[index_of(spec)];
}

Status ResolvedSettings::set(std::string_view name, std::string_view text, SettingSource source,
                             std::string_view where) {
  const SettingSpec* spec = find_setting(name);
  if (spec == nullptr) {
    const std::string suggestion = setting_suggestion(name);
    return fail(Errc::kInvalidArgument,
                fmt::format("{}: no setting is called '{}'{}", where, name,
                            suggestion.empty() ? "" : fmt::format(" (did you mean {}?)", suggestion)));
  }
  // Parsed even when a higher source wins, so a bad value never hides behind a good one.
  Settings parsed = values_;
  if (Status s = parse_into(*spec, text, parsed); !s)
    return fail(Error(s.error().code(), fmt::format("{}={}: {}", where, text, s.error().message())));
  SettingOrigin& origin = origins_[index_of(*spec)];
  if (source < origin.source) return {};
  values_ = std::move(parsed);
  origin = SettingOrigin{.source = source, .where = std::string(where)};
  return {};
}

Status ResolvedSettings::apply_environment(const Environment& environment, std::vector<std::string>& warnings) {
  for (const auto& [name, value] : environment) {
    if (!name.starts_with("QLOAD_")) continue;
    const SettingSpec* spec = find_setting(name);
    if (spec == nullptr || spec->env != name) {
      if (known_non_setting_variable(name)) continue;
      const std::string suggestion = setting_suggestion(name);
      warnings.push_back(fmt::format("{} is not a qload setting and is ignored{}", name,
                                     suggestion.empty() ? "" : fmt::format(" (did you mean {}?)", suggestion)));
      continue;
    }
    if (value.empty()) continue;
    QLOAD_TRY(set(spec->name, value, SettingSource::kEnvironment, name));
  }
  return {};
}

void ResolvedSettings::fit_defaults() {
  SettingOrigin& slot = origins_[index_of(*find_setting("slot_bytes"))];
  if (slot.source != SettingSource::kDefault || values_.slot_bytes <= values_.staging_bytes) return;
  values_.slot_bytes = std::max<std::uint64_t>(4096, values_.staging_bytes / 4096 * 4096);
  slot.where = "fitted to staging_bytes";
}

std::string ResolvedSettings::text(const SettingSpec& spec) const {
  switch (spec.kind) {
    case SettingKind::kChoice: return values_.*std::get<std::string S::*>(spec.field);
    case SettingKind::kSwitch: return values_.*std::get<std::string S::*>(spec.field);
    case SettingKind::kCount: return std::to_string(values_.*std::get<std::uint32_t S::*>(spec.field));
    case SettingKind::kDuration: return format_duration(values_.*std::get<std::chrono::milliseconds S::*>(spec.field));
    case SettingKind::kBytes: return format_byte_size(values_.*std::get<std::uint64_t S::*>(spec.field));
  }
  return "?";
}

}  // namespace qload
