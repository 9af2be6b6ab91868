// ThreadPool: every job runs exactly once, the destructor drains the queue, jobs may submit
// jobs, and the workers really run concurrently.
#include <catch2/catch.hpp>

#include <pthread.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "qload/runtime/thread_pool.hpp"

using qload::ThreadPool;

TEST_CASE("ThreadPool has the requested number of workers, at least one", "[thread_pool]") {
  CHECK(ThreadPool(4).size() == 4);
  CHECK(ThreadPool(1).size() == 1);
  CHECK(ThreadPool(0).size() == 1);
}

TEST_CASE("ThreadPool runs each of N jobs exactly once", "[thread_pool]") {
  constexpr std::size_t kJobs = 10000;
  std::vector<std::atomic<int>> runs(kJobs);
  std::atomic<std::size_t> total{0};
  std::latch done(static_cast<std::ptrdiff_t>(kJobs));
  {
    ThreadPool pool(4);
    for (std::size_t i = 0; i < kJobs; ++i)
      pool.submit([&, i] {
        runs[i].fetch_add(1);
        total.fetch_add(1);
        done.count_down();
      });
    done.wait();
    CHECK(total.load() == kJobs);
  }
  CHECK(total.load() == kJobs);  // nothing ran twice during shutdown
  std::size_t exactly_once = 0;
  for (const auto& r : runs) exactly_once += (r.load() == 1) ? 1 : 0;
  CHECK(exactly_once == kJobs);
}

TEST_CASE("ThreadPool destructor finishes the jobs already queued", "[thread_pool]") {
  std::atomic<int> ran{0};
  std::latch gate(1);
  {
    ThreadPool pool(1);
    // The single worker blocks on the first job, so the rest are still queued when the
    // destructor starts.
    pool.submit([&] {
      gate.wait();
      ++ran;
    });
    for (int i = 0; i < 99; ++i)
      pool.submit([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(10));
        ++ran;
      });
    CHECK(ran.load() == 0);
    gate.count_down();
  }
  CHECK(ran.load() == 100);
}

TEST_CASE("ThreadPool runs jobs in FIFO order on a single worker", "[thread_pool]") {
  std::vector<int> order;
  {
    ThreadPool pool(1);
    for (int i = 0; i < 50; ++i) pool.submit([&order, i] { order.push_back(i); });
  }
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("ThreadPool jobs may submit further jobs", "[thread_pool]") {
  std::atomic<int> leaves{0};
  std::atomic<int> nodes{0};
  // Declared before the pool so that it outlives the pool's draining destructor.
  std::function<void(int)> spawn;
  {
    ThreadPool pool(3);
    // A binary tree of depth 8 spawned from inside jobs: 2^9 - 1 nodes, 2^8 leaves.
    spawn = [&](int depth) {
      ++nodes;
      if (depth == 0) {
        ++leaves;
        return;
      }
      pool.submit([&spawn, depth] { spawn(depth - 1); });
      pool.submit([&spawn, depth] { spawn(depth - 1); });
    };
    pool.submit([&spawn] { spawn(8); });
    // No waiting here: the destructor must also drain jobs submitted while it is draining.
  }
  CHECK(nodes.load() == 511);
  CHECK(leaves.load() == 256);
}

TEST_CASE("ThreadPool runs jobs concurrently on more than one thread", "[thread_pool]") {
  constexpr int kThreads = 4;
  std::mutex ids_mutex;
  std::set<std::thread::id> ids;
  // Every job waits at a barrier for all the others: this completes only if kThreads jobs
  // are running at the same time on different workers.
  std::barrier sync(kThreads);
  std::latch done(kThreads);
  {
    ThreadPool pool(kThreads);
    for (int i = 0; i < kThreads; ++i)
      pool.submit([&] {
        {
          std::lock_guard lock(ids_mutex);
          ids.insert(std::this_thread::get_id());
        }
        sync.arrive_and_wait();
        done.count_down();
      });
    done.wait();
  }
  CHECK(ids.size() == static_cast<std::size_t>(kThreads));
  CHECK(ids.count(std::this_thread::get_id()) == 0);  // never on the submitting thread
}

TEST_CASE("ThreadPool names its workers <name>/<i>", "[thread_pool]") {
  std::mutex names_mutex;
  std::set<std::string> names;
  std::barrier sync(2);
  {
    ThreadPool pool(2, "staging");
    for (int i = 0; i < 2; ++i)
      pool.submit([&] {
        char buf[16] = {};
        pthread_getname_np(pthread_self(), buf, sizeof buf);
        {
          std::lock_guard lock(names_mutex);
          names.insert(buf);
        }
        sync.arrive_and_wait();  // keep both workers busy so each takes one job
      });
  }
  CHECK(names == std::set<std::string>{"staging/0", "staging/1"});
}

TEST_CASE("ThreadPool shortens long names to the 15-character Linux limit but keeps the index", "[thread_pool]") {
  std::mutex mutex;
  std::set<std::string> names;
  std::latch both(2);  // outlives the pool: workers may still be returning from arrive_and_wait
  {
    ThreadPool pool(2, "a-very-long-pool-name");
    for (int i = 0; i < 2; ++i)
      pool.submit([&] {
        char buf[16] = {};
        pthread_getname_np(pthread_self(), buf, sizeof buf);
        {
          std::lock_guard lock(mutex);
          names.insert(buf);
        }
        both.arrive_and_wait();  // both workers must be running: each records its own name
      });
  }
  CHECK(names == std::set<std::string>{"a-very-long-p/0", "a-very-long-p/1"});
}

TEST_CASE("ThreadPool accepts submissions from several threads at once", "[thread_pool]") {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2);
    std::vector<std::jthread> submitters;
    for (int t = 0; t < 4; ++t)
      submitters.emplace_back([&] {
        for (int i = 0; i < 1000; ++i) pool.submit([&] { ++ran; });
      });
  }
  CHECK(ran.load() == 4000);
}

// Issue 45: an exception leaving a worker would std::terminate the embedding process.
TEST_CASE("ThreadPool hands a job's exception to its handler and keeps running jobs", "[thread_pool]") {
  std::mutex mutex;
  std::vector<std::string> caught;
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2, "throwing", [&](std::exception_ptr e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        const std::lock_guard lock(mutex);
        caught.emplace_back(x.what());
      }
    });
    pool.submit([] { throw std::bad_alloc(); });
    pool.submit([] { (void)std::vector<int>(std::size_t{1} << 63); });  // length_error
    for (int i = 0; i < 10; ++i) pool.submit([&] { ++ran; });
  }
  CHECK(caught.size() == 2);
  CHECK(ran == 10);
  {
    ThreadPool pool(1, "default");  // no handler: a line on stderr, the job after still runs
    pool.submit([] { throw std::runtime_error("boom"); });
    pool.submit([&] { ++ran; });
  }
  CHECK(ran == 11);
}
