#!/usr/bin/env bash
# Regenerates the comparison of docs/compressors.md: builds the Fashion-MNIST demo and
# bench_compressors, runs the demo with 4 workers (5 epochs) and with 8 (--full: 12 epochs), every
# mode, and the benchmark (5 repetitions, medians), then writes the table into docs/compressors.md
# and the plot into docs/images/compressors.png (scripts/compressors_table.py), and the demo's
# per-epoch plots into docs/images/fashion_mnist_{4,8}_workers.png. The demo's tables (the ones in
# README.md and docs/fashion_mnist.md) are in $BUILD_DIR/compressors/demo_{4,8}_workers.txt.
# It trains every mode twice, then benchmarks; run it on a quiet machine, the speeds are measured.
#
# Environment:
#   BUILD_DIR   build directory (default: build, next to this script's parent)
# The raw results stay in $BUILD_DIR/compressors.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

"$script_dir/install_deps.sh" >&2
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_EXAMPLES=ON \
  -DGRADCOMP_BUILD_BENCHMARKS=ON >&2
cmake --build "$build_dir" --target train_fashion_mnist bench_compressors -j"$jobs" >&2

out="$build_dir/compressors"
mkdir -p "$out"
cd "$out"
"$build_dir/examples/train_fashion_mnist" --summary-json summary_4_workers.json --csv epochs_4_workers.csv |
  tee demo_4_workers.txt
"$build_dir/examples/train_fashion_mnist" --full --summary-json summary_8_workers.json --csv epochs_8_workers.csv |
  tee demo_8_workers.txt
"$build_dir/bench/bench_compressors" --benchmark_min_time=0.5 --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_out=bench_compressors.json \
  --benchmark_out_format=json >/dev/null
# The system's python3 first (Debian's python3-matplotlib is installed for it).
python=python3
if /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; then python=/usr/bin/python3; fi
"$python" "$script_dir/compressors_table.py" --summary4 summary_4_workers.json --summary8 summary_8_workers.json \
  --bench bench_compressors.json --markdown "$root/docs/compressors.md" --plot "$root/docs/images/compressors.png"
for workers in 4 8; do
  "$python" "$root/examples/fashion_mnist/plot_training.py" "epochs_${workers}_workers.csv" \
    -o "$root/docs/images/fashion_mnist_${workers}_workers.png"
done
