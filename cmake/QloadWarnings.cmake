# Warning flags for qload's own C++ targets (not for CUDA device code or third-party headers).
add_library(qload_warnings INTERFACE)
target_compile_options(qload_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wold-style-cast -Wcast-align -Wimplicit-fallthrough -Wformat=2
    # designated initializers deliberately leave fields at their defaults
    -Wno-missing-field-initializers>
  $<$<AND:$<BOOL:${QLOAD_WERROR}>,$<COMPILE_LANGUAGE:CXX>>:-Werror>)
