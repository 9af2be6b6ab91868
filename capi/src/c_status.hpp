// How every C entry point answers: a status, and this thread's error text for qload_last_error.
// No C++ exception crosses the ABI: guarded() turns them into statuses.
#pragma once

#include <exception>
#include <new>
#include <string>

#include <fmt/format.h>

#include "qload/qload.h"
#include "qload/runtime/error.hpp"

namespace qload::capi {

// The calling thread's last error ("" if none).
std::string& last_error();

qload_status status_of(Errc code) noexcept;

// Records `error` (or `message`) as this thread's last error and returns its status.
qload_status failed(const Error& error);
qload_status failed(qload_status status, std::string message);

// Runs `body` with the thread's error cleared; exceptions (bad_alloc from a std::string, a
// bug) become statuses.
template <typename Body>
qload_status guarded(Body&& body) noexcept {
  try {
    last_error().clear();
    return body();
  } catch (const std::bad_alloc&) {
    return failed(QLOAD_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return failed(QLOAD_ERR_INTERNAL, fmt::format("internal error: {}", e.what()));
  } catch (...) {
    return failed(QLOAD_ERR_INTERNAL, "internal error");
  }
}

}  // namespace qload::capi
