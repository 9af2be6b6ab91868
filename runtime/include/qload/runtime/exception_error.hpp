// Where an exception meets a boundary it must not cross (a worker thread's job, a task's body),
// it becomes an Error. Defined in error.cpp.
#pragma once

#include <exception>
#include <string_view>

#include "qload/runtime/error.hpp"

namespace qload {

// kOutOfMemory for std::bad_alloc, kInternal otherwise (qload reports errors as values, so any
// other exception is a bug), the message naming `where`, the exception's type and what().
// `exception` must not be null.
Error error_from_exception(const std::exception_ptr& exception, std::string_view where);

}  // namespace qload
