// Engine selection, the io_uring probe and helpers shared by every engine.
#include "qload/io/reader.hpp"

#include <liburing.h>
#include <sys/resource.h>

#include <array>
#include <charconv>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace qload::io {

std::string_view engine_name(EngineKind kind) noexcept {
  switch (kind) {
    case EngineKind::kAuto: return "auto";
    case EngineKind::kUring: return "io_uring";
    case EngineKind::kPread: return "pread";
  }
  return "?";
}

Result<EngineKind> parse_engine(std::string_view text) {
  if (text == "auto") return EngineKind::kAuto;
  if (text == "uring" || text == "io_uring") return EngineKind::kUring;
  if (text == "pread") return EngineKind::kPread;
  return fail(Errc::kInvalidArgument, fmt::format("unknown I/O engine '{}' (expected auto, uring or pread)", text));
}

Result<FileId> Reader::open_file(const std::string& path, const std::optional<FileIdentity>& expected) {
  QLOAD_ASSIGN_OR_RETURN(InputFile file, InputFile::open(path, direct_, expected));
  return add_file(std::move(file));
}

namespace {

// CAP_IPC_LOCK (bit 14 of the effective set) exempts registered buffers from RLIMIT_MEMLOCK.
bool has_cap_ipc_lock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const std::string hex = line.substr(line.find_first_not_of(" \t", 7));
    std::uint64_t caps = 0;
    std::from_chars(hex.data(), hex.data() + hex.size(), caps, 16);
    return (caps >> 14) & 1;
  }
  return false;
}

}  // namespace

UringProbe probe_uring() {
  UringProbe probe;
  rlimit lim{};
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0)
    probe.memlock_limit = lim.rlim_cur == RLIM_INFINITY ? UINT64_MAX : lim.rlim_cur;
  probe.cap_ipc_lock = has_cap_ipc_lock();

  io_uring ring{};
  const int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    probe.reason = Error::from_errno(-rc, "io_uring_queue_init").message();
    if (rc == -EPERM) probe.reason += " (disabled by the kernel.io_uring_disabled sysctl or a seccomp policy)";
    if (rc == -ENOSYS) probe.reason += " (kernel built without io_uring)";
    return probe;
  }
  if (io_uring_probe* ops = io_uring_get_probe_ring(&ring); ops != nullptr) {
    probe.usable = io_uring_opcode_supported(ops, IORING_OP_READ) != 0;
    probe.read_fixed = io_uring_opcode_supported(ops, IORING_OP_READ_FIXED) != 0;
    io_uring_free_probe(ops);
    if (!probe.usable) probe.reason = "the kernel lacks IORING_OP_READ (needs Linux 5.6 or later)";
  } else {
    probe.reason = "the kernel cannot list io_uring opcodes (needs Linux 5.6 or later)";
  }
  probe.sparse_files = io_uring_register_files_sparse(&ring, 2) == 0;
  io_uring_queue_exit(&ring);
  return probe;
}

Result<std::unique_ptr<Reader>> make_reader(const ReaderOptions& options, const Logger& log) {
  switch (options.engine) {
    case EngineKind::kPread: return make_pread_reader(options, log);
    case EngineKind::kUring: {
      const UringProbe probe = probe_uring();
      if (!probe.usable) return fail(Errc::kUnsupported, "io_uring was requested but is unavailable: " + probe.reason);
      return make_uring_reader(options, log);
    }
    case EngineKind::kAuto: break;
  }
  const UringProbe probe = probe_uring();
  if (probe.usable) {
    auto reader = make_uring_reader(options, log);
    if (reader) return reader;
    log.warn(fmt::format("io_uring unavailable ({}); using the pread thread pool", reader.error().to_string()));
  } else {
    log.warn(fmt::format("io_uring unavailable ({}); using the pread thread pool", probe.reason));
  }
  return make_pread_reader(options, log);
}

Status read_all(Reader& reader, std::span<const ReadRequest> requests) {
  QLOAD_TRY(reader.submit(requests));
  std::optional<Error> first_error;
  std::array<ReadCompletion, 32> batch;
  while (reader.pending() > 0) {
    QLOAD_ASSIGN_OR_RETURN(const std::size_t n, reader.wait(batch, 1));
    for (std::size_t i = 0; i < n; ++i)
      if (!batch[i].status && !first_error) first_error = std::move(batch[i].status.error());
  }
  if (first_error) return fail(std::move(*first_error));
  return {};
}

}  // namespace qload::io
