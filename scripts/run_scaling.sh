#!/usr/bin/env bash
# Measures one training step's exchange among 2, 4 and 8 MPI ranks on this machine
# (bench/mpi/bench_exchange.cpp: ResNet-50's DGC messages allgathered and aggregated, the dense
# MPI_Allreduce, PowerSGD's two rounds), writes the JSON to bench/results/scaling/exchange_<N>.json
# and powersgd_<N>.json and the tables
# of docs/scaling.md (scripts/scaling_table.py). Run it on a quiet machine: the times are measured.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

# shellcheck source=mpi_build.sh
source "$script_dir/mpi_build.sh"
mpi_build bench_exchange -DGRADCOMP_BUILD_BENCHMARKS=ON
out="$root/bench/results/scaling"
mkdir -p "$out"
# DGC and the dense sums in exchange_<N>.json, PowerSGD's two rounds in powersgd_<N>.json.
for ranks in 2 4 8; do
  mpirun -np "$ranks" "$build_dir/bench/bench_exchange" --benchmark_format=json \
    --benchmark_filter=-BM_powersgd --benchmark_out="$out/exchange_$ranks.json" --benchmark_out_format=json >/dev/null
  mpirun -np "$ranks" "$build_dir/bench/bench_exchange" --benchmark_format=json \
    --benchmark_filter=BM_powersgd --benchmark_out="$out/powersgd_$ranks.json" --benchmark_out_format=json >/dev/null
done
# The results name the benchmark, not where this machine built it.
sed -i -E 's|"executable": "[^"]*/([^"/]+)"|"executable": "\1"|' "$out"/exchange_*.json "$out"/powersgd_*.json
python3 "$script_dir/scaling_table.py" --results "$out" --markdown "$root/docs/scaling.md"
