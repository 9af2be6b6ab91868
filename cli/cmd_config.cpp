// `qload config [SOURCE]`: every setting's effective value and where it came from (default,
// the recipe, a QLOAD_* variable, a flag); `--markdown` prints the table of settings itself,
// which docs/settings.md holds verbatim (a test compares them), and `--spec-fields` the table of
// what a load can be asked (session/spec_fields.hpp), which docs/cli.md holds verbatim.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/request.hpp"
#include "qload/session/spec_fields.hpp"

namespace qload::cli {
namespace {

// "bytes, a multiple of 4096, 4KiB..1GiB", "1..4096", "auto, uring, io_uring or pread".
std::string type_text(const SettingSpec& spec) {
  switch (spec.kind) {
    case SettingKind::kChoice: {
      std::string out(spec.choices);
      for (char& c : out)
        if (c == '|') c = '/';
      return out;
    }
    case SettingKind::kSwitch: return "auto/on/off";
    case SettingKind::kCount: return fmt::format("count, {}..{}", spec.min, spec.max);
    case SettingKind::kDuration:
      return fmt::format("duration, up to {}", format_duration(std::chrono::milliseconds(spec.max)));
    case SettingKind::kBytes: {
      std::string out = "bytes";
      if (spec.multiple_of > 1) out += fmt::format(", a multiple of {}", spec.multiple_of);
      if (spec.power_of_two) out += ", a power of two";
      if (spec.max != UINT64_MAX)
        out += fmt::format(", {}..{}", format_byte_size(spec.min), format_byte_size(spec.max));
      else if (spec.min > 0)
        out += fmt::format(", at least {}", format_byte_size(spec.min));
      return out;
    }
  }
  return "?";
}

void print_markdown() {
  const ResolvedSettings defaults;
  fmt::print("| setting | environment | recipe | type | default | what it does |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  for (const SettingSpec& spec : setting_table()) {
    const std::string recipe = spec.recipe_key.empty() ? fmt::format("`settings.{}`", spec.name)
                                                       : fmt::format("`settings.{}`, `{}`", spec.name, spec.recipe_key);
    fmt::print("| `{}` | `{}` | {} | {} | `{}` | {} |\n", spec.name, spec.env, recipe, type_text(spec),
               defaults.text(spec), spec.doc);
  }
}

}  // namespace

int run_config(const ConfigArgs& args) {
  if (args.spec_fields) {
    fmt::print("{}", session::spec_fields_markdown());
    return 0;
  }
  if (args.markdown) {
    print_markdown();
    return 0;
  }
  auto flags = session::parse_setting_assignments(args.set, "--set");
  if (!flags) return report(flags.error());
  std::vector<std::string> warnings;
  const Logger log([&warnings](LogLevel, std::string_view m) { warnings.emplace_back(m); }, LogLevel::kWarn);
  auto settings = session::resolve_settings(args.path, *flags, log);
  if (!settings) return report(settings.error());

  if (args.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const SettingSpec& spec : setting_table()) {
      const SettingOrigin& origin = settings->origin(spec);
      list.push_back({{"name", spec.name},
                      {"value", settings->text(spec)},
                      {"source", setting_source_name(origin.source)},
                      {"from", origin.where},
                      {"env", spec.env},
                      {"type", setting_kind_name(spec.kind)},
                      {"default", ResolvedSettings{}.text(spec)},
                      {"doc", spec.doc}});
    }
    fmt::print("{}\n", nlohmann::json{{"schema", "qload.config/1"}, {"settings", list}, {"warnings", warnings}}.dump(
                           2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  for (const std::string& w : warnings) fmt::print(stderr, "qload: warning: {}\n", escape_for_terminal(w));
  fmt::print("{:<20} {:<10} {:<12} {}\n", "setting", "value", "source", "from");
  for (const SettingSpec& spec : setting_table()) {
    const SettingOrigin& origin = settings->origin(spec);
    fmt::print("{:<20} {:<10} {:<12} {}\n", spec.name, escape_for_terminal(settings->text(spec)),
               setting_source_name(origin.source), escape_for_terminal(origin.where));
  }
  return 0;
}

}  // namespace qload::cli
