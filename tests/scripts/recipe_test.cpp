// Recipes: data out of a sandboxed chunk, typed keys, errors naming file and line.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "qload/scripts/recipe.hpp"
#include "support/scratch.hpp"

using namespace qload;

TEST_CASE("a recipe yields its source, devices and settings (io and settings tables)", "[scripts][recipe]") {
  const std::string text = R"(
    local chunk = 4 * 2
    return qload.recipe {
      source = "models/tiny/",
      devices = { "cpu" },
      io = { engine = "pread", queue_depth = 16, direct = "off", chunk = chunk .. "MiB", staging = "1GiB" },
      settings = { digests = false, rendezvous_timeout = "45s", cpu_workers = 2 },
    })";
  auto r = scripts::parse_recipe(text, "/work/recipes/tiny.lua");
  REQUIRE(r);
  CHECK(r->path == "/work/recipes/tiny.lua");
  CHECK(r->source == "/work/recipes/models/tiny/");  // relative to the recipe file
  CHECK(r->devices == std::vector<std::string>{"cpu"});
  ResolvedSettings s;
  REQUIRE(r->apply_settings(s));
  const Settings& v = s.values();
  CHECK(v.io_engine == "pread");
  CHECK(v.io_depth == 16u);
  CHECK(v.direct_io == "off");
  CHECK(v.slot_bytes == (8u << 20));
  CHECK(v.staging_bytes == (1u << 30));
  CHECK(v.digests == "off");  // a Lua boolean, as on/off
  CHECK(v.rendezvous_timeout == std::chrono::seconds(45));
  CHECK(v.cpu_workers == 2u);
  const SettingOrigin& staging = s.origin(*find_setting("staging_bytes"));
  CHECK(staging.source == SettingSource::kRecipe);
  CHECK(staging.where == "io.staging");
  CHECK(s.origin(*find_setting("digests")).where == "settings.digests");
  for (const auto& [lua, value] : {std::pair{"true", "on"}, std::pair{"'auto'", "auto"}}) {
    auto other = scripts::parse_recipe(
        std::string("return qload.recipe { source = 'x', settings = { digests = ") + lua + " } }", "/work/r.lua");
    REQUIRE(other);
    ResolvedSettings o;
    REQUIRE(other->apply_settings(o));
    CHECK(o.values().digests == value);
  }

  // The environment outranks the recipe.
  std::vector<std::string> warnings;
  REQUIRE(s.apply_environment({{"QLOAD_STAGING_BYTES", "512MB"}}, warnings));
  CHECK(s.values().staging_bytes == 512'000'000u);
}

TEST_CASE("a recipe's source: a path beside the recipe, else a Hugging Face model id in the cache",
          "[scripts][recipe][hub]") {
  testing::ScratchDir dir;
  const std::filesystem::path cache = dir.path() / "hub";
  const std::string commit(40, 'c');
  const std::filesystem::path snapshot = cache / "models--org--tiny" / "snapshots" / commit;
  std::filesystem::create_directories(snapshot);
  std::filesystem::create_directories(cache / "models--org--tiny" / "refs");
  { std::ofstream((cache / "models--org--tiny" / "refs" / "main").string()) << commit; }
  const char* old = std::getenv("HF_HUB_CACHE");
  const std::optional<std::string> saved = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("HF_HUB_CACHE", cache.c_str(), 1);
  const std::string recipe = dir.file("r.lua");
  const auto source_of = [&](const std::string& source) {
    const auto r = scripts::parse_recipe("return qload.recipe { source = '" + source + "' }", recipe);
    return r ? r->source : r.error().to_string();
  };
  CHECK(source_of("org/tiny") == snapshot.string());
  CHECK(source_of("org/tiny@" + commit) == snapshot.string());
  // Not in the cache: the id itself, for the load to say what is missing.
  CHECK(source_of("org/absent") == "org/absent");
  // A folder of that name beside the recipe wins.
  std::filesystem::create_directories(dir.path() / "org" / "tiny");
  CHECK(source_of("org/tiny") == dir.file("org/tiny"));
  if (saved)
    ::setenv("HF_HUB_CACHE", saved->c_str(), 1);
  else
    ::unsetenv("HF_HUB_CACHE");
}

TEST_CASE("recipe defaults: devices cpu, no settings, absolute sources kept", "[scripts][recipe]") {
  auto r = scripts::parse_recipe("return qload.recipe { source = '/data/m.safetensors', devices = 'cpu' }", "r.lua");
  REQUIRE(r);
  CHECK(r->source == "/data/m.safetensors");
  CHECK(r->devices == std::vector<std::string>{"cpu"});
  CHECK(r->settings.empty());
}

TEST_CASE("a recipe applied to a checkpoint: its own source optional, and never used", "[scripts][recipe]") {
  auto templ = scripts::parse_recipe("return qload.recipe { dtype = 'f32' }", "/r/t.lua", {}, "/data/a");
  REQUIRE(templ);
  CHECK(templ->source == "/data/a");
  CHECK(templ->dtype == DType::kF32);
  // A source of its own (even a glob matching nothing) gives way to the caller's checkpoint.
  auto pinned =
      scripts::parse_recipe("return qload.recipe { source = 'nothing-*', devices = 'cpu' }", "/r/p.lua", {}, "/data/b");
  REQUIRE(pinned);
  CHECK(pinned->source == "/data/b");
  // Alone, a recipe still needs its source; and other mistakes stay mistakes when applied.
  CHECK_FALSE(scripts::parse_recipe("return qload.recipe { dtype = 'f32' }", "/r/t.lua"));
  auto wrong = scripts::parse_recipe("return qload.recipe { source = 3 }", "/r/t.lua", {}, "/data/a");
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error().to_string(), Catch::Contains("needs 'source', a path string"));
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
      {"return qload.recipe { source = 'x', io = { queue_depth = 0 } }",
       "r.lua:1: io.queue_depth=0: 0 is outside 1..4096"},
      {"return qload.recipe { source = 'x',\n settings = { staging_byte = '1G' } }",
       "r.lua:2: settings.staging_byte is not a setting (did you mean staging_bytes?)"},
      {"return qload.recipe { source = 'x', settings = { digests = {} } }", "settings.digests must be a string"},
      {"return qload.recipe { source = 'x', settings = { rendezvous_timeout = 'soon' } }",
       "settings.rendezvous_timeout=soon: 'soon' is not a duration"},
      {"return qload.recipe { source = 'x', io = { staging = '1G' }, settings = { staging_bytes = '2G' } }",
       "io.staging and settings.staging_bytes both set staging_bytes"},
      {"return qload.recipe { source = 'x', settings = 5 }", "'settings' must be a table"},
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
