// Choosing an engine: explicit options and the fallback when io_uring is unavailable (QLOAD_IO
// belongs to the settings table: tests/runtime/settings_test.cpp).
#include <catch2/catch.hpp>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "io_test_support.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"

using namespace qload;
using namespace qload::testing;

TEST_CASE("engine names parse, and unknown ones are rejected", "[io][options]") {
  CHECK(io::parse_engine("pread").value() == io::EngineKind::kPread);
  CHECK(io::parse_engine("uring").value() == io::EngineKind::kUring);
  CHECK(io::parse_engine("io_uring").value() == io::EngineKind::kUring);
  CHECK(io::parse_engine("auto").value() == io::EngineKind::kAuto);
  auto bad = io::parse_engine("mmap");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code() == Errc::kInvalidArgument);
  CHECK_THAT(bad.error().message(), Catch::Contains("mmap"));
}

TEST_CASE("explicit engines are honoured and bad queue depths refused", "[io][options]") {
  auto pread = io::make_reader({.engine = io::EngineKind::kPread}, Logger{});
  REQUIRE(pread);
  CHECK((*pread)->engine() == "pread");
  if (io::probe_uring().usable) {
    auto automatic = io::make_reader({}, Logger{});
    REQUIRE(automatic);
    CHECK((*automatic)->engine() == "io_uring");
  }
  CHECK_FALSE(io::make_reader({.engine = io::EngineKind::kPread, .queue_depth = 0}, Logger{}));
  CHECK_FALSE(io::make_uring_reader({.queue_depth = 0}, Logger{}));
  CHECK_FALSE(io::make_uring_reader({.queue_depth = 100000}, Logger{}));
}

// In a child process, a seccomp filter makes io_uring_setup fail with EPERM (as Docker's
// default profile and io_uring_disabled=2 do). The automatic choice must then log why and
// read correctly with the pread pool; an explicit request for io_uring must fail.
TEST_CASE("without io_uring, auto falls back to pread and says why", "[io][options]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  const auto bytes = random_bytes(300000, 8);
  write_file(path, bytes);
  const std::string expected = io::xxh3_128(bytes).hex();

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      ::_exit(10);
    std::string logged;
    const Logger log([&](LogLevel, std::string_view m) { logged += m; }, LogLevel::kDebug);
    if (io::probe_uring().usable) ::_exit(11);
    if (io::make_reader({.engine = io::EngineKind::kUring}, log)) ::_exit(12);
    auto reader = io::make_reader({}, log);
    if (!reader || (*reader)->engine() != "pread") ::_exit(13);
    if (logged.find("io_uring unavailable") == std::string::npos ||
        logged.find("Operation not permitted") == std::string::npos)
      ::_exit(14);
    auto id = (*reader)->open_file(path);
    if (!id) ::_exit(15);
    auto digest = io::digest_file(**reader, *id);
    if (!digest || digest->xxh3_128.hex() != expected) ::_exit(16);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  // 10: seccomp refused; 11: probe missed the failure; 12: explicit io_uring did not fail;
  // 13: no pread fallback; 14: reason not logged; 15/16: fallback read wrong bytes.
  CHECK(WEXITSTATUS(status) == 0);
}
