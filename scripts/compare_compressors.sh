#!/usr/bin/env bash
# Measures every result behind the demo's tables and writes the tables: builds the Fashion-MNIST
# demo and bench_compressors, runs every command of scripts/demo_tables.py --list (the demo with 4
# workers, 5 epochs; with 8, --full: 12 epochs; the ablations of docs/fashion_mnist.md) and the
# benchmark (5 repetitions, medians), all into docs/results/demo/, then writes the tables of
# README.md, docs/fashion_mnist.md and docs/compressors.md (scripts/demo_tables.py --write) and the
# plots docs/images/compressors.png and fashion_mnist_{4,8}_workers.png. The speeds are measured:
# run it on a quiet machine. The demo's figures are the same on every x86-64 machine.
#
# Environment:
#   BUILD_DIR   build directory (default: build, next to this script's parent)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"

"$script_dir/install_deps.sh" >&2
# shellcheck source=scripts/build_env.sh
source "$script_dir/build_env.sh"
configure_args=()
gradcomp_generator_args configure_args "$build_dir"
gradcomp_launcher_args configure_args
cmake -S "$root" -B "$build_dir" "${configure_args[@]}" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_EXAMPLES=ON \
  -DGRADCOMP_BUILD_BENCHMARKS=ON >&2
cmake --build "$build_dir" --target train_fashion_mnist bench_compressors -j"$jobs" >&2

# The system's python3 first (Debian's python3-matplotlib is installed for it).
python=python3
if /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; then python=/usr/bin/python3; fi
results="$root/docs/results/demo"
"$python" "$script_dir/demo_tables.py" --measure "$build_dir"
"$build_dir/bench/bench_compressors" --benchmark_min_time=0.5 --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=json \
  --benchmark_out="$results/bench_compressors.json" --benchmark_out_format=json >/dev/null
"$python" "$script_dir/demo_tables.py" --write
"$python" - "$script_dir" "$results" "$root/docs/images/compressors.png" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import compressors_table
s4, order = compressors_table.load_summary(sys.argv[2] + "/summary_4_workers.json")
s8, _ = compressors_table.load_summary(sys.argv[2] + "/summary_8_workers.json")
compressors_table.plot(sys.argv[3], s4, s8, order)
PY
for workers in 4 8; do
  "$python" "$root/examples/fashion_mnist/plot_training.py" "$results/summary_${workers}_workers.csv" \
    -o "$root/docs/images/fashion_mnist_${workers}_workers.png"
done
echo "results: $results; tables: README.md docs/fashion_mnist.md docs/compressors.md"
