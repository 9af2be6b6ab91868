// qload's errors as Python exceptions: qload.Error and one subclass per Errc, each also a
// subclass of the builtin a Python caller would catch (ValueError for bad arguments,
// FileNotFoundError, MemoryError, ...), carrying code, file, tensor and offset.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "qload/runtime/error.hpp"

namespace qload::python {

namespace nb = nanobind;

// Each Errc's class, and the builtin it also derives from (none: just qload.Error). The
// classes live on the module (no C++ state holds them); raise() looks them up by name.
struct ErrorClass {
  Errc code;
  const char* name;
  PyObject* builtin;
};
inline const ErrorClass* error_classes(std::size_t* count) {
  static const ErrorClass classes[] = {
      {Errc::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {Errc::kNotFound, "NotFoundError", PyExc_FileNotFoundError},
      {Errc::kPermissionDenied, "PermissionDeniedError", PyExc_PermissionError},
      {Errc::kIo, "IoError", PyExc_OSError},
      {Errc::kTruncated, "TruncatedError", nullptr},
      {Errc::kOutOfMemory, "OutOfMemoryError", PyExc_MemoryError},
      {Errc::kUnsupported, "UnsupportedError", nullptr},
      {Errc::kCorrupt, "CorruptError", nullptr},
      {Errc::kChecksumMismatch, "ChecksumMismatchError", nullptr},
      {Errc::kOverflow, "OverflowError", PyExc_OverflowError},
      {Errc::kFileChanged, "FileChangedError", nullptr},
      {Errc::kCancelled, "CancelledError", nullptr},
      {Errc::kDevice, "DeviceError", nullptr},
      {Errc::kInternal, "InternalError", nullptr},
  };
  *count = std::size(classes);
  return classes;
}

inline nb::object make_exception(nb::module_& m, const char* name, nb::handle bases, const char* doc) {
  const std::string qualified = std::string("qload.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw nb::python_error();
  nb::object t = nb::steal(type);
  m.attr(name) = t;
  return t;
}

inline void register_errors(nb::module_& m) {
  const nb::object base =
      make_exception(m, "Error", PyExc_RuntimeError,
                     "A qload error. Attributes: code (str), file, tensor (str or None), offset (int or None).");
  std::size_t count = 0;
  const ErrorClass* classes = error_classes(&count);
  for (std::size_t i = 0; i < count; ++i) {
    const ErrorClass& c = classes[i];
    nb::object bases = c.builtin != nullptr ? nb::object(nb::make_tuple(base, nb::handle(c.builtin)))
                                            : nb::object(nb::make_tuple(base));
    make_exception(m, c.name, bases, nullptr);
  }
}

[[noreturn]] inline void raise(const Error& e, nb::object written = nb::none()) {
  std::size_t count = 0;
  const ErrorClass* classes = error_classes(&count);
  const char* name = "Error";
  for (std::size_t i = 0; i < count; ++i)
    if (classes[i].code == e.code()) name = classes[i].name;
  const nb::object type = nb::module_::import_("qload._qload").attr(name);
  nb::object value = type(e.to_string());
  value.attr("code") = std::string(errc_name(e.code()));
  value.attr("file") = e.file() ? nb::object(nb::str(e.file()->data(), e.file()->size())) : nb::none();
  value.attr("tensor") = e.tensor() ? nb::object(nb::str(e.tensor()->data(), e.tensor()->size())) : nb::none();
  value.attr("offset") = e.offset() ? nb::object(nb::int_(*e.offset())) : nb::none();
  if (!written.is_none()) value.attr("written") = written;  // load_into: the destinations complete
  PyErr_SetObject(type.ptr(), value.ptr());
  throw nb::python_error();
}

template <typename T>
T unwrap(Result<T> r) {
  if (!r) raise(r.error());
  return std::move(*r);
}

}  // namespace qload::python
