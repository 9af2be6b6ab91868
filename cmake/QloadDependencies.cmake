# Third-party libraries, all from Debian packages (see setup.sh).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)

pkg_check_modules(URING REQUIRED liburing>=2.0)
pkg_check_modules(LUAJIT REQUIRED luajit>=2.1)
pkg_check_modules(CRYPTO REQUIRED libcrypto>=3.0)  # OpenSSL's: HMAC-SHA256 for the rendezvous
pkg_check_modules(RE2 REQUIRED re2)  # regular expressions from checkpoints' configs: linear time, bounded memory

# liburing, LuaJIT, libcrypto and RE2: shared by default, the Debian static archives with QLOAD_STATIC.
function(qload_import_pkg target pkg static_name)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  target_include_directories(${target} INTERFACE ${${pkg}_INCLUDE_DIRS})
  if(QLOAD_STATIC)
    # Executables take the static archive; a shared library (libqload.so, the Python module) cannot hold
    # Debian's non-PIC archives, so it keeps linking the shared one.
    find_library(${pkg}_STATIC_LIB NAMES ${static_name} HINTS ${${pkg}_LIBRARY_DIRS} REQUIRED)
    set(shared_link "-L${${pkg}_LIBRARY_DIRS}" ${${pkg}_LIBRARIES})
    target_link_libraries(${target} INTERFACE
      "$<IF:$<OR:$<STREQUAL:$<TARGET_PROPERTY:TYPE>,SHARED_LIBRARY>,$<STREQUAL:$<TARGET_PROPERTY:TYPE>,MODULE_LIBRARY>>,${shared_link},${${pkg}_STATIC_LIB}>")
  else()
    target_link_directories(${target} INTERFACE ${${pkg}_LIBRARY_DIRS})
    target_link_libraries(${target} INTERFACE ${${pkg}_LIBRARIES})
  endif()
endfunction()
qload_import_pkg(qload::uring URING liburing.a)
qload_import_pkg(qload::luajit LUAJIT libluajit-5.1.a)
qload_import_pkg(qload::crypto CRYPTO libcrypto.a)
qload_import_pkg(qload::re2 RE2 libre2.a)
if(QLOAD_STATIC)
  target_link_libraries(qload::luajit INTERFACE ${CMAKE_DL_LIBS} m)
  target_link_libraries(qload::crypto INTERFACE ${CMAKE_DL_LIBS} Threads::Threads)
  target_link_libraries(qload::re2 INTERFACE Threads::Threads)
endif()

# Gloo (libgloo-dev): host memory between the processes of a load (distributed/). Debian ships it as a
# shared library only, so a static build (QLOAD_STATIC: for machines with nothing installed) goes
# without it and refuses to move host memory between processes, by name.
set(QLOAD_HAVE_GLOO OFF)
if(NOT QLOAD_STATIC)
  find_package(Gloo CONFIG QUIET)
  if(TARGET gloo)
    set(QLOAD_HAVE_GLOO ON)
  endif()
endif()

# xxHash is used header-only (XXH_INLINE_ALL): nothing to link, nothing to carry.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
add_library(qload::xxhash INTERFACE IMPORTED GLOBAL)
target_include_directories(qload::xxhash INTERFACE ${XXHASH_INCLUDE_DIR})
target_compile_definitions(qload::xxhash INTERFACE XXH_INLINE_ALL)

if(QLOAD_STATIC)
  add_link_options(-static-libstdc++ -static-libgcc)
endif()
