// The DAG executor in isolation: dependency order, priority order, budgets (claims and
// holds), cancellation on the first error with everything released, reads through a Reader.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

#include "io/io_test_support.hpp"
#include "qload/io/fault_injector.hpp"
#include "qload/runtime/host_buffer.hpp"
#include "qload/scheduler/executor.hpp"
#include "scheduler/scheduler_test_support.hpp"

using namespace qload;
using namespace qload::scheduler;
using namespace qload::testing;

namespace {

// Start and end "ticks" of each task on one global counter: A ended before B started iff
// end[A] < start[B].
struct Ticks {
  std::atomic<int> clock{0};
  std::vector<std::atomic<int>> start, end;
  explicit Ticks(std::size_t n) : start(n), end(n) {
    for (std::size_t i = 0; i < n; ++i) start[i] = end[i] = -1;
  }
  Status run(std::size_t i, std::chrono::microseconds work = std::chrono::microseconds(0)) {
    start[i] = clock.fetch_add(1);
    if (work.count() > 0) std::this_thread::sleep_for(work);
    end[i] = clock.fetch_add(1);
    return {};
  }
};

// Tracks how much of a resource tasks use at once, from inside the tasks.
struct Gauge {
  std::atomic<std::int64_t> now{0}, peak{0};
  void add(std::int64_t n) {
    const std::int64_t v = now.fetch_add(n) + n;
    for (std::int64_t p = peak.load(); v > p && !peak.compare_exchange_weak(p, v);) {
    }
  }
};

}  // namespace

TEST_CASE("executor: a task never starts before every dependency has finished", "[scheduler][executor]") {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    std::mt19937_64 rng(seed);
    constexpr std::size_t kTasks = 300;
    Ticks ticks(kTasks);
    TaskGraph g;
    const ResourceId cpu = g.add_resource("cpu workers", 3);
    std::vector<std::vector<TaskId>> deps(kTasks);
    for (std::size_t i = 0; i < kTasks; ++i) {
      const TaskId t =
          g.add({.lane = "work",
                 .name = std::to_string(i),
                 .priority = static_cast<std::int64_t>(rng() % 7),
                 .work = CpuWork{[&ticks, i] { return ticks.run(i, std::chrono::microseconds(i % 3 * 50)); }},
                 .claims = {{cpu, 1}}});
      for (int k = 0; k < 3 && i > 0; ++k) {
        const auto d = static_cast<TaskId>(rng() % i);
        if (rng() % 2 == 0 && std::find(deps[i].begin(), deps[i].end(), d) == deps[i].end()) {
          g.depends_on(t, d);
          deps[i].push_back(d);
        }
      }
    }
    auto stats = execute(g, nullptr, {.cpu_threads = 3});
    REQUIRE(stats);
    CHECK(stats->tasks == kTasks);
    for (std::size_t i = 0; i < kTasks; ++i) {
      REQUIRE(ticks.start[i] >= 0);
      for (const TaskId d : deps[i]) CHECK(ticks.end[d] < ticks.start[i]);
    }
    CHECK(stats->resources[0].peak <= 3);
  }
}

TEST_CASE("executor: ready tasks start in priority order", "[scheduler][executor]") {
  constexpr int kTasks = 40;
  std::vector<int> order;
  std::mutex mutex;
  TaskGraph g;
  const ResourceId cpu = g.add_resource("cpu workers", 1);
  std::vector<std::int64_t> priorities(kTasks);
  for (int i = 0; i < kTasks; ++i) priorities[i] = (i * 17) % kTasks;  // a permutation
  for (int i = 0; i < kTasks; ++i)
    g.add({.lane = "work",
           .name = std::to_string(i),
           .priority = priorities[i],
           .work = CpuWork{[&, i] {
             std::lock_guard lock(mutex);
             order.push_back(static_cast<int>(priorities[i]));
             return Status{};
           }},
           .claims = {{cpu, 1}}});
  REQUIRE(execute(g, nullptr, {.cpu_threads = 1}));
  REQUIRE(order.size() == kTasks);
  CHECK(std::is_sorted(order.begin(), order.end()));
}

