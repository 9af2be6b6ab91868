// The session layer, as a client other than the CLI uses it: a spec becomes a request (recipe,
// settings at their precedence), a plan and a model whose bytes are the checkpoint's.
#include <catch2/catch.hpp>

#include <fstream>
#include <future>

#include "qload/formats/catalog.hpp"
#include "qload/io/digest.hpp"
#include "qload/scheduler/load.hpp"
#include "qload/session/load.hpp"
#include "qload/session/spec_fields.hpp"
#include "support/free_port.hpp"
#include "support/scratch.hpp"
#include "support/small_llama.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// The bytes of a stored tensor, read with plain iostreams (not qload's I/O layer).
std::vector<std::byte> stored_bytes(const formats::Catalog& catalog, const formats::TensorEntry& t) {
  std::ifstream in(catalog.files[t.file].path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t.offset));
  std::vector<std::byte> out(t.nbytes);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(out.size()));
  return out;
}

}  // namespace

TEST_CASE("session: a load through the session layer holds the checkpoint's bytes", "[session]") {
  ScratchDir dir;
  const std::string model_dir = small_llama(dir);
  auto loaded = session::load({.source = model_dir}, Logger{});
  if (!loaded) FAIL(loaded.error().to_string());
  auto catalog = scheduler::open_source(model_dir);
  REQUIRE(catalog);
  REQUIRE(loaded->model.tensors().size() == catalog->tensors.size());
  for (const formats::TensorEntry& t : catalog->tensors) {
    INFO(t.name);
    const scheduler::DeviceTensor* got = loaded->model.find(t.name);
    REQUIRE(got != nullptr);
    const std::vector<std::byte> want = stored_bytes(*catalog, t);
    REQUIRE(got->bytes().size() == want.size());
    CHECK(std::equal(want.begin(), want.end(), got->bytes().begin()));
  }
  CHECK_FALSE(loaded->world.has_value());
  CHECK(loaded->request.devices == "cpu");
}

TEST_CASE("session: settings from the recipe, the environment and the spec, in that order", "[session]") {
  ScratchDir dir;
  small_llama(dir);
  write_text(dir.file("r.lua"),
             "return qload.recipe { source = 'm', io = { chunk = '1MiB', staging = '2MiB' },\n"
             "  settings = { cpu_workers = 1, reads_in_flight = 3 } }\n");
  auto request = session::build_request(
      {.source = dir.file("r.lua"), .settings = {{"staging_bytes", "8MiB", "api"}, {"reads_in_flight", "5", "api"}}},
      Logger{});
  if (!request) FAIL(request.error().to_string());
  CHECK(request->source == dir.file("m"));
  const scheduler::LoadOptions& o = request->options;
  CHECK(o.staging.total_bytes == 8u << 20);  // the spec over the recipe
  CHECK(o.staging.slot_bytes == 1u << 20);   // the recipe over the default
  CHECK(o.plan.chunk_bytes == 1u << 20);
  CHECK(o.cpu_workers == 1);
  CHECK(o.reads_in_flight == 5);
  CHECK(request->settings.origin(*find_setting("staging_bytes")).where == "api");
  CHECK(request->settings.origin(*find_setting("slot_bytes")).where == "io.chunk");

  auto bad =
      session::build_request({.source = dir.file("m"), .settings = {{"staging_bytes", "lots", "api"}}}, Logger{});
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message(), Catch::StartsWith("api=lots: "));
}

