// Recipes written by someone else (issue 18): each case once crashed, hung, leaked a file's
// bytes or wrote where it should not; each must now end in one clean error. Lockfiles:
// tests/session/lockfile_hostile_test.cpp.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <fmt/format.h>

#include "qload/scripts/recipe.hpp"
#include "support/scratch.hpp"

using namespace qload;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
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
