// The Reader: qload's one way to get file bytes into memory.
//
// A caller adds files, submits batches of reads (file, offset, destination span, tag) and
// collects completions; it never sees which engine runs them. Two engines implement it:
// io_uring (reader_uring.cpp) and a pread thread pool (reader_pread.cpp); make_reader()
// picks one (probing io_uring first) and both return byte-identical results. The pread pool is
// the faster of the two into a caller's fresh memory from the page cache (a warm load_into on
// the host: the scheduler picks it then), the io_uring engine for everything else.
//
// Contract for every engine:
//  - A read completes with all of its bytes in place, or with an error naming the file and
//    the byte offset that failed. A read reaching past the end of the file is refused at
//    submit (kTruncated); a file that shrinks during the read fails the same way.
//  - Short reads are continued, EINTR/EAGAIN retried, EIO retried a bounded number of times.
//  - O_DIRECT is used for the part of a read whose file offset and destination address are
//    both aligned (see InputFile::direct_alignment); unaligned heads and tails go through the
//    page cache. No read op exceeds 0x7ffff000 bytes (the most Linux moves in one call).
//  - Destination memory must stay valid until the read's completion has been returned, and
//    nothing else may touch it meanwhile: for a request that allows it (fill_pages), the pread
//    engine fills the whole untouched pages of a buffered read's destination from a mapping of
//    the file (userfaultfd, io/src/page_fill.hpp), which spares the kernel faulting each one in
//    and zeroing it first.
//
// Thread-safety: a Reader is used by one thread at a time (one reader per I/O thread, the
// seastar/tigerbeetle model); the pread engine's workers are internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qload/io/input_file.hpp"
#include "qload/runtime/error.hpp"
#include "qload/runtime/log.hpp"

namespace qload::io {

class FaultInjector;

using FileId = std::uint32_t;

// The most bytes Linux transfers in one read call (MAX_RW_COUNT).
inline constexpr std::uint64_t kMaxReadBytes = 0x7ffff000;

struct ReadRequest {
  FileId file = 0;
  std::uint64_t offset = 0;
  std::span<std::byte> dest;  // receives file bytes [offset, offset + dest.size())
  std::uint64_t tag = 0;      // returned unchanged in the completion
  // Whether the pread engine may fill dest's untouched pages from a mapping of the file, 4 KiB
  // at a time (page_fill.hpp): for memory whose pages would otherwise fault in one by one (a
  // framework's fresh tensors), not for huge-page memory (qload's own arenas), whose 2 MiB
  // faults cost less than filling 4 KiB pages and keep the huge pages.
  bool fill_pages = false;
};

struct ReadCompletion {
  std::uint64_t tag = 0;
  Status status;  // ok: every byte of the request's dest is filled
};

struct ReaderStats {
  std::uint64_t bytes = 0;             // bytes delivered to callers
  std::uint64_t direct_bytes = 0;      // of which via O_DIRECT
  std::uint64_t filled_bytes = 0;      // of which filled into fresh pages from a mapping (pread engine)
  std::uint64_t ops = 0;               // read operations issued to the kernel
  std::uint64_t submit_calls = 0;      // io_uring_enter calls (0 for pread)
  std::uint64_t short_reads = 0;       // ops that returned fewer bytes than asked
  std::uint64_t retries = 0;           // ops reissued after EINTR / EAGAIN / EIO
  std::uint64_t fixed_buffer_ops = 0;  // ops that used a registered buffer
  std::uint64_t max_in_flight = 0;     // most requests being read at once (<= queue depth)
};

enum class EngineKind : std::uint8_t { kAuto, kUring, kPread };
std::string_view engine_name(EngineKind kind) noexcept;
// Parses "auto", "uring" / "io_uring", "pread".
Result<EngineKind> parse_engine(std::string_view text);

struct ReaderOptions {
  EngineKind engine = EngineKind::kAuto;
  DirectMode direct = DirectMode::kAuto;
  std::uint32_t queue_depth = 32;   // reads in flight (io_uring SQEs; pread worker threads)
  std::uint32_t eio_retries = 2;    // extra attempts after EIO before giving up
  std::uint32_t max_files = 512;    // registered-file slots reserved in the ring
  FaultInjector* faults = nullptr;  // tests only: corrupts raw read results (not owned)
};

class Reader {
 public:
  // Reads not yet started are dropped; those the kernel or a worker has begun are waited for,
  // so no destination is written after the Reader is gone.
  virtual ~Reader() = default;
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  virtual std::string_view engine() const noexcept = 0;

  // Takes ownership of `file`; ids are 0, 1, 2... in the order files are added.
  virtual Result<FileId> add_file(InputFile file) = 0;
  // Opens `path` with this reader's direct mode and adds it; `expected` as InputFile::open.
  Result<FileId> open_file(const std::string& path, const std::optional<FileIdentity>& expected = std::nullopt);
  virtual const InputFile& file(FileId id) const = 0;
  virtual std::size_t file_count() const noexcept = 0;

  // Declares memory that reads will land in again and again (the staging pool). io_uring
  // registers it as fixed buffers when the memlock limit allows (logged otherwise); the pread
  // engine ignores it. Call before submitting; may be called once.
  virtual Status register_buffers(std::span<const std::span<std::byte>> regions) = 0;

  // Queues `requests` and starts them. Every request is checked first (known file, range
  // inside the file, overflow); if any is invalid, none is queued and the error names it.
  virtual Status submit(std::span<const ReadRequest> requests) = 0;

  // Waits until min(min_count, pending()) reads have completed, then moves up to out.size()
  // finished completions into `out` and returns how many. Errors of individual reads are in
  // their completions; the Result itself fails only if the engine broke.
  virtual Result<std::size_t> wait(std::span<ReadCompletion> out, std::size_t min_count = 1) = 0;

  // Reads submitted whose completion has not been returned by wait() yet.
  virtual std::size_t pending() const noexcept = 0;
  virtual ReaderStats stats() const noexcept = 0;

 protected:
  explicit Reader(DirectMode direct) : direct_(direct) {}

 private:
  DirectMode direct_;
};

// What the io_uring probe found on this machine.
struct UringProbe {
  bool usable = false;
  std::string reason;               // why not usable, or notes (e.g. no fixed files)
  bool read_fixed = false;          // IORING_OP_READ_FIXED supported
  bool sparse_files = false;        // sparse registered-file table supported
  std::uint64_t memlock_limit = 0;  // RLIMIT_MEMLOCK soft limit in bytes (UINT64_MAX: none)
  bool cap_ipc_lock = false;        // memlock limit does not apply to registered buffers
};
UringProbe probe_uring();

// Whether the pread engine can fill fresh pages here (userfaultfd for user-mode faults, and
// transparent huge pages not set to "always"): otherwise its reads fault pages in as usual.
bool page_filling_available();

// Creates the engine `options.engine` asks for. kAuto tries io_uring and, if the probe fails,
// logs why and falls back to the pread pool. Asking for kUring explicitly where it is not
// usable is an error.
Result<std::unique_ptr<Reader>> make_reader(const ReaderOptions& options, const Logger& log);

// The engines themselves (make_reader is the normal entry point).
Result<std::unique_ptr<Reader>> make_uring_reader(const ReaderOptions& options, const Logger& log);
Result<std::unique_ptr<Reader>> make_pread_reader(const ReaderOptions& options, const Logger& log);

// Convenience: reads every request to completion; the first error (in completion order) is
// returned after all reads have finished (so no destination is still being written).
Status read_all(Reader& reader, std::span<const ReadRequest> requests);

}  // namespace qload::io