TEST_CASE("executor: claims and holds never exceed their budgets; a hold lasts until its last user",
          "[scheduler][executor]") {
  TaskGraph g;
  const ResourceId cpu = g.add_resource("cpu workers", 2);
  const ResourceId slots = g.add_resource("staging bytes", 3 * 100);
  Gauge workers, held;
  std::atomic<int> released{0};
  std::atomic<bool> user_after_release{false};
  constexpr int kChunks = 50;
  for (int i = 0; i < kChunks; ++i) {
    // producer acquires 100 "bytes" of staging, two consumers use them.
    const TaskId producer = g.add({.lane = "read",
                                   .name = "p",
                                   .priority = i,
                                   .work = CpuWork{[&] {
                                     held.add(100);
                                     return Status{};
                                   }},
                                   .claims = {{cpu, 1}}});
    auto done = std::make_shared<std::atomic<int>>(0);
    const HoldId hold = g.add_hold(producer, {slots, 100}, [&, done] {
      if (done->load() != 2) user_after_release = true;
      held.add(-100);
      ++released;
    });
    for (int k = 0; k < 2; ++k) {
      const TaskId user = g.add({.lane = "use",
                                 .name = "u",
                                 .priority = i,
                                 .work = CpuWork{[&, done] {
                                   workers.add(1);
                                   std::this_thread::sleep_for(std::chrono::microseconds(100));
                                   workers.add(-1);
                                   ++*done;
                                   return Status{};
                                 }},
                                 .claims = {{cpu, 1}}});
      g.depends_on(user, producer);
      g.add_hold_user(hold, user);
    }
  }
  auto stats = execute(g, nullptr, {.cpu_threads = 2});
  REQUIRE(stats);
  CHECK(released == kChunks);
  CHECK(!user_after_release);
  CHECK(held.peak <= 300);
  CHECK(held.now == 0);
  CHECK(workers.peak <= 2);
  CHECK(stats->resources[1].peak <= 300);
  CHECK(stats->resources[1].peak >= 200);  // holds really overlapped
}

TEST_CASE("executor: the first error cancels what has not started and releases every hold", "[scheduler][executor]") {
  const int threads_before = thread_count();
  TaskGraph g;
  const ResourceId cpu = g.add_resource("cpu workers", 2);
  const ResourceId slots = g.add_resource("slots", 4);
  std::atomic<int> ran{0}, acquired{0}, released{0};
  constexpr int kTasks = 200;
  // Per task: did its body run, how often was its hold released. A task can be dispatched
  // (taking its hold) and then skip its body because the error arrived meanwhile.
  std::vector<std::atomic<int>> body_ran(kTasks), releases(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    const TaskId t = g.add({.lane = "work",
                            .name = "task " + std::to_string(i),
                            .priority = i,
                            .work = CpuWork{[&, i]() -> Status {
                              ++ran;
                              ++body_ran[i];
                              std::this_thread::sleep_for(std::chrono::microseconds(200));
                              if (i == 10) return fail(Errc::kIo, "injected");
                              return {};
                            }},
                            .claims = {{cpu, 1}}});
    g.add_hold(t, {slots, 1}, [&, i] {
      ++released;
      ++releases[i];
    });
    // The user never starts once the error is seen: its hold must still be released.
    const TaskId user = g.add({.lane = "use",
                               .name = "u",
                               .priority = i,
                               .work = CpuWork{[&] {
                                 ++acquired;
                                 return Status{};
                               }},
                               .claims = {{cpu, 1}}});
    g.depends_on(user, t);
    g.add_hold_user(static_cast<HoldId>(i), user);
  }
  auto stats = execute(g, nullptr, {.cpu_threads = 2});
  REQUIRE(!stats);
  CHECK(stats.error().code() == Errc::kIo);
  CHECK_THAT(stats.error().to_string(), Catch::Contains("task 10"));
  CHECK(ran < kTasks);  // the rest never started
  // Every hold that was taken went back, exactly once: each task whose body ran was released
  // once, no task twice, and at most the two dispatched-but-cancelled ones besides.
  for (int i = 0; i < kTasks; ++i) {
    INFO("task " << i);
    CHECK(releases[i] <= 1);
    if (body_ran[i] == 1) CHECK(releases[i] == 1);
  }
  CHECK(released >= ran);
  CHECK(released <= ran + 2);
  CHECK(thread_count() == threads_before);
}

