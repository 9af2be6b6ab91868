// `qload lock PATH|RECIPE -o FILE` and `qload verify PATH|RECIPE --lock FILE`: a lockfile
// records what a load reads (lockfile.hpp); verify re-hashes the files against it.
#include <cstdlib>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "qload/formats/checkpoint_digest.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/units.hpp"
#include "qload/scripts/lockfile.hpp"

namespace qload::cli {
namespace {

// Every file's XXH3-128 and every tensor's XXH3-64, read once through the load's I/O engine.
Result<formats::CheckpointDigest> digest(const formats::Catalog& catalog, const scheduler::LoadOptions& options) {
  QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<io::Reader> reader, io::make_reader(options.io, options.log));
  return formats::digest_checkpoint(*reader, catalog);
}

}  // namespace

int run_lock(const LockArgs& args) {
  // A lock records a single-process plan; the ranks of a multi-process load check everything
  // else against it (session/request.hpp apply_lock).
  auto world = world_from_env(std::getenv);
  if (!world) return report(world.error());
  if (*world)
    return report(Error(Errc::kInvalidArgument,
                        "qload lock makes a single-process lock: run it without WORLD_SIZE; "
                        "every rank of a multi-process load can then load --locked with it"));
  auto request = load_request(args.load);
  if (!request) return report(request.error());
  auto planned = session::plan_request(std::move(*request));
  if (!planned) return report(planned.error());
  auto digests = digest(planned->catalog, planned->request.options);
  if (!digests) return report(digests.error());
  scripts::Lockfile lock = scripts::lock_checkpoint(planned->catalog, *digests);
  if (planned->request.recipe) {
    lock.recipe = args.load.spec.source;
    lock.recipe_hash = planned->request.recipe->hash;
  }
  lock.plan_hash = planned->plan_hash;
  if (Status s = scripts::write_lockfile(args.out, lock); !s) return report(s.error());
  std::uint64_t bytes = 0;
  for (const scripts::LockedFile& f : lock.files) bytes += f.bytes;
  fmt::print("qload: locked {} files ({}), {} tensors; plan {}{} -> {}\n", lock.files.size(), format_bytes(bytes),
             lock.tensors.size(), io::hex64(lock.plan_hash),
             lock.recipe_hash ? fmt::format(", recipe {}", io::hex64(*lock.recipe_hash)) : std::string(),
             escape_for_terminal(args.out));
  return 0;
}

int run_verify(const VerifyArgs& args) {
  LoadArgs load;
  load.spec.source = args.path;
  auto request = load_request(load);
  if (!request) return report(request.error());
  auto lock = scripts::read_lockfile(args.lock);
  if (!lock) return report(lock.error());
  auto catalog = scheduler::open_source(request->source);
  if (!catalog) return report(catalog.error());
  auto digests = digest(*catalog, request->options);
  if (!digests) return report(digests.error());
  std::vector<std::string> differences = scripts::lock_differences(*lock, *catalog, &*digests);
  if (request->recipe && lock->recipe_hash != request->recipe->hash)
    differences.insert(differences.begin(), "the recipe (or a module it requires) differs from the locked one");
  std::uint64_t bytes = 0;
  for (const formats::FileDigestEntry& f : digests->files) bytes += f.bytes;
  if (args.json) {
    fmt::print("{}\n", nlohmann::json{{"schema", "qload.verify/1"},
                                      {"lock", args.lock},
                                      {"files", digests->files.size()},
                                      {"tensors", digests->tensors.size()},
                                      {"bytes", bytes},
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
    fmt::print("qload: verified {} files ({}) and {} tensors against {}\n", digests->files.size(), format_bytes(bytes),
               digests->tensors.size(), escape_for_terminal(args.lock));
  return 0;
}

}  // namespace qload::cli
