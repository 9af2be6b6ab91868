// The pread engine: a pool of worker threads, each running one request at a time with
// pread(2). The fallback where io_uring is unavailable (old kernels, seccomp'd containers,
// io_uring_disabled) and a reference the io_uring engine is checked against. A buffered read
// that allows it (ReadRequest::fill_pages) and whose destination has whole pages never touched
// fills them from a mapping of the file
// (page_fill.hpp) and preads only what is left: the head and tail pages, and whatever the
// filler declined.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include <fmt/format.h>

#include "page_fill.hpp"
#include "qload/io/reader.hpp"
#include "qload/runtime/mapped_region.hpp"
#include "qload/runtime/thread_pool.hpp"
#include "read_op.hpp"

namespace qload::io {
namespace {

class PreadReader final : public Reader {
 public:
  PreadReader(const ReaderOptions& options, const Logger& log)
      : Reader(options.direct),
        options_(options),
        log_(log),
        filler_(options.faults == nullptr ? detail::PageFiller::open() : std::nullopt),
        pool_(options.queue_depth, "qload-pread") {}
  // Queued reads that have not started are dropped; pool_ is declared last, so it is
  // destroyed first and joins the workers (finishing reads in progress) before the files
  // and completion queue they use go away.
  ~PreadReader() override { dropping_.store(true, std::memory_order_relaxed); }

  std::string_view engine() const noexcept override { return "pread"; }
  Result<FileId> add_file(InputFile file) override {
    files_.push_back(std::move(file));
    return static_cast<FileId>(files_.size() - 1);
  }
  const InputFile& file(FileId id) const override { return files_.at(id); }
  std::size_t file_count() const noexcept override { return files_.size(); }
  Status register_buffers(std::span<const std::span<std::byte>>) override { return {}; }
  Status submit(std::span<const ReadRequest> requests) override;
  Result<std::size_t> wait(std::span<ReadCompletion> out, std::size_t min_count) override;
  std::size_t pending() const noexcept override { return pending_; }
  ReaderStats stats() const noexcept override {
    std::lock_guard lock(mutex_);
    ReaderStats out = stats_;
    out.max_in_flight = peak_active_.load();
    return out;
  }

 private:
  void run(const ReadRequest& request, const InputFile& file);
  // Reads `request` with pread, counting into `delta`; errors name the file and offset.
  Status read(const ReadRequest& request, const InputFile& file, ReaderStats& delta) const;
  // Fills the whole pages of a buffered read's destination from a mapping of the file
  // (page_fill.hpp); returns [begin, end) of dest filled, empty when nothing was.
  std::pair<std::uint64_t, std::uint64_t> fill(const ReadRequest& request, const InputFile& file) const;
  // `was_active`: a worker ran the read (counted in active_), not an empty one done at submit.
  void finish(ReadCompletion completion, const ReaderStats& delta, bool was_active);

