// Attacks on the rendezvous (distributed/rendezvous.hpp), as someone on the same network or machine
// would try them: strangers on rank 0's port (silent, speaking an old hello, forging a rank),
// a rank with the wrong token, a fake rank 0, a message altered on the way, other interfaces of
// the machine, a port already taken; and the token's sources (environment, files, the private
// file a one-node world makes). Ranks run as threads with their own sockets.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "qload/distributed/rendezvous.hpp"
#include "qload/distributed/world.hpp"
#include "qload/runtime/unique_fd.hpp"
#include "support/free_port.hpp"

using namespace qload;
using namespace qload::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr const char* kToken = "correct horse battery staple 42";

distributed::World world(std::uint32_t rank, std::uint32_t size, std::uint16_t port, std::string token = kToken) {
  return distributed::World{.rank = rank,
                            .size = size,
                            .local_rank = rank,
                            .local_size = size,
                            .master_addr = "127.0.0.1",
                            .master_port = port,
                            .token = std::move(token),
                            .runtime_dir = ""};
}

// Log lines, from whichever thread writes them.
struct Captured {
  std::mutex mutex;
  std::vector<std::string> lines;
  Logger logger() {
    return Logger(
        [this](LogLevel, std::string_view m) {
          const std::lock_guard lock(mutex);
          lines.emplace_back(m);
        },
        LogLevel::kDebug);
  }
  bool has(std::string_view part) {
    const std::lock_guard lock(mutex);
    for (const std::string& l : lines)
      if (l.find(part) != std::string::npos) return true;
    return false;
  }
};

UniqueFd connect_to(const char* ip, std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip, &addr.sin_addr);
  addr.sin_port = htons(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return UniqueFd();
  return fd;
}

// Connects until rank 0 listens (it may start later than the test's stranger).
UniqueFd connect_when_listening(std::uint16_t port) {
  for (int i = 0; i < 100; ++i) {
    if (UniqueFd fd = connect_to("127.0.0.1", port)) return fd;
    std::this_thread::sleep_for(20ms);
  }
  return UniqueFd();
}

std::vector<unsigned char> read_bytes(int fd, std::size_t n) {
  std::vector<unsigned char> out(n);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

// A listening socket on 127.0.0.1:port.
UniqueFd listen_on(std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd.get(), 8) != 0)
    return UniqueFd();
  return fd;
}

// Rank 0 and rank 1 of a world of two exchange one message each way.
Result<std::vector<std::string>> rank0_exchange(std::uint16_t port, const Logger& log,
                                                std::chrono::milliseconds timeout = 10s) {
  QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world(0, 2, port), timeout, log));
  return rv.allgather("zero");
}

}  // namespace