TEST_CASE("executor: a stop request from another thread cancels the run and releases every hold",
          "[scheduler][executor]") {
  const int threads_before = thread_count();
  TaskGraph g;
  const ResourceId cpu = g.add_resource("cpu workers", 2);
  const ResourceId slots = g.add_resource("slots", 4);
  std::stop_source stop;
  std::atomic<int> ran{0}, taken{0}, released{0}, ran_at_stop{0};
  constexpr int kTasks = 200;
  for (int i = 0; i < kTasks; ++i) {
    const TaskId t = g.add({.lane = "work",
                            .name = "task " + std::to_string(i),
                            .priority = i,
                            .work = CpuWork{[&, i]() -> Status {
                              ++ran;
                              // Ctrl-C from a thread of its own, as Python's main thread does.
                              if (i == 10) {
                                std::jthread([&] { stop.request_stop(); }).join();
                                ran_at_stop = ran.load();  // the other worker may have run more meanwhile
                              }
                              std::this_thread::sleep_for(std::chrono::microseconds(200));
                              return {};
                            }},
                            .claims = {{cpu, 1}}});
    ++taken;
    g.add_hold(t, {slots, 1}, [&] { ++released; });
  }
  auto stats = execute(g, nullptr, {.cpu_threads = 2, .stop = stop.get_token()});
  REQUIRE(!stats);
  CHECK(stats.error().code() == Errc::kCancelled);
  CHECK(ran < kTasks);  // nothing started after the request but what was already dispatched
  // Once the request has returned: at most the other running task and one dispatched meanwhile
  // (how many ran before it depends on how long starting a thread takes on a loaded machine).
  CHECK(ran >= 11);
  CHECK(ran <= ran_at_stop + 2);
  CHECK(released >= ran);
  CHECK(thread_count() == threads_before);

  // A stop requested before the run starts nothing.
  TaskGraph g2;
  std::atomic<int> ran2{0};
  g2.add({.lane = "work", .name = "never", .work = CpuWork{[&] {
                                             ++ran2;
                                             return Status{};
                                           }}});
  std::stop_source stopped;
  stopped.request_stop();
  auto none = execute(g2, nullptr, {.stop = stopped.get_token()});
  REQUIRE(!none);
  CHECK(none.error().code() == Errc::kCancelled);
  CHECK(ran2 == 0);
}

TEST_CASE("executor: a claim beyond its budget is refused before anything runs", "[scheduler][executor]") {
  TaskGraph g;
  const ResourceId r = g.add_resource("slots", 2);
  std::atomic<int> ran{0};
  const TaskId t = g.add({.lane = "x",
                          .name = "greedy",
                          .work = CpuWork{[&] {
                            ++ran;
                            return Status{};
                          }},
                          .claims = {{r, 1}}});
  g.add_hold(t, {r, 2});  // 1 + 2 > 2: could never start
  auto stats = execute(g, nullptr, {});
  REQUIRE(!stats);
  CHECK(stats.error().code() == Errc::kInvalidArgument);
  CHECK(ran == 0);
}

