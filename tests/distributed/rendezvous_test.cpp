// The torchrun-style environment and the TCP rendezvous of multi-process loads. Ranks run as
// threads here, each with its own sockets, exactly as separate processes would use them (the
// CLI test tests/cli/multiprocess.sh runs real processes). Attacks on the rendezvous:
// rendezvous_security_test.cpp.
#include <catch2/catch.hpp>

#include <future>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "qload/distributed/rendezvous.hpp"
#include "qload/distributed/world.hpp"
#include "support/free_port.hpp"

using namespace qload;
using namespace qload::testing;
using namespace std::chrono_literals;

namespace {

distributed::EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

distributed::World world(std::uint32_t rank, std::uint32_t size, std::uint16_t port) {
  return distributed::World{.rank = rank,
                            .size = size,
                            .local_rank = rank,
                            .local_size = size,
                            .master_addr = "127.0.0.1",
                            .master_port = port};
}

}  // namespace

TEST_CASE("world: read from torchrun's variables, with defaults and named errors", "[runtime][world]") {
  auto none = distributed::world_from_env(env_of({}));
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  auto one = distributed::world_from_env(env_of({{"WORLD_SIZE", "1"}}));
  REQUIRE(one);
  CHECK_FALSE(one->has_value());

  auto full = distributed::world_from_env(env_of({{"WORLD_SIZE", "8"},
                                                  {"RANK", "5"},
                                                  {"LOCAL_RANK", "1"},
                                                  {"LOCAL_WORLD_SIZE", "4"},
                                                  {"MASTER_ADDR", "node0"},
                                                  {"MASTER_PORT", "1234"},
                                                  {"QLOAD_WORLD_TOKEN", "0123456789abcdef0123"},
                                                  {"XDG_RUNTIME_DIR", "/run/user/1000"}}));
  REQUIRE(full);
  REQUIRE(full->has_value());
  CHECK((*full)->rank == 5);
  CHECK((*full)->size == 8);
  CHECK((*full)->local_rank == 1);
  CHECK((*full)->local_size == 4);
  CHECK((*full)->master_addr == "node0");
  CHECK((*full)->master_port == 1234);
  CHECK((*full)->token == "0123456789abcdef0123");
  CHECK((*full)->runtime_dir == "/run/user/1000");

  auto defaults = distributed::world_from_env(env_of({{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"MASTER_ADDR", "h"}}));
  REQUIRE(defaults);
  CHECK((*defaults)->local_size == 4);
  CHECK((*defaults)->local_rank == 3);
  CHECK((*defaults)->master_port == 29500);
  CHECK((*defaults)->token.empty());  // one node: the rendezvous makes its own

  const auto error_of = [](std::map<std::string, std::string> vars) {
    auto w = distributed::world_from_env(env_of(vars));
    REQUIRE_FALSE(w);
    CHECK(w.error().code() == Errc::kInvalidArgument);
    return w.error().message();
  };
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), Catch::Contains("RANK: is required"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "h"}}),
             Catch::Contains("RANK: 2 is outside 0..1"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "two"}}), Catch::Contains("WORLD_SIZE: 'two' is not a number"));
  // MASTER_ADDR left out: the loopback on one node, an error across nodes (complete_world).
  auto one_node = distributed::world_from_env(env_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}}));
  REQUIRE(one_node);
  REQUIRE(*one_node);
  CHECK((*one_node)->master_addr == "127.0.0.1");
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"},
                       {"RANK", "0"},
                       {"LOCAL_WORLD_SIZE", "1"},
                       {"QLOAD_WORLD_TOKEN", "0123456789abcdef0123456789abcdef"}}),
             Catch::Contains("MASTER_ADDR: is required for a world over several nodes"));
  // A world the program gives (C's qload_options, Python's world=) takes the same defaults.
  const auto given =
      distributed::complete_world({.rank = 1, .size = 2, .local_rank = 1, .local_size = 2, .master_addr = ""});
  REQUIRE(given);
  CHECK(given->master_addr == "127.0.0.1");
  const auto across = distributed::complete_world({.rank = 1,
                                                   .size = 2,
                                                   .local_rank = 0,
                                                   .local_size = 1,
                                                   .master_addr = "",
                                                   .token = "0123456789abcdef0123456789abcdef"});
  REQUIRE_FALSE(across);
  CHECK_THAT(across.error().message(), Catch::Contains("needs rank 0's address (MASTER_ADDR)"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
             Catch::Contains("MASTER_PORT: 70000 is outside 1..65535"));
  CHECK_THAT(
      error_of(
          {{"WORLD_SIZE", "4"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}),
      Catch::Contains("LOCAL_RANK: 2 is outside 0..1"));
}

TEST_CASE("rendezvous: ranks joining in any order exchange messages by rank, several times", "[runtime][rendezvous]") {
  for (const std::uint32_t size : {1u, 2u, 5u}) {
    const std::uint16_t port = free_port();
    std::vector<std::future<Result<std::vector<std::vector<std::string>>>>> ranks;
    // The last ranks start first: they must wait for rank 0 to listen.
    for (std::uint32_t r = size; r-- > 0;) {
      ranks.push_back(std::async(std::launch::async, [=]() -> Result<std::vector<std::vector<std::string>>> {
        if (r == 0) std::this_thread::sleep_for(200ms);
        QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world(r, size, port), 10s));
        std::vector<std::vector<std::string>> rounds;
        for (int round = 0; round < 3; ++round) {
          // Sizes differ per rank, including empty messages.
          QLOAD_ASSIGN_OR_RETURN(auto all, rv.allgather(std::string(r * 1000 + round, static_cast<char>('a' + r))));
          rounds.push_back(std::move(all));
        }
        return rounds;
      }));
    }
    for (auto& f : ranks) {
      auto rounds = f.get();
      if (!rounds) FAIL(rounds.error().to_string());
      REQUIRE(rounds->size() == 3);
      for (std::size_t round = 0; round < 3; ++round) {
        REQUIRE((*rounds)[round].size() == size);
        for (std::uint32_t r = 0; r < size; ++r)
          CHECK((*rounds)[round][r] == std::string(r * 1000 + round, static_cast<char>('a' + r)));
      }
    }
  }
}

