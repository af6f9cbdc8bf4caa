# Enforces two layer rules of docs/design.md:
#  - the runtime never links MLIR or LLVM: it has to run where they are absent
#    (a GPU machine, a carried working tree);
#  - the runtime core (plan, executor, checkpoint, data, trainer) links no
#    device library (oneDNN, OpenMP, CUDA, cuDNN, cuBLAS, NCCL): it sees
#    devices only through runtime/backend.h, and each backend is its own target.
#
# Runtime targets are declared with graphc_runtime_target(<target>), core targets
# also with graphc_core_target(<target>); graphc_check_runtime_deps() runs at the end
# of the top-level CMakeLists.txt, walks every declared target's link closure and
# include directories, and stops the configure step with FATAL_ERROR when it finds
# a forbidden item there.

define_property(GLOBAL PROPERTY GRAPHC_RUNTIME_TARGETS
  BRIEF_DOCS "Targets that belong to the runtime"
  FULL_DOCS "Targets that must not depend on MLIR or LLVM")

define_property(GLOBAL PROPERTY GRAPHC_CORE_TARGETS
  BRIEF_DOCS "Targets that belong to the runtime core"
  FULL_DOCS "Targets that must not depend on a device library")

function(graphc_runtime_target target)
  set_property(GLOBAL APPEND PROPERTY GRAPHC_RUNTIME_TARGETS ${target})
endfunction()

function(graphc_core_target target)
  set_property(GLOBAL APPEND PROPERTY GRAPHC_CORE_TARGETS ${target})
endfunction()

define_property(GLOBAL PROPERTY GRAPHC_CONTRACT_TARGETS
  BRIEF_DOCS "Targets of contract/"
  FULL_DOCS "Targets compiler and runtime share: they link neither side")

function(graphc_contract_target target)
  set_property(GLOBAL APPEND PROPERTY GRAPHC_CONTRACT_TARGETS ${target})
endfunction()

# True when a link item or include directory is a device library or a backend.
function(_graphc_is_device_library item out)
  string(TOLOWER "${item}" lower)
  if(item MATCHES "^(CUDA::|OpenMP::)" OR item MATCHES "^graphc_backend"
     OR lower MATCHES "(^|[/-])(lib)?(dnnl|gomp|iomp5|cuda|cudart|cudnn|cublas|cublaslt|nccl)([._-]|$)"
     OR lower MATCHES "(^|/)cuda(-[0-9.]+)?/" OR lower MATCHES "(^|[ ;])-f?openmp")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# True when a link item or include directory names MLIR or LLVM.
function(_graphc_is_mlir_or_llvm item out)
  string(TOLOWER "${item}" lower)
  if(item MATCHES "^(MLIR|LLVM)" OR lower MATCHES "(^|[/-])(lib)?(mlir|llvm)"
     OR lower MATCHES "/llvm-[0-9]+/")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Sets <out> to the path to the first item in <target>'s link closure for which
# <predicate> (one of the two functions above) is true.
function(_graphc_find_forbidden predicate target path out)
  set(${out} "" PARENT_SCOPE)
  if(NOT TARGET ${target})
    return()
  endif()
  get_target_property(type ${target} TYPE)
  set(items)
  set(includes)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(libs ${target} LINK_LIBRARIES)
    get_target_property(incs ${target} INCLUDE_DIRECTORIES)
    list(APPEND items ${libs})
    list(APPEND includes ${incs})
  endif()
  get_target_property(ilibs ${target} INTERFACE_LINK_LIBRARIES)
  get_target_property(iincs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  list(APPEND items ${ilibs})
  list(APPEND includes ${iincs})
  list(FILTER items EXCLUDE REGEX "-NOTFOUND$")
  list(FILTER includes EXCLUDE REGEX "-NOTFOUND$")
  foreach(inc IN LISTS includes)
    cmake_language(CALL ${predicate} "${inc}" bad)
    if(bad)
      set(${out} "${path} -> include dir ${inc}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  foreach(item IN LISTS items)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    cmake_language(CALL ${predicate} "${item}" bad)
    if(bad)
      set(${out} "${path} -> ${item}" PARENT_SCOPE)
      return()
    endif()
    if(TARGET ${item})
      _graphc_find_forbidden(${predicate} ${item} "${path} -> ${item}" found)
      if(found)
        set(${out} "${found}" PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
endfunction()

function(graphc_check_runtime_deps)
  get_property(targets GLOBAL PROPERTY GRAPHC_RUNTIME_TARGETS)
  foreach(target IN LISTS targets)
    _graphc_find_forbidden(_graphc_is_mlir_or_llvm ${target} ${target} found)
    if(found)
      message(FATAL_ERROR
        "runtime target depends on MLIR/LLVM (${found}); the runtime must build "
        "and run without them (docs/design.md)")
    endif()
  endforeach()
  list(LENGTH targets n)
  message(STATUS "graphc: ${n} runtime target(s) checked free of MLIR/LLVM")
  get_property(core GLOBAL PROPERTY GRAPHC_CORE_TARGETS)
  foreach(target IN LISTS core)
    _graphc_find_forbidden(_graphc_is_device_library ${target} ${target} found)
    if(found)
      message(FATAL_ERROR
        "runtime core target links a device library (${found}); the core reaches "
        "devices only through runtime/backend.h (docs/design.md)")
    endif()
  endforeach()
  list(LENGTH core n)
  message(STATUS "graphc: ${n} runtime core target(s) checked free of device libraries")
  # The contract is below both halves: it links no runtime or compiler target.
  get_property(contract GLOBAL PROPERTY GRAPHC_CONTRACT_TARGETS)
  foreach(target IN LISTS contract)
    _graphc_find_forbidden(_graphc_is_above_contract ${target} ${target} found)
    if(found)
      message(FATAL_ERROR
        "contract target links the compiler or the runtime (${found}); contract/ is what "
        "both share and stands below them")
    endif()
  endforeach()
endfunction()

# True when a link item is a runtime or compiler target (what contract/ must
# not reach).
function(_graphc_is_above_contract item out)
  if(item MATCHES "^graphc_" AND NOT item MATCHES "^graphc_(contract|plan_schema)$")
    set(${out} TRUE PARENT_SCOPE)
  elseif(item MATCHES "^Graphc")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()
