# Finds what the CUDA backend builds with: nvcc, the CUDA toolkit (cudart,
# cuBLAS), cuDNN and (optional) NCCL, in /usr/local/cuda where these machines
# have them.
# GRAPHC_CUDA=AUTO (default) builds the backend when all are found and says
# which one is missing otherwise; ON makes a missing one an error; OFF skips it.
# Sets GRAPHC_HAVE_CUDA and GRAPHC_HAVE_NCCL.

set(GRAPHC_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE GRAPHC_CUDA PROPERTY STRINGS AUTO ON OFF)
set(GRAPHC_HAVE_CUDA OFF)
set(GRAPHC_HAVE_NCCL OFF)

function(_graphc_cuda_missing what)
  if(GRAPHC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GRAPHC_CUDA=ON but ${what}")
  endif()
  message(STATUS "graphc: no CUDA backend: ${what}")
endfunction()

if(NOT GRAPHC_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_path(GRAPHC_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(GRAPHC_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(NOT CMAKE_CUDA_COMPILER)
    _graphc_cuda_missing("nvcc was not found (set CMAKE_CUDA_COMPILER)")
  elseif(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart OR NOT TARGET CUDA::cublas)
    _graphc_cuda_missing("the CUDA toolkit (cudart, cuBLAS) was not found")
  elseif(NOT GRAPHC_CUDNN_INCLUDE OR NOT GRAPHC_CUDNN_LIBRARY)
    _graphc_cuda_missing("cuDNN (cudnn.h, libcudnn) was not found")
  else()
    # The backend's own kernels: SASS for sm_80, SASS and PTX for sm_90 (newer
    # GPUs JIT the PTX). One shared cudart for the whole process.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(GRAPHC_HAVE_CUDA ON)
    message(STATUS "graphc: CUDA backend with CUDA ${CUDAToolkit_VERSION}, cuDNN ${GRAPHC_CUDNN_LIBRARY}")
    # NCCL for allreduces of device buffers: built against nccl.h, loaded
    # (libnccl.so.2) when a job uses it. Without the header a multi-rank
    # CUDA job stages its buckets through host memory and MPI.
    find_path(GRAPHC_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(GRAPHC_NCCL_INCLUDE)
      set(GRAPHC_HAVE_NCCL ON)
      message(STATUS "graphc: NCCL device collectives (${GRAPHC_NCCL_INCLUDE}/nccl.h)")
    else()
      set(GRAPHC_HAVE_NCCL OFF)
      message(STATUS "graphc: no nccl.h: multi-rank CUDA jobs stage through MPI")
    endif()
  endif()
endif()