TEST_CASE("rendezvous: a rank that exits, a duplicate rank and a missing rank fail by name", "[runtime][rendezvous]") {
  SECTION("a rank that leaves before the exchange") {
    const std::uint16_t port = free_port();
    auto rank0 = std::async(std::launch::async, [=]() -> Result<std::vector<std::string>> {
      QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world(0, 3, port), 10s));
      return rv.allgather("zero");
    });
    auto rank1 = std::async(std::launch::async, [=]() -> Result<std::vector<std::string>> {
      QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world(1, 3, port), 10s));
      return rv.allgather("one");
    });
    {
      auto rank2 = distributed::Rendezvous::join(world(2, 3, port), 10s);  // joins, then fails and goes away
      REQUIRE(rank2);
    }
    auto zero = rank0.get();
    REQUIRE_FALSE(zero);
    CHECK_THAT(zero.error().message(), Catch::Contains("rank 2 closed the connection"));
    auto one = rank1.get();  // rank 0 tells it which rank left, before leaving itself
    REQUIRE_FALSE(one);
    CHECK(one.error().code() == Errc::kCancelled);
    CHECK_THAT(one.error().message(),
               Catch::Contains("rank 0 ended the exchange") && Catch::Contains("rank 2 closed the connection"));
  }
  SECTION("two processes with the same RANK") {
    const std::uint16_t port = free_port();
    auto rank0 = std::async(std::launch::async, [=] { return distributed::Rendezvous::join(world(0, 3, port), 10s); });
    auto a = std::async(std::launch::async, [=] { return distributed::Rendezvous::join(world(1, 3, port), 10s); });
    auto b = std::async(std::launch::async, [=] { return distributed::Rendezvous::join(world(1, 3, port), 10s); });
    auto zero = rank0.get();
    REQUIRE_FALSE(zero);
    CHECK(zero.error().code() == Errc::kInvalidArgument);
    CHECK_THAT(zero.error().message(), Catch::Contains("two processes claim RANK 1 of 3"));
    a.get();
    b.get();
  }
  SECTION("a WORLD_SIZE that differs") {
    const std::uint16_t port = free_port();
    auto rank0 = std::async(std::launch::async, [=] { return distributed::Rendezvous::join(world(0, 2, port), 10s); });
    auto other = distributed::Rendezvous::join(world(1, 3, port), 10s);
    auto zero = rank0.get();
    REQUIRE_FALSE(zero);
    CHECK_THAT(zero.error().message(), Catch::Contains("rank 1 says WORLD_SIZE is 3, rank 0 says 2"));
  }
  SECTION("a rank that never comes, and a rank 0 that never listens") {
    const std::uint16_t port = free_port();
    auto zero = distributed::Rendezvous::join(world(0, 2, port), 300ms);
    REQUIRE_FALSE(zero);
    CHECK(zero.error().code() == Errc::kIo);
    CHECK_THAT(zero.error().message(), Catch::Contains("1 of 2 ranks joined"));
    auto one = distributed::Rendezvous::join(world(1, 2, free_port()), 300ms);
    REQUIRE_FALSE(one);
    CHECK_THAT(one.error().message(), Catch::Contains("rank 1 could not join rank 0 at 127.0.0.1:"));
  }
  SECTION("a rank left waiting says so every quarter of the timeout, not only when it ends") {
    std::vector<std::string> said;
    std::mutex m;
    const Logger log(
        [&](LogLevel, std::string_view line) {
          const std::lock_guard lock(m);
          said.emplace_back(line);
        },
        LogLevel::kInfo);
    REQUIRE_FALSE(distributed::Rendezvous::join(world(0, 2, free_port()), 1000ms, log));
    REQUIRE(said.size() >= 2);
    CHECK(said.size() <= 4);
    CHECK_THAT(said.front(), Catch::Contains("rank 0 has waited 0 s on 127.0.0.1:") &&
                                 Catch::Contains("1 of 2 ranks joined") && Catch::Contains("QLOAD_RENDEZVOUS_TIMEOUT"));
    said.clear();
    REQUIRE_FALSE(distributed::Rendezvous::join(world(1, 2, free_port()), 1000ms, log));
    REQUIRE(said.size() >= 2);
    CHECK_THAT(said.front(), Catch::Contains("rank 1 has tried 0 s to join rank 0 at 127.0.0.1:"));
  }
}