TEST_CASE("rendezvous security: strangers on rank 0's port are dropped and logged, and the ranks still meet",
          "[dist][rendezvous][security]") {
  const std::uint16_t port = free_port();
  Captured log;
  auto rank0 = std::async(std::launch::async, [&] { return rank0_exchange(port, log.logger()); });

  // A version-1 hello claiming rank 1 of a world of 3 (which used to end the load), padded to
  // the length of today's.
  UniqueFd old_hello = connect_when_listening(port);
  REQUIRE(old_hello);
  std::array<unsigned char, 84> v1{'q', 'l', 'o', 'a', 'd', '-', 'r', 'v', 1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0};
  REQUIRE(::send(old_hello.get(), v1.data(), v1.size(), MSG_NOSIGNAL) == 84);
  // Plain garbage, then a clean close.
  {
    UniqueFd http = connect_to("127.0.0.1", port);
    REQUIRE(::send(http.get(), "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL) == 18);
  }
  // A forged hello in the current format: it read the challenge, and claims rank 1 with a MAC
  // it cannot compute.
  UniqueFd forger = connect_to("127.0.0.1", port);
  REQUIRE(read_bytes(forger.get(), 44).size() == 44);
  std::array<unsigned char, 84> forged{};
  std::memcpy(forged.data(), "qload-rv", 8);
  forged[8] = 2;   // version
  forged[12] = 2;  // size
  forged[16] = 1;  // rank
  REQUIRE(::send(forger.get(), forged.data(), forged.size(), MSG_NOSIGNAL) == 84);
  // A stranger that connects and says nothing stays pending while the real rank joins.
  UniqueFd silent = connect_to("127.0.0.1", port);
  REQUIRE(silent);

  auto one = distributed::Rendezvous::join(world(1, 2, port), 10s);
  REQUIRE(one);
  auto got = one->allgather("one");
  REQUIRE(got);
  CHECK((*got)[0] == "zero");
  auto zero = rank0.get();
  if (!zero) FAIL(zero.error().to_string());
  CHECK((*zero)[1] == "one");
  CHECK(log.has("does not speak this version"));
  CHECK(log.has("claimed rank 1 but did not prove the world token"));
  CHECK(log.has("closed the connection before completing the handshake"));
  // The forger got nothing back but the closed connection.
  CHECK(read_bytes(forger.get(), 32).empty());
}

TEST_CASE("rendezvous security: a rank with another token cannot join, and the right one still can",
          "[dist][rendezvous][security]") {
  const std::uint16_t port = free_port();
  Captured log;
  auto rank0 = std::async(std::launch::async, [&] { return rank0_exchange(port, log.logger()); });
  auto wrong = distributed::Rendezvous::join(world(1, 2, port, "not the token of this world!"), 800ms);
  REQUIRE_FALSE(wrong);
  CHECK(wrong.error().code() == Errc::kIo);
  CHECK_THAT(wrong.error().message(),
             Catch::Contains("rank 1 could not join rank 0") && Catch::Contains("did not accept this rank's token"));
  CHECK(log.has("claimed rank 1 but did not prove the world token"));
  auto right = distributed::Rendezvous::join(world(1, 2, port), 10s);
  REQUIRE(right);
  auto got = right->allgather("one");
  REQUIRE(got);
  CHECK((*got)[0] == "zero");
  CHECK(rank0.get());
}

TEST_CASE("rendezvous security: a fake rank 0 that echoes the protocol is refused by name",
          "[dist][rendezvous][security]") {
  const std::uint16_t port = free_port();
  const UniqueFd listener = listen_on(port);
  REQUIRE(listener);
  // It sends a well-formed challenge, reads the hello, and answers with the hello's own MAC
  // (the reflection that made a rank exit 0 with nothing loaded).
  auto fake = std::async(std::launch::async, [&] {
    const UniqueFd conn(::accept(listener.get(), nullptr, nullptr));
    std::array<unsigned char, 44> challenge{};
    std::memcpy(challenge.data(), "qload-rv", 8);
    challenge[8] = 2;
    for (std::size_t i = 12; i < challenge.size(); ++i) challenge[i] = static_cast<unsigned char>(i * 7);
    ::send(conn.get(), challenge.data(), challenge.size(), MSG_NOSIGNAL);
    const std::vector<unsigned char> hello = read_bytes(conn.get(), 84);
    if (hello.size() == 84) ::send(conn.get(), hello.data() + 52, 32, MSG_NOSIGNAL);
    read_bytes(conn.get(), 1);  // until the rank hangs up
  });
  auto one = distributed::Rendezvous::join(world(1, 2, port), 5s);
  REQUIRE_FALSE(one);
  CHECK(one.error().code() == Errc::kPermissionDenied);
  CHECK_THAT(one.error().message(), Catch::Contains(fmt::format("the process listening at 127.0.0.1:{}", port)) &&
                                        Catch::Contains("did not prove the world token"));
  fake.get();
}

TEST_CASE("rendezvous security: a message altered on the way fails its authentication, naming the rank",
          "[dist][rendezvous][security]") {
  // Rank 1 reaches rank 0 through a relay that forwards every byte, except that it flips one
  // bit of the first message after the handshake (the 44-byte challenge down, the 84-byte
  // hello up, the 32-byte welcome down; then rank 1's message: 8 bytes of length, then bytes).
  const std::uint16_t port = free_port(), relay_port = free_port();
  const UniqueFd relay_listener = listen_on(relay_port);
  REQUIRE(relay_listener);
  std::atomic<bool> stop{false};
  auto relay = std::async(std::launch::async, [&] {
    const UniqueFd in(::accept(relay_listener.get(), nullptr, nullptr));
    const UniqueFd out = connect_when_listening(port);
    std::uint64_t up = 0;  // bytes forwarded from rank 1 to rank 0
    while (!stop) {
      pollfd fds[2] = {{in.get(), POLLIN, 0}, {out.get(), POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      for (int side = 0; side < 2; ++side) {
        if ((fds[side].revents & (POLLIN | POLLHUP)) == 0) continue;
        char buf[4096];
        const ssize_t n = ::recv(fds[side].fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        if (side == 0) {
          for (ssize_t i = 0; i < n; ++i)
            if (up + static_cast<std::uint64_t>(i) == 84 + 8) buf[i] ^= 0x01;  // the message's first byte
          up += static_cast<std::uint64_t>(n);
        }
        ::send(fds[1 - side].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
      }
    }
  });
  auto rank0 = std::async(std::launch::async, [&] { return rank0_exchange(port, Logger{}); });
  distributed::World through_relay = world(1, 2, relay_port);
  auto one = distributed::Rendezvous::join(through_relay, 10s);
  REQUIRE(one);  // the handshake passed through untouched
  (void)one->allgather("one", 2s);
  auto zero = rank0.get();
  REQUIRE_FALSE(zero);
  CHECK(zero.error().code() == Errc::kPermissionDenied);
  CHECK_THAT(zero.error().message(), Catch::Contains("message 0 from rank 1 failed its authentication"));
  stop = true;
  relay.get();
}

TEST_CASE("rendezvous security: rank 0 listens on MASTER_ADDR only, and says so when the port is taken",
          "[dist][rendezvous][security]") {
  SECTION("not reachable through another address of this machine") {
    const std::uint16_t port = free_port();
    auto rank0 = std::async(std::launch::async, [&] { return distributed::Rendezvous::join(world(0, 2, port), 2s); });
    UniqueFd here = connect_when_listening(port);
    REQUIRE(here);  // 127.0.0.1: MASTER_ADDR itself
    // 127.0.0.2 is this machine too (all of 127/8 is loopback), but not MASTER_ADDR.
    CHECK_FALSE(connect_to("127.0.0.2", port));
    auto one = distributed::Rendezvous::join(world(1, 2, port), 5s);
    CHECK(one);
    CHECK(rank0.get());
  }
  SECTION("a port already in use") {
    const std::uint16_t port = free_port();
    const UniqueFd squatter = listen_on(port);
    REQUIRE(squatter);
    auto zero = distributed::Rendezvous::join(world(0, 2, port), 2s);
    REQUIRE_FALSE(zero);
    CHECK(zero.error().code() == Errc::kIo);
    CHECK_THAT(zero.error().message(),
               Catch::Contains(fmt::format("rank 0 cannot listen on 127.0.0.1:{}: Address already in use", port)));
  }
  SECTION("a MASTER_ADDR that is not this machine's") {
    distributed::World w = world(0, 2, free_port());
    w.master_addr = "192.0.2.1";  // TEST-NET-1: never assigned
    auto zero = distributed::Rendezvous::join(w, 2s);
    REQUIRE_FALSE(zero);
    CHECK_THAT(zero.error().message(), Catch::Contains("it is not an address of this machine"));
  }
}

TEST_CASE("rendezvous security: a one-node world without a token makes a private one and removes it",
          "[dist][rendezvous][security]") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("qload-rv-test-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::uint16_t port = free_port();
  const auto make = [&](std::uint32_t r) {
    distributed::World w = world(r, 3, port, "");
    w.runtime_dir = dir.string();
    return w;
  };
  const fs::path token_file = dir / "qload" / fmt::format("rendezvous-{}.token", port);
  std::vector<std::future<Result<std::vector<std::string>>>> ranks;
  for (std::uint32_t r = 0; r < 3; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> Result<std::vector<std::string>> {
      QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(make(r), 10s));
      return rv.allgather(std::to_string(r));
    }));
  for (auto& f : ranks) {
    auto got = f.get();
    if (!got) FAIL(got.error().to_string());
    CHECK(*got == std::vector<std::string>{"0", "1", "2"});
  }
  struct stat st {};
  REQUIRE(::stat((dir / "qload").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK_FALSE(fs::exists(token_file));  // gone once every rank joined

  // A folder others can enter is refused rather than used.
  fs::permissions(dir / "qload", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  auto refused = distributed::Rendezvous::join(make(0), 1s);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code() == Errc::kPermissionDenied);
  CHECK_THAT(refused.error().message(), Catch::Contains("is not a private folder of this user"));

  // Several nodes without a token: refused before anything listens.
  distributed::World multi = world(0, 4, port, "");
  multi.local_size = 2;
  auto no_token = distributed::Rendezvous::join(multi, 1s);
  REQUIRE_FALSE(no_token);
  CHECK_THAT(no_token.error().message(), Catch::Contains("a world over several nodes needs a token"));
  fs::remove_all(dir);
}

TEST_CASE("world token: from QLOAD_WORLD_TOKEN or a private file, long enough, required across nodes",
          "[dist][world][security]") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("qload-token-test-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto env = [](std::map<std::string, std::string> vars) {
    vars.emplace("WORLD_SIZE", "4");
    vars.emplace("RANK", "1");
    vars.emplace("MASTER_ADDR", "node0");
    return [vars](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  const auto write_file = [&](const char* name, const std::string& text, fs::perms perms) {
    const fs::path p = dir / name;
    std::ofstream(p) << text;
    fs::permissions(p, perms);
    return p.string();
  };
  // One node: no token needed (the rendezvous makes one).
  auto one_node = distributed::world_from_env(env({}));
  REQUIRE(one_node);
  CHECK((*one_node)->token.empty());
  // Across nodes: required, and named.
  auto missing = distributed::world_from_env(env({{"LOCAL_WORLD_SIZE", "2"}}));
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error().message(),
             Catch::Contains("QLOAD_WORLD_TOKEN: is required for a world over several nodes (WORLD_SIZE 4, "
                             "LOCAL_WORLD_SIZE 2)"));
  auto direct = distributed::world_from_env(
      env({{"LOCAL_WORLD_SIZE", "2"}, {"QLOAD_WORLD_TOKEN", "abcdefghijklmnopqrstuvwxyz"}}));
  REQUIRE(direct);
  CHECK((*direct)->token == "abcdefghijklmnopqrstuvwxyz");
  auto too_short = distributed::world_from_env(env({{"QLOAD_WORLD_TOKEN", "hunter2"}}));
  REQUIRE_FALSE(too_short);
  CHECK_THAT(too_short.error().message(), Catch::Contains("the token is 7 bytes; at least 16"));
  // A file: its first line, only if nobody else can read it.
  const std::string good = write_file("good", "0123456789abcdef0123456789abcdef\nsecond line\n", fs::perms::owner_read);
  auto from_file = distributed::world_from_env(env({{"QLOAD_WORLD_TOKEN_FILE", good}}));
  REQUIRE(from_file);
  CHECK((*from_file)->token == "0123456789abcdef0123456789abcdef");
  const std::string open_file =
      write_file("open", "0123456789abcdef0123456789abcdef\n", fs::perms::owner_read | fs::perms::others_read);
  auto readable = distributed::world_from_env(env({{"QLOAD_WORLD_TOKEN_FILE", open_file}}));
  REQUIRE_FALSE(readable);
  CHECK(readable.error().code() == Errc::kPermissionDenied);
  CHECK_THAT(readable.error().message(), Catch::Contains("must be readable by its owner only (chmod 600)"));
  auto both = distributed::world_from_env(
      env({{"QLOAD_WORLD_TOKEN_FILE", good}, {"QLOAD_WORLD_TOKEN", "abcdefghijklmnopqrstu"}}));
  REQUIRE_FALSE(both);
  CHECK_THAT(both.error().message(), Catch::Contains("are both set"));
  auto absent = distributed::world_from_env(env({{"QLOAD_WORLD_TOKEN_FILE", (dir / "absent").string()}}));
  REQUIRE_FALSE(absent);
  CHECK(absent.error().code() == Errc::kNotFound);
  fs::remove_all(dir);
}