  ReaderOptions options_;
  Logger log_;
  std::deque<InputFile> files_;  // deque: workers hold references while files are added
  std::size_t pending_ = 0;      // touched only by the owning thread
  mutable std::mutex mutex_;     // guards done_ and stats_
  std::condition_variable completed_;
  std::deque<ReadCompletion> done_;
  ReaderStats stats_;
  std::optional<detail::PageFiller> filler_;
  std::atomic<bool> dropping_{false};
  std::atomic<std::uint64_t> active_{0};       // requests being read by workers now
  std::atomic<std::uint64_t> peak_active_{0};  // the most at once
  ThreadPool pool_;
};

Status PreadReader::submit(std::span<const ReadRequest> requests) {
  for (const ReadRequest& r : requests) QLOAD_TRY(detail::validate(r, files_));
  for (const ReadRequest& r : requests) {
    ++pending_;
    if (r.dest.empty()) {
      finish(ReadCompletion{r.tag, {}}, {}, /*was_active=*/false);
      continue;
    }
    const InputFile* file = &files_[r.file];
    pool_.submit([this, r, file] { run(r, *file); });
  }
  return {};
}

void PreadReader::run(const ReadRequest& request, const InputFile& file) {
  if (dropping_.load(std::memory_order_relaxed)) return;
  const std::uint64_t active = active_.fetch_add(1) + 1;
  for (std::uint64_t peak = peak_active_.load(); active > peak && !peak_active_.compare_exchange_weak(peak, active);) {
  }
  ReaderStats delta;
  const auto [begin, end] = fill(request, file);
  delta.bytes += end - begin;
  delta.filled_bytes += end - begin;
  Status status =
      read({.file = request.file, .offset = request.offset, .dest = request.dest.first(begin)}, file, delta);
  if (status)
    status =
        read({.file = request.file, .offset = request.offset + end, .dest = request.dest.subspan(end)}, file, delta);
  finish(ReadCompletion{request.tag, std::move(status)}, delta, /*was_active=*/true);
}

Status PreadReader::read(const ReadRequest& request, const InputFile& file, ReaderStats& delta) const {
  if (request.dest.empty()) return {};
  detail::ReadOp op{.request = request};
  std::optional<Error> error;
  for (;;) {
    const detail::Segment& seg = detail::next_segment(op, file);
    const ssize_t n =
        ::pread(seg.direct ? file.direct_fd() : file.fd(), seg.dest, seg.length, static_cast<off_t>(seg.offset));
    ++delta.ops;
    const int result = n < 0 ? -errno : static_cast<int>(n);
    switch (detail::on_result(op, file, result, options_, delta, &error)) {
      case detail::Step::kContinue: continue;
      case detail::Step::kDone: return {};
      case detail::Step::kFailed: return fail(std::move(*error));
    }
  }
}

std::pair<std::uint64_t, std::uint64_t> PreadReader::fill(const ReadRequest& request, const InputFile& file) const {
  constexpr std::uint64_t kMinPages = 16;  // below this, registering costs more than the faults
  const std::span<std::byte> pages = detail::PageFiller::whole_pages(request.dest);
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!filler_ || !request.fill_pages || file.direct_fd() >= 0 || pages.size() < kMinPages * page) return {0, 0};
  const std::uint64_t begin = static_cast<std::uint64_t>(pages.data() - request.dest.data());
  const std::uint64_t at = request.offset + begin, mapped_at = at / page * page;
  Result<MappedRegion> map = MappedRegion::map(file.fd(), mapped_at, at - mapped_at + pages.size(), file.path());
  if (!map) return {0, 0};
  const std::uint64_t filled = filler_->fill(pages, map->data() + (at - mapped_at));
  return {begin, begin + filled};
}

void PreadReader::finish(ReadCompletion completion, const ReaderStats& delta, bool was_active) {
  if (was_active) active_.fetch_sub(1);
  {
    std::lock_guard lock(mutex_);
    done_.push_back(std::move(completion));
    stats_.bytes += delta.bytes;
    stats_.direct_bytes += delta.direct_bytes;
    stats_.filled_bytes += delta.filled_bytes;
    stats_.ops += delta.ops;
    stats_.short_reads += delta.short_reads;
    stats_.retries += delta.retries;
  }
  completed_.notify_one();
}

Result<std::size_t> PreadReader::wait(std::span<ReadCompletion> out, std::size_t min_count) {
  const std::size_t target = std::min(min_count, pending_);
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [&] { return done_.size() >= target; });
  const std::size_t n = std::min(out.size(), done_.size());
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = std::move(done_.front());
    done_.pop_front();
  }
  pending_ -= n;
  return n;
}

}  // namespace

Result<std::unique_ptr<Reader>> make_pread_reader(const ReaderOptions& options, const Logger& log) {
  if (options.queue_depth == 0 || options.queue_depth > 256)
    return fail(Errc::kInvalidArgument, fmt::format("pread engine: {} threads is outside 1..256", options.queue_depth));
  return std::unique_ptr<Reader>(std::make_unique<PreadReader>(options, log));
}

}  // namespace qload::io
