# CUDA and NCCL detection. QLOAD_CUDA=AUTO builds CUDA support when a toolkit is found, ON
# requires it, OFF skips it. Device code is built for sm_80 (A100) and sm_90 (H100/H200).
# cudart is always linked statically, so a CUDA build still starts on a machine with no
# driver; NCCL is opened at run time (dlopen) for the same reason.
# QLOAD_CUDA_SIM=ON builds every GPU path against the simulated runtime in cudasim/ instead
# (no nvcc: the .cu files compile as host C++), so CI runs them without a GPU.
option(QLOAD_CUDA_SIM "Build the GPU paths against the simulated CUDA runtime (cudasim/), for tests" OFF)
set(QLOAD_HAVE_CUDA OFF)
set(QLOAD_HAVE_NCCL OFF)
if(QLOAD_CUDA_SIM)
  set(QLOAD_HAVE_CUDA ON)
  set(CUDAToolkit_INCLUDE_DIRS "")
  # NCCL too: the simulated libnccl.so.2 (cudasim/src/nccl), opened at run time like the real one.
  set(QLOAD_HAVE_NCCL ON)
  set(NCCL_INCLUDE_DIR ${PROJECT_SOURCE_DIR}/cudasim/include)
elseif(NOT QLOAD_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(QLOAD_HAVE_CUDA ON)
  elseif(QLOAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "QLOAD_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

if(QLOAD_HAVE_CUDA AND NOT QLOAD_CUDA_SIM)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(NCCL_INCLUDE_DIR)
    set(QLOAD_HAVE_NCCL ON)
  endif()
endif()

# CUDA sources (.cu): compiled by nvcc, or as host C++ against the simulated runtime.
function(qload_cuda_sources)
  if(QLOAD_CUDA_SIM)
    set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTIES LANGUAGE CXX
                                COMPILE_OPTIONS "-xc++")
  endif()
endfunction()
