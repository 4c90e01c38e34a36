#!/usr/bin/env bash
# Builds gradcomp with its tests, examples and benchmarks (warnings are
# errors) and runs the whole test suite. Extra arguments go to ctest, e.g.
#   scripts/run_tests.sh -R cxx17      # only the C++17 unit tests
#   scripts/run_tests.sh -L consumer   # only the consumer-project tests
#
# Environment:
#   BUILD_DIR            build directory (default: build, next to this script's parent)
#   GRADCOMP_CMAKE_ARGS  extra arguments for the configuration (CI: -DGRADCOMP_REQUIRE_NCCL_TESTS=ON)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

"$script_dir/install_deps.sh"

cmake -S "$root" -B "$build_dir" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGRADCOMP_BUILD_TESTS=ON \
  -DGRADCOMP_BUILD_EXAMPLES=ON \
  -DGRADCOMP_BUILD_BENCHMARKS=ON \
  -DGRADCOMP_WERROR=ON \
  -DGRADCOMP_REQUIRE_THRUST_TESTS=ON ${GRADCOMP_CMAKE_ARGS:-}
cmake --build "$build_dir" -j"$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs" "$@"
