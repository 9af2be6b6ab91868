// Lockfiles written by someone else (issue 18): each case once crashed, hung or leaked a
// file's bytes; each must now end in one clean error naming the lock file.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "qload/session/lockfile.hpp"
#include "support/scratch.hpp"

using namespace qload;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A valid lock with `bytes` as the one file's size, written as given (JSON text).
std::string lock_text(const std::string& bytes) {
  return R"({"schema": "qload.lock/1", "qload_version": "0", "recipe": "", "plan_xxh3_64": "0123456789abcdef",
             "files": [{"path": "m.safetensors", "bytes": )" +
         bytes + R"(, "xxh3_128": "0123456789abcdef0123456789abcdef"}], "tensors": {}})";
}

}  // namespace

TEST_CASE("a lockfile that is not a regular file is refused without blocking", "[session][lock][hostile]") {
  testing::ScratchDir dir;
  auto directory = session::read_lockfile(dir.path().string());
  REQUIRE_FALSE(directory);
  CHECK(directory.error().file() == dir.path().string());

  const std::string fifo = dir.file("lock.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto from_fifo = session::read_lockfile(fifo);  // must return, not wait for a writer
  REQUIRE_FALSE(from_fifo);
  CHECK_THAT(from_fifo.error().to_string(), Catch::Contains("not a regular file"));
}

TEST_CASE("lockfile JSON goes through the strict reader: depth, duplicates, numbers", "[session][lock][hostile]") {
  testing::ScratchDir dir;
  const std::string path = dir.file("qload.lock");

  write_text(path, lock_text("12"));
  auto good = session::read_lockfile(path);
  if (!good) FAIL(good.error().to_string());
  CHECK(good->files.at(0).bytes == 12);

  struct Case {
    std::string text;
    std::string expect;
  };
  const Case cases[] = {
      {std::string(100000, '['), "not a JSON object"},
      {"{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", "nested deeper than"},
      {lock_text("1e300"), "'bytes' must be a whole number of bytes"},
      {lock_text("18446744073709551616"), "'bytes' must be a whole number of bytes"},
      {lock_text("-1"), "'bytes' must be a whole number of bytes"},
      {lock_text("12.5"), "'bytes' must be a whole number of bytes"},
      {R"({"schema": "qload.lock/1", "schema": "qload.lock/1"})", "duplicate key"},
  };
  for (const Case& c : cases) {
    INFO(c.text.substr(0, 80));
    write_text(path, c.text);
    auto lock = session::read_lockfile(path);
    REQUIRE_FALSE(lock);
    CHECK(lock.error().code() == Errc::kCorrupt);
    CHECK(lock.error().file() == path);
    CHECK_THAT(lock.error().to_string(), Catch::Contains(c.expect));
  }
}

TEST_CASE("a lockfile error never echoes the file's contents", "[session][lock][hostile]") {
  testing::ScratchDir dir;
  const std::string path = dir.file("passwd");
  const std::string secret = "root:x:0:0:secret-token-1234:/root:/bin/bash";
  // The last: some other JSON file whose "schema" is not a lock's (issue 45 finding 12).
  for (const std::string& text : {secret, "{" + secret + "}", "{\"a\": " + secret + "}", "{\"a\": \"" + secret,
                                  "{\"schema\": \"" + secret + "\"}"}) {
    INFO(text);
    write_text(path, text + "\n");
    auto lock = session::read_lockfile(path);
    REQUIRE_FALSE(lock);
    CHECK_THAT(lock.error().to_string(), !Catch::Contains("secret-token"));
    CHECK_THAT(lock.error().to_string(), !Catch::Contains("root:x"));
  }
}
