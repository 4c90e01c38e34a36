# ctest driver of a tiny train_fashion_mnist run (test demo.tiny_run): runs the demo on a small
# subset of the real data with every mode, then checks the exit status, the table, the summary
# JSON (one object per mode with the documented keys) and the per-epoch CSV; with PYTHON set,
# also turns the CSV into a PNG with plot_training.py.
#
# TRAIN_LIMIT (default 2048) sets the training images, TEST_LIMIT (default 1000) the test images;
# MIN_ACCURACY (default 0.5) each mode's least test accuracy, which the sanitizer build, whose
# run is about memory and undefined behaviour, sets to 0 on fewer images (the optimised build
# checks the accuracy).
#
#   cmake -DDEMO=<train_fashion_mnist> -DWORKDIR=<dir> [-DPYTHON=<python3> -DPLOT=<script>]
#         [-DTRAIN_LIMIT=<n>] [-DTEST_LIMIT=<n>] [-DMIN_ACCURACY=<a>] -P check_demo.cmake
foreach(_var DEMO WORKDIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check_demo.cmake: ${_var} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORKDIR}")
file(MAKE_DIRECTORY "${WORKDIR}")

set(_workers 2)
set(_epochs 2)
if(NOT DEFINED TRAIN_LIMIT)
  set(TRAIN_LIMIT 2048)
endif()
if(NOT DEFINED TEST_LIMIT)
  set(TEST_LIMIT 1000)
endif()
if(NOT DEFINED MIN_ACCURACY)
  set(MIN_ACCURACY 0.5)
endif()
execute_process(
  COMMAND "${DEMO}" --train-limit ${TRAIN_LIMIT} --test-limit ${TEST_LIMIT} --workers ${_workers} --epochs ${_epochs}
          --warmup-epochs 0.5 --summary-json summary.json --csv epochs.csv
  WORKING_DIRECTORY "${WORKDIR}"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "train_fashion_mnist exited with ${_rc}")
endif()

# Every mode of the registry, as the demo lists them.
execute_process(COMMAND "${DEMO}" --list-modes RESULT_VARIABLE _lrc OUTPUT_VARIABLE _listed)
if(NOT _lrc EQUAL 0)
  message(FATAL_ERROR "train_fashion_mnist --list-modes exited with ${_lrc}")
endif()
string(REGEX MATCHALL "(^|\n)[a-z0-9_]+" _names "${_listed}")
set(_modes "")
foreach(_n IN LISTS _names)
  string(STRIP "${_n}" _n)
  list(APPEND _modes "${_n}")
endforeach()
if(NOT _modes)
  message(FATAL_ERROR "train_fashion_mnist --list-modes printed no mode")
endif()
foreach(_mode IN LISTS _modes)
  if(NOT _out MATCHES "\n${_mode} +[0-9.]+% +[0-9.]+%")
    message(FATAL_ERROR "no table row for mode ${_mode}")
  endif()
endforeach()

# The summary: a JSON array with one object per mode, in the order given.
file(READ "${WORKDIR}/summary.json" _json)
string(JSON _count ERROR_VARIABLE _jerr LENGTH "${_json}")
if(_jerr)
  message(FATAL_ERROR "summary.json is not valid JSON: ${_jerr}")
endif()
list(LENGTH _modes _nmodes)
if(NOT _count EQUAL _nmodes)
  message(FATAL_ERROR "summary.json holds ${_count} objects, expected ${_nmodes}")
endif()
math(EXPR _last "${_count} - 1")
foreach(_i RANGE ${_last})
  list(GET _modes ${_i} _mode)
  foreach(_key mode workers final_sparsity test_accuracy wire_bytes_per_step compression_ratio)
    string(JSON _value ERROR_VARIABLE _jerr GET "${_json}" ${_i} ${_key})
    if(_jerr)
      message(FATAL_ERROR "summary.json object ${_i}: key ${_key} missing (${_jerr})")
    endif()
    set(_v_${_key} "${_value}")
  endforeach()
  if(NOT _v_mode STREQUAL _mode OR NOT _v_workers EQUAL _workers)
    message(FATAL_ERROR "summary.json object ${_i}: mode ${_v_mode}, workers ${_v_workers}")
  endif()
  if(_mode STREQUAL "dense")
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio GREATER 1)
      message(FATAL_ERROR "dense: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode STREQUAL "ef_signsgd" OR _mode STREQUAL "saef_sign")
    # One bit per element plus headers: about 32x, never sparse.
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio LESS 30)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode STREQUAL "terngrad")
    # Two bits per element plus headers: about 16x, never sparse.
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio LESS 15)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode STREQUAL "onebit_sgd")
    # One bit per element plus two values per column and headers: about 27x, never sparse.
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio LESS 25)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode STREQUAL "qsgd")
    # About 3 bits per element (at most 5) plus a norm per bucket and headers, never sparse.
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio LESS 6)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode STREQUAL "adacomp")
    # No target density: each bin sends what reaches its largest residual (a few per bin of 500).
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio LESS 20)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode MATCHES "^powersgd_r([0-9]+)$")
    # Rank r factors of the weight matrices, the biases whole: 168x at rank 1 to 53x at rank 4.
    math(EXPR _least "160 / ${CMAKE_MATCH_1}")
    if(_v_compression_ratio LESS _least)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_mode STREQUAL "isgq")
    # The weight matrices as their factors over the batch of 32, 3 bits per element: about 67x.
    if(NOT _v_final_sparsity EQUAL 0 OR _v_compression_ratio LESS 60)
      message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
    endif()
  elseif(_v_final_sparsity LESS 0.99899 OR _v_final_sparsity GREATER 0.99901 OR _v_compression_ratio LESS 500)
    message(FATAL_ERROR "${_mode}: sparsity ${_v_final_sparsity}, ratio ${_v_compression_ratio}")
  endif()
  if(_v_test_accuracy LESS MIN_ACCURACY)
    message(FATAL_ERROR "${_mode}: test accuracy ${_v_test_accuracy}")
  endif()
endforeach()

# The CSV: a header and one row per mode and epoch.
file(STRINGS "${WORKDIR}/epochs.csv" _rows)
list(LENGTH _rows _nrows)
math(EXPR _expected "${_nmodes} * ${_epochs} + 1")
list(GET _rows 0 _header)
if(NOT _nrows EQUAL _expected OR NOT _header MATCHES "^mode,workers,epoch,.*test_accuracy,.*wire_bytes_per_step")
  message(FATAL_ERROR "epochs.csv: ${_nrows} lines (expected ${_expected}), header '${_header}'")
endif()

if(DEFINED PYTHON AND NOT PYTHON STREQUAL "")
  execute_process(COMMAND "${PYTHON}" "${PLOT}" epochs.csv -o plot.png
                  WORKING_DIRECTORY "${WORKDIR}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${WORKDIR}/plot.png")
    message(FATAL_ERROR "plot_training.py failed (${_rc})")
  endif()
  file(READ "${WORKDIR}/plot.png" _magic LIMIT 8 HEX)
  if(NOT _magic STREQUAL "89504e470d0a1a0a")
    message(FATAL_ERROR "plot.png is not a PNG file")
  endif()
  message("plot: ${WORKDIR}/plot.png")
endif()
message("demo output checked")
