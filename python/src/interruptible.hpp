// Ctrl-C for native work that runs long (a load): Python handles a signal only when its main
// thread runs bytecode or calls PyErr_CheckSignals, so a thread blocked in C++ would see the
// KeyboardInterrupt only when the work returned, minutes later or, on a hang, never.
//
// run_interruptibly runs the work on a thread of its own and waits with the GIL released,
// looking for signals every kSignalPoll. On a KeyboardInterrupt (or any exception a signal
// handler raises) it requests a stop through the work's stop_token, waits for the work to
// return (a load ends with kCancelled once the reads and decodes already running finish, and
// frees everything), drops the result and raises the exception. Nothing is left running.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>

namespace qload::python {

inline constexpr std::chrono::milliseconds kSignalPoll{50};

// True when a signal handler raised (the exception is then set on this thread). Takes the GIL
// for the call only.
inline bool signal_raised() {
  nanobind::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

// Waits on `changed` under `lock` until `ready()` or a signal handler raises; false on a
// signal (the exception is set). Call with the GIL released.
template <class Ready>
bool wait_interruptibly(std::unique_lock<std::mutex>& lock, std::condition_variable& changed, Ready ready) {
  while (!changed.wait_for(lock, kSignalPoll, ready)) {
    lock.unlock();
    const bool raised = signal_raised();
    lock.lock();
    if (raised) return false;
  }
  return true;
}

// `work(std::stop_token)` on a worker thread, its result returned here; see above. Called with
// the GIL held; `work` must not throw.
template <class Work>
auto run_interruptibly(Work work) -> std::invoke_result_t<Work&, std::stop_token> {
  using Out = std::invoke_result_t<Work&, std::stop_token>;
  std::stop_source stop;
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Out> out;
  bool interrupted = false;
  {
    nanobind::gil_scoped_release no_gil;
    std::thread worker([&] {
      Out result = work(stop.get_token());
      std::lock_guard lock(mutex);
      out.emplace(std::move(result));
      changed.notify_all();
    });
    {
      std::unique_lock lock(mutex);
      if (!wait_interruptibly(lock, changed, [&] { return out.has_value(); })) {
        interrupted = true;
        stop.request_stop();
        changed.wait(lock, [&] { return out.has_value(); });
      }
    }
    worker.join();
  }
  if (interrupted) throw nanobind::python_error();  // the signal handler's exception
  return std::move(*out);
}

}  // namespace qload::python