TEST_CASE("session: what a recipe loads cannot be contradicted, and a bad request loads nothing", "[session]") {
  ScratchDir dir;
  small_llama(dir);
  write_text(dir.file("r.lua"), "return qload.recipe { source = 'm', devices = 'cpu', verify = 'a.lock' }\n");
  auto devices = session::build_request({.source = dir.file("r.lua"), .devices = "cpu:1"}, Logger{});
  REQUIRE_FALSE(devices);
  CHECK_THAT(devices.error().message(), Catch::StartsWith("devices cpu:1 contradicts the recipe's cpu"));
  auto lock = session::build_request({.source = dir.file("r.lua"), .lock = dir.file("b.lock")}, Logger{});
  REQUIRE_FALSE(lock);
  CHECK_THAT(lock.error().message(), Catch::Contains("contradicts the recipe's verify"));
  // Errors name the fields as the client does: the C ABI's struct fields, the CLI's flags.
  const session::SpecNames c_names = session::spec_names(session::SpecClient::kC);
  auto named = session::build_request({.source = dir.file("r.lua"), .devices = "cpu:1", .names = c_names}, Logger{});
  REQUIRE_FALSE(named);
  CHECK_THAT(named.error().message(), Catch::StartsWith("qload_options.devices cpu:1 contradicts"));
  auto dtype = session::build_request({.source = dir.file("m"), .dtype = "f8", .names = c_names}, Logger{});
  REQUIRE_FALSE(dtype);
  CHECK_THAT(dtype.error().message(), Catch::Contains("qload_options.dtype"));
  // The recipe's lock does not exist: the load fails before reading, naming the lock.
  auto missing = session::load({.source = dir.file("r.lua")}, Logger{});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().file() == dir.file("a.lock"));
}

TEST_CASE("session: a recipe applied to a checkpoint loads that checkpoint its way", "[session]") {
  ScratchDir dir;
  small_llama(dir);
  write_text(dir.file("f32.lua"), "return qload.recipe { dtype = 'f32' }\n");
  auto req = session::build_request({.source = dir.file("m"), .recipe = dir.file("f32.lua")}, Logger{});
  REQUIRE(req);
  CHECK(req->source == dir.file("m"));
  REQUIRE(req->recipe);
  CHECK(req->recipe->path == dir.file("f32.lua"));
  auto loaded = session::load({.source = dir.file("m"), .recipe = dir.file("f32.lua")}, Logger{});
  REQUIRE(loaded);
  for (const scheduler::DeviceTensor& t : loaded->model.tensors()) CHECK(t.dtype == DType::kF32);
  // Contradicting it names the recipe; a recipe is not applied to a recipe.
  auto contradicted =
      session::build_request({.source = dir.file("m"), .recipe = dir.file("f32.lua"), .dtype = "bf16"}, Logger{});
  REQUIRE_FALSE(contradicted);
  CHECK(contradicted.error().file() == dir.file("f32.lua"));
  auto nested = session::build_request({.source = dir.file("f32.lua"), .recipe = dir.file("f32.lua")}, Logger{});
  REQUIRE_FALSE(nested);
  CHECK_THAT(nested.error().message(), Catch::Contains("source is itself a recipe"));
}

TEST_CASE("session: a server hands its own world to the load instead of the environment", "[session][dist]") {
  // Two ranks as threads, each told its place in the LoadSpec (what a server that already
  // has a process group does): tensor parallel over them, with the world's token.
  ScratchDir dir;
  const std::string model_dir = small_llama(dir);
  const std::uint16_t port = free_port();
  const auto spec_for = [&](std::uint32_t rank) {
    session::LoadSpec spec{.source = model_dir, .tensor_parallel = 2};
    spec.world = distributed::World{.rank = rank,
                                    .size = 2,
                                    .local_rank = rank,
                                    .local_size = 2,
                                    .master_addr = "127.0.0.1",
                                    .master_port = port,
                                    .token = "a server's own secret, 32 bytes!",
                                    .runtime_dir = ""};
    return spec;
  };
  auto rank1 = std::async(std::launch::async, [&] { return session::load(spec_for(1), Logger{}); });
  auto rank0 = session::load(spec_for(0), Logger{});
  auto one = rank1.get();
  if (!rank0) FAIL(rank0.error().to_string());
  if (!one) FAIL(one.error().to_string());
  for (const auto* outcome : {&*rank0, &*one}) {
    REQUIRE(outcome->world.has_value());  // the world's totals: both ranks took part
    CHECK(outcome->request.world->size == 2);
    CHECK(outcome->model.tensors().size() > 0);
  }
  // Together the two ranks placed every tensor's bytes once per shard: their placed bytes agree.
  CHECK(rank0->world->tensor_bytes == one->world->tensor_bytes);

  // A world that makes no sense is refused by name before anything meets.
  session::LoadSpec bad = spec_for(0);
  bad.world->rank = 2;
  auto refused = session::load(bad, Logger{});
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error().message(), Catch::Contains("world: rank 2 of 2"));
}
