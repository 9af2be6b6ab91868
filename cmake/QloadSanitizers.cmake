# QLOAD_SANITIZE: the sanitizers of the checking build (tests/sanitize.sh: "address,undefined"
# with clang), which also builds the fuzz targets.
set(QLOAD_SANITIZE "" CACHE STRING "Build with these sanitizers, e.g. address,undefined (clang)")
option(QLOAD_FUZZ "Build the libFuzzer targets in fuzz/ (clang)" OFF)
if(QLOAD_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "QLOAD_FUZZ needs clang (libFuzzer): CC=clang-16 CXX=clang++-16")
endif()

# clang before 19 with libstdc++ 12: clang predefines __cpp_concepts as 201907L and libstdc++
# 12 hides std::expected below 202002L, though clang 16 compiles what <expected> needs.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 19)
  if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 16)
    message(FATAL_ERROR "clang ${CMAKE_CXX_COMPILER_VERSION} cannot build qload (std::expected, "
                        "std::source_location): use clang 16 or later (Debian: clang-16)")
  endif()
  string(APPEND CMAKE_CXX_FLAGS " -U__cpp_concepts -D__cpp_concepts=202002L")
endif()

if(QLOAD_SANITIZE)
  foreach(lang C CXX)
    string(APPEND CMAKE_${lang}_FLAGS
           " -fsanitize=${QLOAD_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined")
  endforeach()
  foreach(kind EXE SHARED MODULE)
    string(APPEND CMAKE_${kind}_LINKER_FLAGS " -fsanitize=${QLOAD_SANITIZE}")
  endforeach()
  # ThreadSanitizer (tests/tsan.sh): the multi-versioned loops go single-version under it.
  if(QLOAD_SANITIZE MATCHES "thread")
    add_compile_definitions(QLOAD_HAS_TSAN=1)
  endif()
endif()

# Coverage instrumentation for libFuzzer in every library, so the fuzz targets link the same
# sanitized libraries the tests run against.
if(QLOAD_FUZZ)
  foreach(lang C CXX)
    string(APPEND CMAKE_${lang}_FLAGS " -fsanitize=fuzzer-no-link")
  endforeach()
endif()
