// InputFile::open and check_unchanged: one non-blocking open, tied to the inode the catalog
// checked; the O_DIRECT descriptor reopens that inode, never the path; the end-of-load check
// asks the descriptor it holds. A FIFO or a symlink swapped in at the path gets nowhere.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "io/io_test_support.hpp"
#include "qload/io/input_file.hpp"
#include "support/fifo.hpp"

using namespace qload;
using namespace qload::testing;
namespace fs = std::filesystem;

namespace {

io::FileIdentity identity_of(const std::string& path) {
  auto opened = io::open_regular(path);
  REQUIRE(opened);
  return opened->identity;
}

}  // namespace

TEST_CASE("input file: a FIFO at the path is refused without blocking", "[io][input_file][security]") {
  ScratchDir dir;
  const std::string path = dir.file("m.bin");
  plant_fifo(path);
  for (const io::DirectMode mode : {io::DirectMode::kOff, io::DirectMode::kAuto}) {
    std::optional<Result<io::InputFile>> opened;
    REQUIRE(returns_within([&] { opened.emplace(io::InputFile::open(path, mode)); }, path));
    REQUIRE(!*opened);
    CHECK(opened->error().code() == Errc::kInvalidArgument);
    CHECK(opened->error().file() == path);
  }
  auto regular = io::open_regular(path);
  REQUIRE(!regular);
  CHECK(regular.error().code() == Errc::kInvalidArgument);
}

TEST_CASE("input file: the descriptor is left blocking for the engines", "[io][input_file]") {
  ScratchDir dir;
  write_file(dir.file("m.bin"), random_bytes(100, 1));
  auto opened = io::open_regular(dir.file("m.bin"));
  REQUIRE(opened);
  CHECK((::fcntl(opened->fd.get(), F_GETFL) & O_NONBLOCK) == 0);
  auto file = io::InputFile::open(dir.file("m.bin"), io::DirectMode::kOff);
  REQUIRE(file);
  CHECK((::fcntl(file->fd(), F_GETFL) & O_NONBLOCK) == 0);
}

TEST_CASE("input file: a same-size symlink renamed over the checked file is another inode, refused",
          "[io][input_file][security]") {
  ScratchDir model, outside;
  const std::string path = model.file("m.bin");
  write_file(path, random_bytes(4096, 1));
  const io::FileIdentity checked = identity_of(path);
  write_file(outside.file("secret"), random_bytes(4096, 2));
  fs::create_symlink(outside.file("secret"), model.file("swap"));
  fs::rename(model.file("swap"), path);
  for (const io::DirectMode mode : {io::DirectMode::kOff, direct_mode_for_tests()}) {
    auto file = io::InputFile::open(path, mode, checked);
    REQUIRE(!file);
    CHECK(file.error().code() == Errc::kFileChanged);
    CHECK(file.error().file() == path);
  }
  // Without an expected identity (a catalog made by hand) the open itself has nothing to tie to.
  CHECK(io::InputFile::open(path, io::DirectMode::kOff));
}

TEST_CASE("input file: a size other than the checked one is a changed file", "[io][input_file]") {
  ScratchDir dir;
  const std::string path = dir.file("m.bin");
  write_file(path, random_bytes(4096, 1));
  io::FileIdentity checked = identity_of(path);
  checked.size += 1;
  auto file = io::InputFile::open(path, io::DirectMode::kOff, checked);
  REQUIRE(!file);
  CHECK(file.error().code() == Errc::kFileChanged);
  CHECK_THAT(file.error().message(), Catch::Contains("4096 bytes now, 4097"));
}

TEST_CASE("input file: the O_DIRECT descriptor is the very inode of the buffered one", "[io][input_file]") {
  if (direct_mode_for_tests() != io::DirectMode::kOn) {
    WARN("SKIPPED: the temp directory's file system refuses O_DIRECT");
    return;
  }
  ScratchDir dir;
  const std::string path = dir.file("m.bin");
  write_file(path, random_bytes(8192, 1));
  auto file = io::InputFile::open(path, io::DirectMode::kOn, identity_of(path));
  REQUIRE(file);
  REQUIRE(file->direct_fd() >= 0);
  struct stat st {};
  REQUIRE(::fstat(file->direct_fd(), &st) == 0);
  CHECK(st.st_ino == file->identity().ino);
  CHECK(st.st_dev == file->identity().dev);
  CHECK((::fcntl(file->direct_fd(), F_GETFL) & O_DIRECT) != 0);
}

TEST_CASE("input file: check_unchanged asks the descriptor held, never the path", "[io][input_file][security]") {
  ScratchDir dir;
  const std::string path = dir.file("m.bin");
  write_file(path, random_bytes(4096, 1));
  auto file = io::InputFile::open(path, io::DirectMode::kOff);
  REQUIRE(file);
  SECTION("a FIFO renamed over the path afterwards neither blocks the check nor matters") {
    plant_fifo(dir.file("fifo"));
    fs::rename(dir.file("fifo"), path);
    std::optional<Status> checked;
    REQUIRE(returns_within([&] { checked.emplace(file->check_unchanged()); }, path));
    CHECK(*checked);
  }
  SECTION("the file it holds grown in place is a changed file") {
    const UniqueFd writer(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    REQUIRE(writer);
    REQUIRE(::write(writer.get(), "x", 1) == 1);
    const Status checked = file->check_unchanged();
    REQUIRE(!checked);
    CHECK(checked.error().code() == Errc::kFileChanged);
    CHECK(checked.error().file() == path);
  }
}

TEST_CASE("input file: descriptor_path is where the kernel says the descriptor points", "[io][input_file]") {
  ScratchDir dir;
  write_file(dir.file("real.bin"), random_bytes(10, 1));
  fs::create_symlink(dir.file("real.bin"), dir.file("link.bin"));
  auto opened = io::open_regular(dir.file("link.bin"));
  REQUIRE(opened);
  auto real = io::descriptor_path(opened->fd.get(), dir.file("link.bin"));
  REQUIRE(real);
  CHECK(*real == fs::canonical(dir.file("real.bin")).string());
}
