#!/usr/bin/env bash
# The Fashion-MNIST demo across MPI processes: builds train_fashion_mnist (with MPI, which
# install_deps.sh installs) and runs it under mpirun with one worker per process:
#
#   scripts/run_demo_mpi.sh [PROCESSES] [demo options...]     (default: 4 processes)
#
# e.g. scripts/run_demo_mpi.sh 4 --modes dense,dgc. The results are the simulated run's with as
# many workers (scripts/run_demo.sh --workers PROCESSES), bit for bit; ctest's demo.mpi checks it.
# Results go to $BUILD_DIR/demo_mpi.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
processes=4
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
  processes="$1"
  shift
fi

# shellcheck source=mpi_build.sh
source "$script_dir/mpi_build.sh"
mpi_build train_fashion_mnist -DGRADCOMP_BUILD_EXAMPLES=ON
out_dir="$build_dir/demo_mpi"
mkdir -p "$out_dir"
cd "$out_dir"
exec mpirun -np "$processes" "$build_dir/examples/train_fashion_mnist" --mpi "$@"
