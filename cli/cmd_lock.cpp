// `qload lock PATH|RECIPE -o FILE` and `qload verify PATH|RECIPE --lock FILE`: a lockfile
// records what a load reads (lockfile.hpp); verify re-hashes the files against it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/runtime/units.hpp"
#include "qload/session/lock.hpp"

namespace qload::cli {

int run_lock(const LockArgs& args) {
  auto spec = load_spec(args.load);
  if (!spec) return report(spec.error());
  auto made = session::make_lock(*spec, Logger::to_stderr(LogLevel::kWarn));
  if (!made) return report(made.error());
  const session::Lockfile& lock = *made;
  if (Status s = session::write_lock(lock, args.out); !s) return report(s.error());
  std::uint64_t bytes = 0;
  for (const session::LockedFile& f : lock.files) bytes += f.bytes;
  fmt::print("qload: locked {} files ({}), {} tensors; plan {}{} -> {}\n", lock.files.size(), format_bytes(bytes),
             lock.tensors.size(), fmt::format("{:016x}", lock.plan_hash),
             lock.recipe_hash ? fmt::format(", recipe {:016x}", *lock.recipe_hash) : std::string(),
             escape_for_terminal(args.out));
  return 0;
}

int run_verify(const VerifyArgs& args) {
  LoadArgs load;
  load.spec.source = args.path;
  load.spec.recipe = args.recipe;
  auto request = load_request(load);
  if (!request) return report(request.error());
  auto verified = session::verify(*request, args.lock);
  if (!verified) return report(verified.error());
  const std::vector<std::string>& differences = verified->differences;
  if (args.json) {
    fmt::print("{}\n", nlohmann::json{{"schema", "qload.verify/1"},
                                      {"lock", args.lock},
                                      {"files", verified->files},
                                      {"tensors", verified->tensors},
                                      {"bytes", verified->bytes},
                                      {"matches", differences.empty()},
                                      {"differences", differences}}
                           .dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    for (const std::string& d : differences) fmt::print("differs: {}\n", escape_for_terminal(d));
  }
  if (!differences.empty())
    return report(Error(Errc::kChecksumMismatch, fmt::format("{} difference(s) from the lock, first: {}",
                                                             differences.size(), differences.front()))
                      .with_file(args.lock));
  if (!args.json)
    fmt::print("qload: verified {} files ({}) and {} tensors against {}\n", verified->files,
               format_bytes(verified->bytes), verified->tensors, escape_for_terminal(args.lock));
  return 0;
}

}  // namespace qload::cli
