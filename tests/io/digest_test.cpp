// XXH3 digests against the independent reference, xxhsum (Debian package xxhash).
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "io_test_support.hpp"
#include "qload/io/digest.hpp"
#include "qload/io/fault_injector.hpp"

using namespace qload;
using namespace qload::testing;

namespace {

// Runs `xxhsum -H<algo> path` and returns the hex digest it prints. -H2 prints
// "<hex>  <path>", -H3 prints "XXH3 (<path>) = <hex>".
std::string xxhsum(int algo, const std::string& path) {
  const std::string cmd = std::string(QLOAD_XXHSUM) + " -H" + std::to_string(algo) + " '" + path + "' 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
  REQUIRE(::pclose(pipe) == 0);
  REQUIRE(got);
  std::string text(line);
  if (const auto eq = text.find(" = "); eq != std::string::npos) return text.substr(eq + 3, 16);
  return text.substr(0, text.find(' '));
}

}  // namespace

TEST_CASE("streaming XXH3 over any split equals the one-shot digest", "[io][digest]") {
  const auto bytes = random_bytes(100000, 17);
  const std::span<const std::byte> all(bytes);
  const std::uint64_t want64 = io::xxh3_64(all);
  const io::Xxh128 want128 = io::xxh3_128(all);
  for (std::size_t step : {1u, 7u, 64u, 239u, 240u, 241u, 1024u, 4096u, 65536u, 100000u}) {
    io::Xxh3Stream stream;
    for (std::size_t off = 0; off < bytes.size(); off += step)
      stream.update(all.subspan(off, std::min(step, bytes.size() - off)));
    INFO("step " << step);
    CHECK(stream.bytes_seen() == bytes.size());
    CHECK(stream.digest64() == want64);
    CHECK(stream.digest128() == want128);
  }
}

TEST_CASE("known answers: XXH3 of the empty input", "[io][digest]") {
  // Published test vectors of the XXH3 specification (and xxhsum of an empty file).
  CHECK(io::hex64(io::xxh3_64({})) == "2d06800538d394c2");
  CHECK(io::xxh3_128({}).hex() == "99aa06d3014798d86001c324468d497f");
}

TEST_CASE("whole-file digests through every engine equal xxhsum -H2 and -H3", "[io][digest]") {
  ScratchDir dir;
  // Sizes around XXH3's internal boundaries (16, 128, 240 bytes, 1 KiB stripes, 64 KiB
  // blocks of the streaming state) and a multi-chunk file with an unaligned tail.
  const std::vector<std::size_t> sizes{0, 1, 16, 17, 128, 129, 240, 241, 1024, 4096 * 3 + 17, (5u << 20) + 4097};
  std::vector<std::string> paths;
  for (std::size_t size : sizes) {
    paths.push_back(dir.file("f" + std::to_string(size) + ".bin"));
    write_file(paths.back(), random_bytes(size, size + 1));
  }
  std::vector<std::pair<std::string, std::string>> reference;  // (xxh128, xxh3-64) per file
  for (const auto& p : paths) reference.emplace_back(xxhsum(2, p), xxhsum(3, p));

  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c, 8);
      for (std::size_t i = 0; i < paths.size(); ++i) {
        const io::FileId id = reader->open_file(paths[i]).value();
        // Small chunks and several in flight: completions arrive out of order and must be
        // hashed in file order.
        for (io::DigestOptions opts :
             {io::DigestOptions{4096, 8}, io::DigestOptions{1 << 20, 3}, io::DigestOptions{}}) {
          INFO(paths[i] << " chunk " << opts.chunk_bytes << " x" << opts.chunks_in_flight);
          const io::FileDigest d = io::digest_file(*reader, id, opts).value();
          CHECK(d.bytes == sizes[i]);
          CHECK(d.xxh3_128.hex() == reference[i].first);
          CHECK(io::hex64(d.xxh3_64) == reference[i].second);
        }
      }
    }
  }
}

TEST_CASE("one-shot digests on either side of the vector kernel's threshold equal xxhsum", "[io][digest]") {
  // From 4 KiB, xxh3_64 and xxh3_128 run through the stream with the widest kernel this CPU has
  // (AVX2 on x86-64 where present); below, xxhash's one-shot functions. xxhsum is the
  // reference for both sides, at odd lengths and misaligned starts.
  ScratchDir dir;
  for (const std::size_t size : {4095u, 4096u, 4097u, 65536u + 63u, (1u << 20) + 12345u}) {
    for (const std::size_t skew : {0u, 1u, 13u}) {
      const std::vector<std::byte> bytes = random_bytes(size + skew, size * 3 + skew);
      const std::span<const std::byte> input = std::span<const std::byte>(bytes).subspan(skew);
      const std::string path = dir.file("s" + std::to_string(size) + "_" + std::to_string(skew) + ".bin");
      write_file(path, std::vector<std::byte>(input.begin(), input.end()));
      INFO("size " << size << " skew " << skew);
      CHECK(io::hex64(io::xxh3_64(input)) == xxhsum(3, path));
      CHECK(io::xxh3_128(input).hex() == xxhsum(2, path));
    }
  }
}

TEST_CASE("a read error during a file digest is returned, not a wrong digest", "[io][digest]") {
  ScratchDir dir;
  const std::string path = dir.file("data.bin");
  write_file(path, random_bytes(1 << 20, 4));
  io::FaultInjector faults;
  faults.add({.kind = io::FaultKind::kEio, .offset = 700000, .times = io::FaultRule::kAlways});
  for (const EngineCase& c : engine_cases()) {
    SECTION(c.label()) {
      auto reader = make_test_reader(c, 4, &faults);
      const io::FileId id = reader->open_file(path).value();
      auto d = io::digest_file(*reader, id, {64 << 10, 4});
      REQUIRE_FALSE(d);
      CHECK(d.error().code() == Errc::kIo);
      CHECK(d.error().file() == path);
      CHECK(reader->pending() == 0);  // everything in flight was drained before returning
    }
  }
}
