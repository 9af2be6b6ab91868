// The io_uring engine: one ring, driven by the thread that calls submit() and wait().
//
// Each request has at most one kernel op in flight (its segments run in order), so the queue
// depth is the number of requests being read at once. SQEs are batched and entered with one
// io_uring_submit per batch; CQEs are reaped in batches. Files are registered in a sparse
// table (two slots per file: buffered and O_DIRECT), and reads landing in memory declared by
// register_buffers() use READ_FIXED, sparing the kernel a page pin per op.
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <deque>
#include <vector>

#include <fmt/format.h>

#include "qload/io/reader.hpp"
#include "read_op.hpp"

namespace qload::io {
namespace {

// A fixed buffer may be at most 1 GiB (the kernel's limit per iovec).
constexpr std::size_t kMaxFixedBufferBytes = std::size_t{1} << 30;

std::string errno_text(int err) {
  return Error::from_errno(err, "").message().substr(2);
}

class UringReader final : public Reader {
 public:
  UringReader(const ReaderOptions& options, const Logger& log) : Reader(options.direct), options_(options), log_(log) {}
  ~UringReader() override;

  Status init();
  std::string_view engine() const noexcept override { return "io_uring"; }
  Result<FileId> add_file(InputFile file) override;
  const InputFile& file(FileId id) const override { return files_.at(id); }
  std::size_t file_count() const noexcept override { return files_.size(); }
  Status register_buffers(std::span<const std::span<std::byte>> regions) override;
  Status submit(std::span<const ReadRequest> requests) override;
  Result<std::size_t> wait(std::span<ReadCompletion> out, std::size_t min_count) override;
  std::size_t pending() const noexcept override { return pending_; }
  ReaderStats stats() const noexcept override { return stats_; }

 private:
  unsigned fill_submission_queue();
  Status enter(unsigned wait_for);
  void reap();
  void handle(std::uint32_t op_index, int result);
  int fixed_buffer_index(const detail::Segment& seg) const;

