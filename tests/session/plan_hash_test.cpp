// The plan hash (what a lockfile's plan_xxh3_64 pins) streamed entry by entry equals the hash
// of the whole plan document dumped at once, for every shape a plan takes: plain, converted,
// quantized (decode jobs), tensor-parallel (shards) and mmap.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "qload/session/plan_report.hpp"
#include "qload/session/request.hpp"
#include "support/scratch.hpp"
#include "support/small_llama.hpp"

using namespace qload;

TEST_CASE("session: the streamed plan hash equals the hash of the whole plan document", "[session][plan]") {
  testing::ScratchDir dir;
  const std::string model = testing::small_llama(dir);

  std::vector<session::LoadSpec> specs(5, session::LoadSpec{.source = model});
  specs[1].dtype = "f32";
  specs[2].quantize = "fp8:block";
  specs[3].devices = "cpu,cpu:1";
  specs[3].tensor_parallel = 2;
  specs[4].settings = {{.name = "load_mode", .value = "mmap", .where = "test"}};
  std::set<std::uint64_t> hashes;
  for (const session::LoadSpec& spec : specs) {
    auto request = session::build_request(spec, Logger{});
    if (!request) FAIL(request.error().to_string());
    auto planned = session::plan_request(std::move(*request));
    if (!planned) FAIL(planned.error().to_string());
    const std::uint64_t whole = session::plan_hash(session::plan_json(planned->catalog, planned->plan));
    CHECK(planned->plan_hash == whole);
    CHECK(session::plan_hash(planned->catalog, planned->plan) == whole);
    hashes.insert(whole);
  }
  CHECK(hashes.size() == specs.size());  // each variant is a different plan
}

TEST_CASE("session: the streamed plan hash escapes names exactly as the document does", "[session][plan]") {
  testing::ScratchDir dir;
  nlohmann::json header = nlohmann::json::object();
  const std::vector<std::string> names = {"quote\"d", "back\\slash", "tab\there", "ctl\x01", "üñï€😀", "/slash"};
  std::uint64_t offset = 0;
  for (const std::string& name : names) {
    header[name] = {{"dtype", "F16"}, {"shape", {2, 3}}, {"data_offsets", {offset, offset + 12}}};
    offset += 12;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::byte> file(8 + text.size() + offset);
  const std::uint64_t n = text.size();
  std::memcpy(file.data(), &n, 8);
  std::memcpy(file.data() + 8, text.data(), text.size());
  const std::string path = dir.file("odd names.safetensors");
  testing::write_file(path, file);

  auto request = session::build_request({.source = path}, Logger{});
  if (!request) FAIL(request.error().to_string());
  auto planned = session::plan_request(std::move(*request));
  if (!planned) FAIL(planned.error().to_string());
  CHECK(planned->plan_hash == session::plan_hash(session::plan_json(planned->catalog, planned->plan)));
}