TEST_CASE("executor: reads run on the I/O thread; CPU tasks see their bytes; an injected EIO cancels the rest",
          "[scheduler][executor]") {
  ScratchDir dir;
  const auto bytes = random_bytes(64 * 8192, 11);
  write_file(dir.file("f"), bytes);
  for (const EngineCase& c : engine_cases()) {
    if (c.direct != io::DirectMode::kOff) continue;
    for (const bool inject : {false, true}) {
      DYNAMIC_SECTION(c.label() << (inject ? " with EIO" : "")) {
        const int fds_before = open_fd_count();
        const int threads_before = thread_count();
        io::FaultInjector faults;
        if (inject) faults.add({.kind = io::FaultKind::kEio, .offset = 20 * 8192 + 5, .times = io::FaultRule::kAlways});
        HostBuffer buffer = HostBuffer::allocate(bytes.size()).value();
        std::atomic<int> checked{0}, mismatched{0};
        {
          auto reader = make_test_reader(c, 4, &faults);
          const io::FileId id = reader->open_file(dir.file("f")).value();
          TaskGraph g;
          const ResourceId reads = g.add_resource("reads", 3);
          for (std::uint32_t i = 0; i < 64; ++i) {
            const std::span<std::byte> dest = buffer.span().subspan(i * 8192, 8192);
            const TaskId read = g.add({.lane = "read",
                                       .name = std::to_string(i),
                                       .priority = i,
                                       .work = IoWork{[=]() -> Result<io::ReadRequest> {
                                         return io::ReadRequest{.file = id, .offset = i * 8192u, .dest = dest};
                                       }},
                                       .claims = {{reads, 1}}});
            const TaskId check = g.add({.lane = "verify",
                                        .name = std::to_string(i),
                                        .priority = i,
                                        .work = CpuWork{[&, dest, i] {
                                          ++checked;
                                          if (std::memcmp(dest.data(), bytes.data() + i * 8192, 8192) != 0)
                                            ++mismatched;
                                          return Status{};
                                        }}});
            g.depends_on(check, read);
          }
          auto stats = execute(g, reader.get(), {.cpu_threads = 2});
          if (inject) {
            REQUIRE(!stats);
            CHECK(stats.error().code() == Errc::kIo);
            CHECK(stats.error().file() == dir.file("f"));
            CHECK(checked < 64);
          } else {
            REQUIRE(stats);
            CHECK(checked == 64);
            CHECK(stats->resources[0].peak <= 3);
          }
          CHECK(mismatched == 0);
          CHECK(reader->pending() == 0);
        }
        CHECK(open_fd_count() == fds_before);
        CHECK(thread_count() == threads_before);
      }
    }
  }
}

// Issue 45: an exception escaping a worker thread would std::terminate the process embedding
// qload (the CLI, Python, a C ABI caller). The task's exception is its error instead.
TEST_CASE("executor: a task that throws fails the run with its error instead of terminating", "[scheduler][executor]") {
  struct Case {
    std::function<void()> thrower;
    Errc code;
    const char* text;
  };
  const std::vector<Case> cases = {
      {[] { throw std::bad_alloc(); }, Errc::kOutOfMemory, "memory allocation failed"},
      {[] { std::vector<int>(std::size_t{1} << 63); }, Errc::kInternal, "exception"},  // length_error
      {[] { throw 42; }, Errc::kInternal, "not derived from std::exception"},
  };
  for (const Case& c : cases) {
    TaskGraph g;
    const ResourceId cpu = g.add_resource("cpu workers", 2);
    std::atomic<int> after{0};
    const TaskId bad = g.add({.lane = "decode",
                              .name = "quantize w",
                              .work = CpuWork{[&]() -> Status {
                                c.thrower();
                                return {};
                              }},
                              .claims = {{cpu, 1}}});
    const TaskId next = g.add({.lane = "decode",
                               .name = "next",
                               .work = CpuWork{[&] {
                                 ++after;
                                 return Status{};
                               }},
                               .claims = {{cpu, 1}}});
    g.depends_on(next, bad);
    auto stats = execute(g, nullptr, {.cpu_threads = 2});
    REQUIRE_FALSE(stats);
    CHECK(stats.error().code() == c.code);
    CHECK_THAT(stats.error().to_string(), Catch::Contains(c.text) && Catch::Contains("quantize w"));
    CHECK(after == 0);
  }
}
