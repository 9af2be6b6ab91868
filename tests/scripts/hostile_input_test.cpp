// Recipes and lockfiles written by someone else (issue 18): each case once crashed, hung,
// leaked a file's bytes or wrote where it should not; each must now end in one clean error.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "qload/scripts/lockfile.hpp"
#include "qload/scripts/recipe.hpp"
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

TEST_CASE("recipe rules that name no tensors, or cut a name at a NUL, are refused", "[scripts][recipe][hostile]") {
  struct Case {
    std::string text;
    std::string expect;
  };
  const Case cases[] = {
      {"return qload.recipe { source = 'm', quant = { { match = '', keep = true } } }",
       "quant[1].match must be a non-empty string without NUL bytes"},
      {"return qload.recipe { source = 'm', quant = { { match = 'a\\0b', keep = true } } }",
       "quant[1].match must be a non-empty string without NUL bytes"},
      {"return qload.recipe { source = 'm', quant = { { match = '\\0', keep = true } } }",
       "quant[1].match must be a non-empty string"},
      {"return qload.recipe { source = 'm', quant = { { pattern = '', keep = true } } }",
       "quant[1].pattern must be a non-empty string"},
      {"return qload.recipe { source = 'm', parallel = { tensor = 1, rules = { { match = '', split = 'rows' } } } }",
       "parallel.rules[1].match must be a non-empty string"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto r = scripts::parse_recipe(c.text, "r.lua");
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK_THAT(r.error().to_string(), Catch::Contains(c.expect));
  }
}

TEST_CASE("a hook that calls qload.recipe at plan time gets an error, not a crash", "[scripts][recipe][hostile]") {
  // Found by fuzz/recipe (a null context dereference); the reproducer is in fuzz/corpus/recipe.
  auto r = scripts::parse_recipe(
      "return qload.recipe { source = 'm', quant = function(name) return qload.recipe 'x' end }", "r.lua");
  if (!r) FAIL(r.error().to_string());
  auto policy = r->weight_policy("model.layers.0.mlp.up_proj.weight");
  REQUIRE_FALSE(policy);
  CHECK_THAT(policy.error().to_string(), Catch::Contains("qload.recipe may be called only while the recipe file runs"));
}

TEST_CASE("a recipe's trace stays inside the recipe's folder", "[scripts][recipe][hostile]") {
  for (const char* trace : {"/etc/cron.d/x", "../x.json", "out/../../x.json", ""}) {
    INFO(trace);
    auto r = scripts::parse_recipe(fmt::format("return qload.recipe {{ source = 'm', trace = '{}' }}", trace),
                                   "/work/r/r.lua");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().to_string(), Catch::Contains("must be a relative path inside the recipe's folder"));
  }
  auto inside = scripts::parse_recipe("return qload.recipe { source = 'm', trace = 'out/t.json' }", "/work/r/r.lua");
  REQUIRE(inside);
  CHECK(inside->trace == "/work/r/out/t.json");
}

TEST_CASE("a lockfile that is not a regular file is refused without blocking", "[scripts][lock][hostile]") {
  testing::ScratchDir dir;
  auto directory = scripts::read_lockfile(dir.path().string());
  REQUIRE_FALSE(directory);
  CHECK(directory.error().file() == dir.path().string());

  const std::string fifo = dir.file("lock.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto from_fifo = scripts::read_lockfile(fifo);  // must return, not wait for a writer
  REQUIRE_FALSE(from_fifo);
  CHECK_THAT(from_fifo.error().to_string(), Catch::Contains("not a regular file"));
}

TEST_CASE("lockfile JSON goes through the strict reader: depth, duplicates, numbers", "[scripts][lock][hostile]") {
  testing::ScratchDir dir;
  const std::string path = dir.file("qload.lock");

  write_text(path, lock_text("12"));
  auto good = scripts::read_lockfile(path);
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
    auto lock = scripts::read_lockfile(path);
    REQUIRE_FALSE(lock);
    CHECK(lock.error().code() == Errc::kCorrupt);
    CHECK(lock.error().file() == path);
    CHECK_THAT(lock.error().to_string(), Catch::Contains(c.expect));
  }
}

TEST_CASE("a lockfile error never echoes the file's contents", "[scripts][lock][hostile]") {
  testing::ScratchDir dir;
  const std::string path = dir.file("passwd");
  const std::string secret = "root:x:0:0:secret-token-1234:/root:/bin/bash";
  // The last: some other JSON file whose "schema" is not a lock's (issue 45 finding 12).
  for (const std::string& text : {secret, "{" + secret + "}", "{\"a\": " + secret + "}", "{\"a\": \"" + secret,
                                  "{\"schema\": \"" + secret + "\"}"}) {
    INFO(text);
    write_text(path, text + "\n");
    auto lock = scripts::read_lockfile(path);
    REQUIRE_FALSE(lock);
    CHECK_THAT(lock.error().to_string(), !Catch::Contains("secret-token"));
    CHECK_THAT(lock.error().to_string(), !Catch::Contains("root:x"));
  }
}

// Issue 45 finding 12: a file given as a recipe (or required as a module) that is not Lua, a
// credentials file say, fails to parse; LuaJIT's message ends in "near '<token>'", the file's
// own bytes. The error names the file and line and what was expected, never the text.
TEST_CASE("a recipe that is not Lua fails without echoing its contents", "[scripts][recipe][hostile]") {
  testing::ScratchDir dir;
  const std::string recipe = dir.file("creds.txt");
  for (const std::string& text : {std::string("password = hunter2 hunter3\n"), std::string("user: hunter2\n"),
                                  std::string("x = \"hunter2\n"), std::string("\n\ntoken hunter2\n")}) {
    INFO(text);
    write_text(recipe, text);
    auto r = scripts::load_recipe(recipe);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == Errc::kInvalidArgument);
    CHECK(r.error().file() == recipe);
    CHECK_THAT(r.error().to_string(), !Catch::Contains("hunter"));
    CHECK_THAT(r.error().to_string(), Catch::Contains("creds.txt:"));
  }
  // The line and the expectation stay.
  write_text(recipe, "\n\ntoken hunter2\n");
  CHECK_THAT(scripts::load_recipe(recipe).error().to_string(), Catch::Contains("creds.txt:3: '=' expected"));
  // The same through require: a module that is not Lua.
  write_text(dir.file("secrets.lua"), "api_key: hunter2\n");
  write_text(recipe, "local s = require('secrets')\nreturn qload.recipe { source = 'm' }\n");
  auto r = scripts::load_recipe(recipe);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().to_string(), Catch::Contains("secrets.lua:2: function arguments expected"));
  CHECK_THAT(r.error().to_string(), !Catch::Contains("hunter"));
}
