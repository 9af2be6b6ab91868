// The write side of qload._qload (write.cpp), registered by module.cpp.
#pragma once

#include <nanobind/nanobind.h>

namespace qload::python {

// Adds safetensors_header() and write_safetensors() to the module.
void bind_write(nanobind::module_& m);

}  // namespace qload::python
