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

"$script_dir/install_deps.sh" >&2

cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_EXAMPLES=ON -DGRADCOMP_ENABLE_MPI=ON >&2
cmake --build "$build_dir" --target train_fashion_mnist -j"$jobs" >&2

# Open MPI: more processes than cores are allowed here, and so is root (a container's usual user).
export OMPI_MCA_rmaps_base_oversubscribe=1
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
out_dir="$build_dir/demo_mpi"
mkdir -p "$out_dir"
cd "$out_dir"
exec mpirun -np "$processes" "$build_dir/examples/train_fashion_mnist" --mpi "$@"