TEST_CASE("rendezvous: an exchange waits as long as asked for a slow rank", "[runtime][rendezvous]") {
  const std::uint16_t port = free_port();
  // Rank 1 joins at once, then takes 600 ms before each of its two messages.
  auto slow = std::async(std::launch::async, [=]() -> Status {
    QLOAD_ASSIGN_OR_RETURN(distributed::Rendezvous rv, distributed::Rendezvous::join(world(1, 2, port), 10s));
    for (int round = 0; round < 2; ++round) {
      std::this_thread::sleep_for(600ms);
      auto all = rv.allgather("late");
      if (!all && round == 0) return fail(std::move(all).error());
      if (round == 0 && (*all)[0] != "waited") return fail(Errc::kInternal, "wrong message from rank 0");
    }
    return {};
  });
  auto rank0 = distributed::Rendezvous::join(world(0, 2, port), 300ms);
  REQUIRE(rank0);
  // No limit: it gets rank 1's message.
  auto waited = rank0->allgather("waited", 0ms);
  if (!waited) FAIL(waited.error().to_string());
  CHECK((*waited)[1] == "late");
  // The join's 300 ms: it gives up, naming the rank.
  auto gave_up = rank0->allgather("impatient");
  REQUIRE_FALSE(gave_up);
  CHECK_THAT(gave_up.error().message(), Catch::Contains("timed out waiting for rank 1"));
  { const distributed::Rendezvous closed = std::move(*rank0); }  // rank 1's last exchange then fails at once
  CHECK(slow.get());
}
