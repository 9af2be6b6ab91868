// Recipes: data out of a sandboxed chunk, typed keys, errors naming file and line.
#include <catch2/catch.hpp>

#include "qload/scripts/recipe.hpp"
#include "support/scratch.hpp"

using namespace qload;

TEST_CASE("a recipe yields its source, devices and io options", "[scripts][recipe]") {
  const std::string text = R"(
    local chunk = 4 * 2
    return qload.recipe {
      source = "models/tiny",
      devices = { "cpu" },
      io = { engine = "pread", queue_depth = 16, direct = "off", chunk = chunk .. "MiB", staging = "1GiB" },
    })";
  auto r = scripts::parse_recipe(text, "/work/recipes/tiny.lua");
  REQUIRE(r);
  CHECK(r->path == "/work/recipes/tiny.lua");
  CHECK(r->source == "/work/recipes/models/tiny");  // relative to the recipe file
  CHECK(r->devices == std::vector<std::string>{"cpu"});
  CHECK(r->io.engine == "pread");
  CHECK(r->io.queue_depth == 16u);
  CHECK(r->io.direct == "off");
  CHECK(r->io.chunk_bytes == (8u << 20));
  CHECK(r->io.staging_bytes == (1u << 30));
}

TEST_CASE("recipe defaults: devices cpu, io unset, absolute sources kept", "[scripts][recipe]") {
  auto r = scripts::parse_recipe("return qload.recipe { source = '/data/m.safetensors', devices = 'cpu' }", "r.lua");
  REQUIRE(r);
  CHECK(r->source == "/data/m.safetensors");
  CHECK(r->devices == std::vector<std::string>{"cpu"});
  CHECK_FALSE(r->io.queue_depth.has_value());
  CHECK_FALSE(r->io.chunk_bytes.has_value());
}

TEST_CASE("recipe mistakes are errors naming the file and line", "[scripts][recipe]") {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"return qload.recipe {\n  sorce = 'x' }",
       "r.lua:2: unknown key 'sorce' in qload.recipe (did you mean 'source'?)"},
      {"return qload.recipe {\n io = { depth = 3 }, source = 'x' }", "unknown key 'depth' in io"},
      {"\n\nreturn qload.recipe { devices = 'cpu' }", "r.lua:3: qload.recipe needs 'source'"},
      {"return qload.recipe { source = 'x', io = { queue_depth = 'deep' } }", "'queue_depth' must be a number"},
      {"return qload.recipe { source = 'x', io = 5 }", "'io' must be a table"},
      {"return qload.recipe 'x'", "qload.recipe expects a table"},
      {"return { source = 'x' }", "a recipe must end with: return qload.recipe"},
      {"return qload.recipe { source = 'x', io = { chunk = 'lots' } }", "'lots' is not a byte size"},
      {"return qload.recipe { source = 'x', io = { queue_depth = 0 } }", "io.queue_depth must be a whole number"},
      {"return qload.recipe { source = 'x', devices = { 'cpu', 3 } }", "devices[2] must be a string"},
      {"local x = os.getenv('HOME')", "r.lua:1: attempt to index global 'os'"},
      {"return qload.recipe { source = io.open('/etc/passwd') }", "attempt to index global 'io'"},
      {"return qload.recipe {", "r.lua:1:"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto r = scripts::parse_recipe(c.text, "r.lua");
    REQUIRE_FALSE(r);
    CHECK(r.error().file() == "r.lua");
    CHECK_THAT(r.error().to_string(), Catch::Contains(c.expect));
  }
}

TEST_CASE("load_recipe reads a file and reports a missing one", "[scripts][recipe]") {
  testing::ScratchDir dir;
  const std::string path = dir.file("r.lua");
  const std::string text = "return qload.recipe { source = 'model' }";
  std::vector<std::byte> bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  testing::write_file(path, bytes);
  auto r = scripts::load_recipe(path);
  REQUIRE(r);
  CHECK(r->source == dir.file("model"));
  auto missing = scripts::load_recipe(dir.file("nope.lua"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == Errc::kNotFound);
  CHECK(missing.error().file() == dir.file("nope.lua"));
}
