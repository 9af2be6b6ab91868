#include "qload/runtime/mapping_fault_guard.hpp"

#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <string>

#include <fmt/format.h>

namespace qload {
namespace {

// What the current thread is reading; `active` is set only inside guarded_mapped_read.
struct GuardedRead {
  sigjmp_buf jump;
  const std::byte* begin = nullptr;
  const std::byte* end = nullptr;
  const std::byte* fault = nullptr;
  volatile sig_atomic_t active = 0;
};
thread_local GuardedRead t_read;

struct sigaction g_previous {};  // the SIGBUS handler before ours, for faults we do not own

void on_sigbus(int signal, siginfo_t* info, void* ucontext) {
  GuardedRead& r = t_read;
  const auto* address = static_cast<const std::byte*>(info->si_addr);
  if (r.active && address >= r.begin && address < r.end) {
    r.active = 0;
    r.fault = address;
    siglongjmp(r.jump, 1);
  }
  // Not ours: behave as if we had never been installed.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(signal, info, ucontext);
  } else if (g_previous.sa_handler == SIG_IGN) {
    return;
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != nullptr) {
    return g_previous.sa_handler(signal);
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(SIGBUS, &fallback, nullptr);
  ::raise(SIGBUS);  // the default action (core dump) on return from this handler, as without us
}

void install_handler_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;  // NODEFER: a later fault after siglongjmp still arrives
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

Status guarded_mapped_read(std::span<const std::byte> range, std::string_view path, std::uint64_t file_offset,
                           MappedReadFn read, void* context) {
  install_handler_once();
  GuardedRead& r = t_read;
  if (r.active) return fail(Error(Errc::kInternal, "guarded_mapped_read is not reentrant"));
  r.begin = range.data();
  r.end = range.data() + range.size();
  r.fault = nullptr;
  // savemask = 1: the handler runs with SIGBUS blocked unless NODEFER; restore the mask anyway.
  if (sigsetjmp(r.jump, 1) == 0) {
    r.active = 1;
    read(context);
    r.active = 0;
    return {};
  }
  const auto offset = file_offset + static_cast<std::uint64_t>(r.fault - r.begin);
  return fail(Error(Errc::kFileChanged,
                    "the file shrank while qload read it through a mapping (SIGBUS): it was truncated or "
                    "replaced during the load")
                  .with_file(std::string(path))
                  .with_offset(offset));
}

}  // namespace qload
