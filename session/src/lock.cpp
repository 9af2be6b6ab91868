#include "qload/session/lock.hpp"

#include <cstdlib>

#include "qload/formats/checkpoint_digest.hpp"
#include "qload/io/reader.hpp"

namespace qload::session {
namespace {

// Every file's XXH3-128 and every tensor's XXH3-64, read once through the load's I/O engine.
Result<formats::CheckpointDigest> digest(const formats::Catalog& catalog, const scheduler::LoadOptions& options) {
  QLOAD_ASSIGN_OR_RETURN(std::unique_ptr<io::Reader> reader, io::make_reader(options.io, options.log));
  return formats::digest_checkpoint(*reader, catalog);
}

}  // namespace

Result<Lockfile> make_lock(const LoadSpec& spec, const Logger& log) {
  QLOAD_ASSIGN_OR_RETURN(const std::optional<distributed::World> world, world_of(spec));
  if (world)
    return fail(Errc::kInvalidArgument,
                "a lock is a single-process lock: make it without WORLD_SIZE; every rank of a multi-process load can "
                "then load with it");
  QLOAD_ASSIGN_OR_RETURN(LoadRequest request, build_request(spec, log));
  QLOAD_ASSIGN_OR_RETURN(const PlannedLoad planned, plan_request(std::move(request)));
  QLOAD_ASSIGN_OR_RETURN(const formats::CheckpointDigest digests, digest(planned.catalog, planned.request.options));
  Lockfile lock = lock_checkpoint(planned.catalog, digests);
  if (planned.request.recipe) {
    lock.recipe = spec.recipe.empty() ? spec.source : spec.recipe;  // as the user named it: the lock travels with it
    lock.recipe_hash = planned.request.recipe->hash;
  }
  lock.plan_hash = planned.plan_hash;
  return lock;
}

Result<Verification> verify(const LoadRequest& request, const std::string& lock_file) {
  QLOAD_ASSIGN_OR_RETURN(const Lockfile lock, read_lockfile(lock_file));
  QLOAD_ASSIGN_OR_RETURN(const formats::Catalog catalog, scheduler::open_source(request.source));
  QLOAD_ASSIGN_OR_RETURN(const formats::CheckpointDigest digests, digest(catalog, request.options));
  Verification out;
  out.differences = lock_differences(lock, catalog, &digests);
  if (request.recipe && lock.recipe_hash != request.recipe->hash)
    out.differences.insert(out.differences.begin(), "the recipe (or a module it requires) differs from the locked one");
  out.files = digests.files.size();
  out.tensors = digests.tensors.size();
  for (const formats::FileDigestEntry& f : digests.files) out.bytes += f.bytes;
  return out;
}

Status write_lock(const Lockfile& lock, const std::string& path) {
  return write_lockfile(path, lock);
}

}  // namespace qload::session