  ReaderOptions options_;
  Logger log_;
  io_uring ring_{};
  bool ring_live_ = false;
  bool fixed_files_ = false;
  std::vector<iovec> fixed_buffers_;  // sorted by address
  std::deque<InputFile> files_;       // deque: references stay valid as files are added
  std::vector<detail::ReadOp> ops_;   // index = user_data of its SQE
  std::vector<std::uint32_t> free_ops_;
  std::deque<std::uint32_t> ready_;  // ops whose next segment waits for an SQE
  std::uint32_t in_flight_ = 0;
  std::deque<ReadCompletion> done_;
  std::size_t pending_ = 0;
  ReaderStats stats_;
};

Status UringReader::init() {
  if (options_.queue_depth == 0 || options_.queue_depth > 4096)
    return fail(Errc::kInvalidArgument, fmt::format("queue depth {} is outside 1..4096", options_.queue_depth));
  const int rc = io_uring_queue_init(options_.queue_depth, &ring_, 0);
  if (rc < 0) return fail(Error::from_errno(-rc, "io_uring_queue_init"));
  ring_live_ = true;
  fixed_files_ = io_uring_register_files_sparse(&ring_, options_.max_files * 2) == 0;
  // Bound io-wq's workers (they serve IOSQE_ASYNC reads) to the queue depth: more threads
  // than reads in flight only add scheduling. Best effort: older kernels lack the call.
  std::array<unsigned, 2> workers{options_.queue_depth, options_.queue_depth};
  (void)io_uring_register_iowq_max_workers(&ring_, workers.data());
  if (!fixed_files_) log_.debug("io_uring: no sparse file table; using plain descriptors");
  return {};
}

UringReader::~UringReader() {
  if (!ring_live_) return;
  // The kernel may still be writing into callers' buffers: let every op finish first.
  if (in_flight_ > 0) (void)io_uring_submit(&ring_);
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
  }
  io_uring_queue_exit(&ring_);
}

Result<FileId> UringReader::add_file(InputFile file) {
  const auto id = static_cast<FileId>(files_.size());
  if (fixed_files_ && id < options_.max_files) {
    const std::array<int, 2> fds{file.fd(), file.direct_fd()};
    const int rc = io_uring_register_files_update(&ring_, id * 2, fds.data(), 2);
    if (rc < 0) return fail(Error::from_errno(-rc, "io_uring_register_files_update").with_file(file.path()));
  }
  files_.push_back(std::move(file));
  return id;
}

Status UringReader::register_buffers(std::span<const std::span<std::byte>> regions) {
  if (!fixed_buffers_.empty()) return fail(Errc::kInvalidArgument, "buffers are already registered");
  std::vector<iovec> iovs;
  std::uint64_t total = 0;
  for (auto region : regions) {
    if (region.size() > kMaxFixedBufferBytes) {
      log_.info(
          fmt::format("io_uring: a {} byte region exceeds the 1 GiB fixed-buffer limit; "
                      "reading without fixed buffers",
                      region.size()));
      return {};
    }
    iovs.push_back(iovec{region.data(), region.size()});
    total += region.size();
  }
  std::sort(iovs.begin(), iovs.end(), [](const iovec& a, const iovec& b) { return a.iov_base < b.iov_base; });
  const int rc = io_uring_register_buffers(&ring_, iovs.data(), static_cast<unsigned>(iovs.size()));
  if (rc < 0) {
    const UringProbe probe = probe_uring();
    log_.warn(
        fmt::format("io_uring: registering {} MiB of fixed buffers failed ({}); RLIMIT_MEMLOCK is {} KiB, "
                    "CAP_IPC_LOCK {}; reading without fixed buffers",
                    total >> 20, errno_text(-rc), probe.memlock_limit >> 10, probe.cap_ipc_lock ? "held" : "absent"));
    return {};
  }
  fixed_buffers_ = std::move(iovs);
  return {};
}

int UringReader::fixed_buffer_index(const detail::Segment& seg) const {
  if (fixed_buffers_.empty()) return -1;
  auto it = std::upper_bound(fixed_buffers_.begin(), fixed_buffers_.end(), seg.dest,
                             [](std::byte* p, const iovec& v) { return p < static_cast<std::byte*>(v.iov_base); });
  if (it == fixed_buffers_.begin()) return -1;
  --it;
  const auto* base = static_cast<std::byte*>(it->iov_base);
  if (seg.dest + seg.length > base + it->iov_len) return -1;
  return static_cast<int>(it - fixed_buffers_.begin());
}

Status UringReader::submit(std::span<const ReadRequest> requests) {
  for (const ReadRequest& r : requests) QLOAD_TRY(detail::validate(r, files_));
  for (const ReadRequest& r : requests) {
    ++pending_;
    if (r.dest.empty()) {
      done_.push_back(ReadCompletion{r.tag, {}});
      continue;
    }
    std::uint32_t index = 0;
    if (free_ops_.empty()) {
      index = static_cast<std::uint32_t>(ops_.size());
      ops_.emplace_back();
    } else {
      index = free_ops_.back();
      free_ops_.pop_back();
    }
    ops_[index] = detail::ReadOp{.request = r};
    ready_.push_back(index);
  }
  if (fill_submission_queue() > 0) QLOAD_TRY(enter(0));
  return {};
}

unsigned UringReader::fill_submission_queue() {
  unsigned queued = 0;
  while (in_flight_ < options_.queue_depth && !ready_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;
    const std::uint32_t index = ready_.front();
    ready_.pop_front();
    detail::ReadOp& op = ops_[index];
    const InputFile& file = files_[op.request.file];
    const detail::Segment& seg = detail::next_segment(op, file);
    const bool registered = fixed_files_ && op.request.file < options_.max_files;
    const int fd = registered ? static_cast<int>(op.request.file * 2 + (seg.direct ? 1 : 0))
                              : (seg.direct ? file.direct_fd() : file.fd());
    const int buf = fixed_buffer_index(seg);
    if (buf >= 0) {
      io_uring_prep_read_fixed(sqe, fd, seg.dest, seg.length, seg.offset, buf);
      ++stats_.fixed_buffer_ops;
    } else {
      io_uring_prep_read(sqe, fd, seg.dest, seg.length, seg.offset);
    }
    if (registered) sqe->flags |= IOSQE_FIXED_FILE;
    // A buffered read that hits the page cache would otherwise run inline in the submitting
    // thread, one after another: with more than one in flight, hand them to io-wq workers
    // so they copy in parallel (measured in docs/benchmarks.md). Direct reads are async anyway.
    if (!seg.direct && options_.queue_depth > 1) sqe->flags |= IOSQE_ASYNC;
    io_uring_sqe_set_data64(sqe, index);
    ++in_flight_;
    stats_.max_in_flight = std::max<std::uint64_t>(stats_.max_in_flight, in_flight_);
    ++stats_.ops;
    ++queued;
  }
  return queued;
}

// One io_uring_enter for everything queued, waiting for `wait_for` completions.
Status UringReader::enter(unsigned wait_for) {
  ++stats_.submit_calls;
  const int rc = io_uring_submit_and_wait(&ring_, wait_for);
  // EINTR: a signal arrived while waiting; EAGAIN/EBUSY: the kernel is short of resources or
  // the CQ is full. All three clear once completions are reaped, which the caller does next.
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    return fail(Error::from_errno(-rc, "io_uring_submit_and_wait"));
  return {};
}

void UringReader::reap() {
  std::array<io_uring_cqe*, 64> cqes{};
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes.data(), cqes.size());
    if (n == 0) return;
    for (unsigned i = 0; i < n; ++i) handle(static_cast<std::uint32_t>(io_uring_cqe_get_data64(cqes[i])), cqes[i]->res);
    io_uring_cq_advance(&ring_, n);
  }
}

void UringReader::handle(std::uint32_t op_index, int result) {
  --in_flight_;
  detail::ReadOp& op = ops_[op_index];
  std::optional<Error> error;
  switch (detail::on_result(op, files_[op.request.file], result, options_, stats_, &error)) {
    case detail::Step::kContinue:
      ready_.push_front(op_index);  // keep a request's bytes flowing in file order
      return;
    case detail::Step::kDone: done_.push_back(ReadCompletion{op.request.tag, {}}); break;
    case detail::Step::kFailed: done_.push_back(ReadCompletion{op.request.tag, fail(std::move(*error))}); break;
  }
  free_ops_.push_back(op_index);
}

Result<std::size_t> UringReader::wait(std::span<ReadCompletion> out, std::size_t min_count) {
  const std::size_t target = std::min(min_count, pending_);
  for (;;) {
    reap();
    const unsigned queued = fill_submission_queue();
    if (done_.size() >= target) {
      if (queued > 0) QLOAD_TRY(enter(0));
      break;
    }
    if (in_flight_ == 0) return fail(Errc::kInternal, "io_uring engine is waiting with nothing in flight");
    QLOAD_TRY(enter(1));
  }
  const std::size_t n = std::min(out.size(), done_.size());
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = std::move(done_.front());
    done_.pop_front();
  }
  pending_ -= n;
  return n;
}

}  // namespace

Result<std::unique_ptr<Reader>> make_uring_reader(const ReaderOptions& options, const Logger& log) {
  auto reader = std::make_unique<UringReader>(options, log);
  QLOAD_TRY(reader->init());
  return std::unique_ptr<Reader>(std::move(reader));
}

}  // namespace qload::io
