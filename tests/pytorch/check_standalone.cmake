# examples/pytorch as a project of its own, as the README builds it (cmake -S examples/pytorch -B
# build-pytorch && cmake --build build-pytorch): it configures against the gradcomp source tree
# beside it, builds the extension, and the package it leaves imports with every method. Configured
# without a build type, as the README does, it must choose Release; the check then builds without
# optimisation (CMAKE_CXX_FLAGS_RELEASE empty): it is of the project, not of the code's speed, and
# the in-tree build already compiles the extension optimised.
#   cmake -DPYTHON=<python3> -DSOURCE_DIR=<repository root> -DWORKDIR=<dir> -DGENERATOR=<generator>
#         -P check_standalone.cmake
file(REMOVE_RECURSE "${WORKDIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/pytorch" -B "${WORKDIR}" -G "${GENERATOR}"
                        -DCMAKE_BUILD_TYPE= "-DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG" "-DPython3_EXECUTABLE=${PYTHON}"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "configuring examples/pytorch on its own failed:\n${_out}${_err}")
endif()
file(STRINGS "${WORKDIR}/CMakeCache.txt" _build_type REGEX "^CMAKE_BUILD_TYPE:")
if(NOT _build_type MATCHES "=Release$")
  message(FATAL_ERROR "examples/pytorch configured without a build type must choose Release, has '${_build_type}'")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "building examples/pytorch on its own failed:\n${_out}${_err}")
endif()
set(ENV{PYTHONPATH} "${WORKDIR}:${SOURCE_DIR}/examples/pytorch")
set(ENV{PYTHONDONTWRITEBYTECODE} 1)
execute_process(COMMAND "${PYTHON}" -c [=[
import os, sys
import gradcomp_torch
where = os.path.dirname(gradcomp_torch._core.__file__)
assert os.path.realpath(where).startswith(os.path.realpath(sys.argv[1])), where
names = sorted(gradcomp_torch.methods())
assert names == ["adacomp", "dense", "dgc", "ef_signsgd", "onebit_sgd", "powersgd", "qsgd", "terngrad", "topk"], names
gradcomp_torch.State("dgc", density=0.01)
print("gradcomp_torch from", where, "with", ", ".join(names))
]=] "${WORKDIR}" WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "the package built on its own does not import:\n${_out}${_err}")
endif()
message(STATUS "${_out}")
