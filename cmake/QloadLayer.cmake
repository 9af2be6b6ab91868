# qload_layer(NAME SOURCES ... DEPS ...): one static library per layer, public headers under
# <layer>/include/qload/<layer>/, private sources under <layer>/src/.
function(qload_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(qload_${name} STATIC ${ARG_SOURCES})
  add_library(qload::${name} ALIAS qload_${name})
  target_include_directories(qload_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
                                           PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(qload_${name} PUBLIC ${ARG_DEPS} PRIVATE qload_warnings ${ARG_PRIVATE_DEPS})
  qload_header_check(${name})
  # The layer's private headers (src/), for its own tests, fuzzers and benchmarks only: one
  # declared door instead of each of them reaching in by path. No product target links it
  # (tests/style/check_layers.sh).
  add_library(qload_${name}_internal INTERFACE)
  add_library(qload::${name}_internal ALIAS qload_${name}_internal)
  target_include_directories(qload_${name}_internal INTERFACE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(qload_${name}_internal INTERFACE qload_${name})
endfunction()

# Compiles every public header of a layer on its own, so each one includes what it uses.
function(qload_header_check name)
  file(GLOB_RECURSE headers RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/include
       CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/include/*.hpp)
  set(sources)
  foreach(h IN LISTS headers)
    string(MAKE_C_IDENTIFIER ${h} id)
    set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cpp)
    file(CONFIGURE OUTPUT ${src} CONTENT "#include \"${h}\"\n")
    list(APPEND sources ${src})
  endforeach()
  if(sources)
    add_library(qload_${name}_header_check OBJECT ${sources})
    target_link_libraries(qload_${name}_header_check PRIVATE qload_${name} qload_warnings)
  endif()
endfunction()
