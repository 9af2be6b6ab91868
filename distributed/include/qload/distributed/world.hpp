// Where this process sits among the processes of one multi-process load, as torchrun (and
// other launchers, see docs/parallel.md) describe it in the environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "qload/runtime/error.hpp"

namespace qload::distributed {

struct World {
  std::uint32_t rank = 0;        // RANK: this process, 0 <= rank < size
  std::uint32_t size = 1;        // WORLD_SIZE: processes in the load
  std::uint32_t local_rank = 0;  // LOCAL_RANK: this process among those of its node
  std::uint32_t local_size = 1;  // LOCAL_WORLD_SIZE: processes on its node
  // MASTER_ADDR: where rank 0 listens. Empty (unset) is the loopback address for a world on one
  // node (complete_world fills it in) and an error for a world over several nodes.
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;  // MASTER_PORT
  // The secret every rank proves at the rendezvous (rendezvous.hpp): QLOAD_WORLD_TOKEN, or the
  // first line of the file QLOAD_WORLD_TOKEN_FILE names. Empty: a world on one node makes one
  // itself and passes it through a private file under `runtime_dir`; a world over several
  // nodes must be given one.
  std::string token;
  std::string runtime_dir;  // XDG_RUNTIME_DIR: where that file goes (empty: /tmp/qload-<uid>)

  bool one_node() const noexcept { return local_size == size; }
};

// The shortest token accepted: an HMAC key guessed offline from one recorded handshake must
// not be within reach (32 random hex digits, as `openssl rand -hex 16` prints, are 128 bits).
inline constexpr std::size_t kMinWorldTokenBytes = 16;

// Looks a variable up; null when unset (std::getenv in the CLI, a map in tests).
using EnvLookup = std::function<const char*(const char*)>;

// The world from RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
// nullopt when WORLD_SIZE is unset or 1 (a single process). With WORLD_SIZE above 1, RANK is
// required; LOCAL_WORLD_SIZE defaults to WORLD_SIZE, LOCAL_RANK to RANK mod it, MASTER_PORT to
// 29500, and MASTER_ADDR as complete_world says (required over several nodes). The token comes from QLOAD_WORLD_TOKEN
// or QLOAD_WORLD_TOKEN_FILE (a file only its owner can read, as ssh wants of a key). kInvalidArgument naming the
// variable for a value that is not a number, out of range, or inconsistent with the others; for a token shorter than
// kMinWorldTokenBytes, both variables set, or none for a world over several nodes; kPermissionDenied for a token file
// others can read.
Result<std::optional<World>> world_from_env(const EnvLookup& env);

// Every world, from the environment or given by other means (a server's own process group,
// through the C++ API, C's qload_options or Python's world=), through the same rules and
// defaults: ranks in range; an unset (empty) MASTER_ADDR is 127.0.0.1 on one node and an error
// over several; a token of at least kMinWorldTokenBytes if any, and one over several nodes.
// kInvalidArgument naming what is wrong.
Result<World> complete_world(World world);

}  // namespace qload::distributed
