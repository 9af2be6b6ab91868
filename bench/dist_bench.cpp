// The transfer engine's bandwidth between the processes of one load (issue 20): rank `--root`
// broadcasts `--bytes` of host memory to every other rank through Communicator::broadcast (Gloo,
// straight from the root to each), then scatters a different part to each; then every rank sends
// its own 1/N of `--bytes` to every other one at once through Communicator::move (an all-to-all
// exchange: what a shared-read load does, each rank sending what it read to the ranks that need
// it). Each is timed (best of --repeat) and rank 0 prints GB/s of bytes received per rank. Run as the ranks of a world
// (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT), e.g. by bench/shared_reads_bench.sh, which sets
// it beside the loads it explains. Each received byte is checked.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "best_seconds.hpp"
#include "qload/distributed/communicator.hpp"
#include "qload/distributed/rendezvous.hpp"
#include "qload/distributed/world.hpp"

int main(int argc, char** argv) {
  CLI::App app("qload_dist_bench: host-memory transfer bandwidth between the processes of a world (Gloo)");
  std::uint64_t bytes = std::uint64_t{256} << 20;
  int repeat = 3;
  app.add_option("--bytes", bytes, "bytes each receiving rank gets (default 256 MiB)")->check(CLI::PositiveNumber);
  app.add_option("--repeat", repeat, "runs per measurement; the best counts (default 3)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const auto world = qload::distributed::world_from_env(std::getenv);
  if (!world || !world->has_value()) {
    fmt::print(stderr, "qload_dist_bench: run it as a rank of a world (WORLD_SIZE above 1, RANK, MASTER_ADDR)\n");
    return 2;
  }
  auto rendezvous = qload::distributed::Rendezvous::join(**world, std::chrono::seconds(60));
  if (!rendezvous) {
    fmt::print(stderr, "qload_dist_bench: {}\n", rendezvous.error().to_string());
    return 1;
  }
  auto comm = qload::distributed::Communicator::create(*rendezvous, {});
  if (!comm) {
    fmt::print(stderr, "qload_dist_bench: {}\n", comm.error().to_string());
    return 1;
  }
  const std::uint32_t rank = (*world)->rank, size = (*world)->size, root = 0;
  std::vector<std::byte> buffer(bytes);
  if (rank == root)
    for (std::uint64_t i = 0; i < bytes; ++i) buffer[i] = static_cast<std::byte>(i * 2654435761u >> 24);
  bool ok = true;
  const qload::distributed::BroadcastBuffer one[] = {{.bytes = buffer}};
  const double broadcast =
      qload::bench::best_seconds(repeat, [&] { ok = ok && comm->broadcast(one, root).has_value(); });
  for (std::uint64_t i = 0; i < bytes; i += 4099) ok = ok && buffer[i] == static_cast<std::byte>(i * 2654435761u >> 24);
  // Scatter: the root sends rank q its own `bytes` (here the same memory for every rank).
  const std::vector<std::uint64_t> sizes(size, bytes);
  std::vector<std::span<const std::byte>> parts(rank == root ? size : 0, std::span<const std::byte>(buffer));
  std::vector<std::byte> mine(rank == root ? 0 : bytes);
  const double scatter =
      qload::bench::best_seconds(repeat, [&] { ok = ok && comm->scatter(sizes, parts, mine, root).has_value(); });
  if (rank != root) ok = ok && mine == buffer;
  // Exchange: part q of `exchanged` is rank q's; it sends it to every other rank.
  std::vector<std::byte> exchanged(bytes / size * size);
  const std::uint64_t part = bytes / size;
  const auto pattern = [](std::uint64_t q, std::uint64_t i) {
    return static_cast<std::byte>((i + q * 7919) * 2654435761u >> 24);
  };
  for (std::uint64_t i = 0; i < part; ++i) exchanged[rank * part + i] = pattern(rank, i);
  std::vector<qload::distributed::HostMove> moves;
  for (std::uint32_t from = 0; from < size; ++from)
    for (std::uint32_t to = 0; to < size; ++to)
      if (from != to)
        moves.push_back({.from = from, .to = to, .bytes = std::span(exchanged).subspan(from * part, part)});
  const double exchange = qload::bench::best_seconds(repeat, [&] { ok = ok && comm->move(moves).has_value(); });
  for (std::uint64_t q = 0; q < size; ++q)
    for (std::uint64_t i = 0; i < part; i += 4099) ok = ok && exchanged[q * part + i] == pattern(q, i);
  auto all_ok = comm->all_ok(ok);
  if (!all_ok || !*all_ok) {
    fmt::print(stderr, "qload_dist_bench: rank {}: a transfer failed or delivered wrong bytes\n", rank);
    return 1;
  }
  if (rank == 0) {
    const double received = static_cast<double>(part) * (size - 1);  // per rank, in the exchange
    fmt::print(
        "gloo {} ranks, {:.0f} MiB per receiving rank: broadcast {:.3f} s ({:.2f} GB/s per rank, {:.2f} GB/s "
        "from the root), scatter {:.3f} s ({:.2f} GB/s per rank, {:.2f} GB/s from the root)\n",
        size, static_cast<double>(bytes) / (1 << 20), broadcast, static_cast<double>(bytes) / broadcast / 1e9,
        static_cast<double>(bytes) * (size - 1) / broadcast / 1e9, scatter, static_cast<double>(bytes) / scatter / 1e9,
        static_cast<double>(bytes) * (size - 1) / scatter / 1e9);
    fmt::print("gloo {} ranks, all-to-all exchange of {:.0f} MiB: {:.3f} s ({:.2f} GB/s received per rank)\n", size,
               static_cast<double>(bytes) / (1 << 20), exchange, received / exchange / 1e9);
  }
  return 0;
}
