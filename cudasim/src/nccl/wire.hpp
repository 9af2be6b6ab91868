// How the simulated NCCL's ranks talk: fixed-size messages over an abstract Unix socket (a
// name, no file), which reaches threads of one process and processes of one machine alike.
// The rank that made the unique id runs the hub (hub.cpp): every rank connects to it, it
// checks that they agree, and it relays each collective's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qload::cudasim::nccl {

// The unique id: this magic, then the hub's socket name (NUL-terminated).
inline constexpr char kIdMagic[] = "qload-ncclsim/1";
inline constexpr std::uint32_t kHelloMagic = 0x51'4e'43'4c;  // "QNCL"

struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::int32_t nranks = 0;
  std::int32_t rank = 0;
  std::int32_t device = 0;
  std::int64_t pid = 0;
};

// The hub's answer to a hello, and to each collective: an ncclResult_t, and why when not 0.
struct Reply {
  std::int32_t status = 0;
  char message[252] = {};
};
Reply make_reply(int status, const std::string& message);

enum class OpKind : std::uint32_t { kBroadcast = 1 };

// What a rank sends for each collective (the root then sends `bytes` bytes).
struct OpHeader {
  std::uint64_t seq = 0;  // 1 for the communicator's first collective
  OpKind kind = OpKind::kBroadcast;
  std::int32_t root = 0;
  std::uint64_t bytes = 0;
};

// Whole messages or nothing: false on a closed or failed socket (never SIGPIPE).
bool send_all(int fd, const void* data, std::size_t size);
bool recv_all(int fd, void* data, std::size_t size);

// An abstract socket listening as `name` (or connected to it); -1 with errno on failure.
int listen_abstract(const std::string& name);
int connect_abstract(const std::string& name);

// Serves one clique on `listen_fd` (owned) in a thread of its own, until every rank has left.
void start_hub(int listen_fd);

}  // namespace qload::cudasim::nccl
