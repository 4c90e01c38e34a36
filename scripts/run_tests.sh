#!/usr/bin/env bash
# Builds gradcomp with its tests, examples and benchmarks (warnings are
# errors) and runs the test suite, all of it but the arith.* builds (below). Extra arguments go to
# ctest instead, e.g.
#   scripts/run_tests.sh -R cxx17      # only the C++17 unit tests
#   scripts/run_tests.sh -L consumer   # only the consumer-project tests
#
# The build uses Ninja (Debian: ninja-build) and ccache where they are installed
# (scripts/install_deps.sh installs both), and nvcc compiles one GPU architecture: sm_90 where
# nvidia-smi lists a GPU; else every CUDA source is checked, not generated (below), since a
# machine without a GPU runs none of it. The library's own default, without this script, is 80
# and 90.
#
# Environment:
#   BUILD_DIR                  build directory (default: build, next to this script's parent)
#   GRADCOMP_CMAKE_ARGS        extra arguments for the configuration (CI: -DGRADCOMP_REQUIRE_NCCL_TESTS=ON)
#   GRADCOMP_CUDA_ARCHITECTURES  nvcc's architectures (default: 90 with a GPU, else 90-virtual)
#   GRADCOMP_CCACHE=0          do not compile through ccache
#   GRADCOMP_ARITH_TESTS=1     run the arith.* tests too (left out by default; .ci/run sets it, and
#                              ctest starts them first)
#   GRADCOMP_STAGE_TIMES       a file to which the configure, build and ctest times are appended
#                              ("<seconds>\t<stage>" lines, read by scripts/ci_times.py)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

"$script_dir/install_deps.sh"

# shellcheck source=scripts/build_env.sh
source "$script_dir/build_env.sh"
configure_args=()
gradcomp_generator_args configure_args "$build_dir"
gradcomp_launcher_args configure_args
cuda_architectures=90-virtual
# Without a GPU, nothing nvcc compiles runs here, so CUDA sources are compiled unoptimised on the
# host side (nvcc's -O sets the host compiler's level only), and the device side stops after the
# device front end (-fdevice-syntax-only: every kernel parsed, instantiated and checked with
# warnings as errors; no PTX, which only a GPU would run): tests/cuda/test_thrust_steps_cuda.cu
# compiles in 76 s instead of 99 s as unoptimised PTX (-Xcicc -O0), the two side by side on the
# 2-core machine. The same test sources run optimised through g++ (thrust.backend); on a GPU, and in
# scripts/gpu_check.sh, nvcc builds the real device code.
cuda_release_flags=(-DCMAKE_CUDA_FLAGS_RELEASE=-O0\ -DNDEBUG\ -fdevice-syntax-only)
if nvidia-smi -L >/dev/null 2>&1; then cuda_architectures=90 cuda_release_flags=(); fi

timed "tests: configure" cmake -S "$root" -B "$build_dir" "${configure_args[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGRADCOMP_BUILD_TESTS=ON \
  -DGRADCOMP_BUILD_EXAMPLES=ON \
  -DGRADCOMP_BUILD_BENCHMARKS=ON \
  -DGRADCOMP_WERROR=ON \
  -DGRADCOMP_REQUIRE_THRUST_TESTS=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=${GRADCOMP_CUDA_ARCHITECTURES:-$cuda_architectures}" \
  ${cuda_release_flags[@]+"${cuda_release_flags[@]}"} ${GRADCOMP_CMAKE_ARGS:-}
timed "tests: build" cmake --build "$build_dir" -j"$jobs"
# The arith.* tests build the bitwise tests twice more (for x86-64-v3 with contraction, and for
# aarch64 to run under qemu) and the libtorch trainer once more (with contraction, its fingerprints
# checked): a stage of its own in .ci/run. Without
# arguments this script leaves them out; `ctest --test-dir build -L arith` runs them, and
# GRADCOMP_ARITH_TESTS=1 runs them here too.
ctest_args=("$@")
if [[ $# -eq 0 && "${GRADCOMP_ARITH_TESTS:-0}" != 1 ]]; then ctest_args=(-LE '^arith$'); fi
timed "tests: ctest" ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" ${ctest_args[@]+"${ctest_args[@]}"}
