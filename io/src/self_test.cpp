#include "qload/io/self_test.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "qload/io/digest.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/runtime/unique_fd.hpp"

namespace qload::io {
namespace {

// Removes the scratch file however the test ends.
struct ScratchFile {
  std::string path;
  ~ScratchFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

Status write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(Error::from_errno(errno, "write scratch file").with_file(path));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

// Whole-file digest plus random reads against the in-memory original.
SelfTestCase run_case(Reader& reader, FileId id, std::span<const std::byte> expected, const Xxh128& expected_hash,
                      const SelfTestOptions& options) {
  SelfTestCase c{.engine = std::string(reader.engine())};
  const auto start = std::chrono::steady_clock::now();
  auto digest = digest_file(reader, id, {.chunk_bytes = std::size_t{4} << 20, .chunks_in_flight = 8});
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!digest) {
    c.failure = digest.error().to_string();
    return c;
  }
  if (digest->xxh3_128 != expected_hash) {
    c.failure = fmt::format("whole-file XXH3-128 {} differs from {}", digest->xxh3_128.hex(), expected_hash.hex());
    return c;
  }
  std::mt19937_64 rng(options.seed);
  auto buffer = HostBuffer::allocate(std::size_t{1} << 20);
  if (!buffer) {
    c.failure = buffer.error().to_string();
    return c;
  }
  for (std::uint32_t i = 0; i < options.random_reads; ++i) {
    const std::uint64_t offset = rng() % expected.size();
    const std::uint64_t len = std::min<std::uint64_t>(rng() % buffer->size(), expected.size() - offset);
    // Every other read starts at an odd address so both direct and buffered paths are used.
    auto dest = buffer->span().subspan(i % 2, len);
    const ReadRequest req{id, offset, dest, i};
    if (Status s = read_all(reader, std::span(&req, 1)); !s) {
      c.failure = s.error().to_string();
      return c;
    }
    if (std::memcmp(dest.data(), expected.data() + offset, len) != 0) {
      c.failure = fmt::format("bytes at offset {} (length {}) differ from the file", offset, len);
      return c;
    }
  }
  const ReaderStats stats = reader.stats();
  c.bytes = stats.bytes;
  c.direct_bytes = stats.direct_bytes;
  c.passed = true;
  return c;
}

}  // namespace

bool SelfTestReport::passed() const {
  return !cases.empty() && std::all_of(cases.begin(), cases.end(), [](const SelfTestCase& c) { return c.passed; });
}

Result<SelfTestReport> run_self_test(const SelfTestOptions& options, const Logger& log) {
  SelfTestReport report;
  ScratchFile scratch{fmt::format("{}/qload-selftest-{}.bin", options.directory, ::getpid())};
  report.file = scratch.path;

  QLOAD_ASSIGN_OR_RETURN(HostBuffer original, HostBuffer::allocate(options.file_bytes));
  std::mt19937_64 rng(options.seed);
  for (std::size_t i = 0; i + 8 <= original.size(); i += 8) {
    const std::uint64_t word = rng();
    std::memcpy(original.data() + i, &word, 8);
  }
  report.expected_xxh3_128 = xxh3_128(original.span()).hex();
  {
    UniqueFd fd(::open(scratch.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd) return fail(Error::from_errno(errno, "create scratch file").with_file(scratch.path));
    QLOAD_TRY(write_all(fd.get(), original.span(), scratch.path));
  }

  const UringProbe probe = probe_uring();
  report.uring_status = probe.usable ? "available" : probe.reason;
  std::vector<EngineKind> engines{EngineKind::kPread};
  if (probe.usable) engines.insert(engines.begin(), EngineKind::kUring);
  for (EngineKind engine : engines) {
    // The scratch file was just written, so kAuto would read it buffered: the direct case
    // asks for O_DIRECT outright, and settles for auto where the file system refuses it.
    for (DirectMode direct : {DirectMode::kOn, DirectMode::kOff}) {
      ReaderOptions ro{.engine = engine, .direct = direct, .queue_depth = 8};
      QLOAD_ASSIGN_OR_RETURN(auto reader, make_reader(ro, log));
      Result<FileId> id = reader->open_file(scratch.path);
      if (!id && direct == DirectMode::kOn) {
        direct = ro.direct = DirectMode::kAuto;
        QLOAD_ASSIGN_OR_RETURN(reader, make_reader(ro, log));
        id = reader->open_file(scratch.path);
      }
      if (!id) return fail(id.error());
      SelfTestCase c = run_case(*reader, *id, original.span(), xxh3_128(original.span()), options);
      c.direct = direct == DirectMode::kOn ? "on" : direct == DirectMode::kAuto ? "auto" : "off";
      report.cases.push_back(std::move(c));
    }
  }
  return report;
}

}  // namespace qload::io
