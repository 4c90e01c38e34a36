#!/usr/bin/env bash
# Builds and runs one gradcomp example. Arguments are passed to the example.
#   scripts/run_demo.sh
#   DEMO_TARGET=<example name> scripts/run_demo.sh [args...]
#
# Environment:
#   DEMO_TARGET  example to run (default: compress_synthetic_model)
#   BUILD_DIR    build directory (default: build, next to this script's parent)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
demo_target="${DEMO_TARGET:-compress_synthetic_model}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

"$script_dir/install_deps.sh" >&2

cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_EXAMPLES=ON >&2
cmake --build "$build_dir" --target "$demo_target" -j"$jobs" >&2

exec "$build_dir/examples/$demo_target" "$@"
