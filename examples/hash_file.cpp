// Embedding the I/O layer: open a file through the engine qload would pick, read it in
// chunks and print its XXH3-128 (compare with `xxhsum -H2 FILE`).
#include <cstdio>

#include "qload/io/digest.hpp"
#include "qload/io/reader.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 64;
  }
  const qload::Logger log = qload::Logger::to_stderr();
  auto reader = qload::io::make_reader({}, log);
  if (!reader) {
    std::fprintf(stderr, "%s\n", reader.error().to_string().c_str());
    return 1;
  }
  auto id = (*reader)->open_file(argv[1]);
  if (!id) {
    std::fprintf(stderr, "%s\n", id.error().to_string().c_str());
    return 1;
  }
  auto digest = qload::io::digest_file(**reader, *id);
  if (!digest) {
    std::fprintf(stderr, "%s\n", digest.error().to_string().c_str());
    return 1;
  }
  std::printf("%s  %s  (%s engine)\n", digest->xxh3_128.hex().c_str(), argv[1],
              std::string((*reader)->engine()).c_str());
  return 0;
}
