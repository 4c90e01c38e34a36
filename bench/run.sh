#!/usr/bin/env bash
# Builds the CPU benchmarks in Release, runs them with JSON output and writes a markdown summary
# and PNG charts (python3-matplotlib) under bench/results/:
#   bench/results/bench_select.json, bench_dgc.json   raw Google Benchmark output
#   bench/results/summary.md                          the target ratios and full tables
#   bench/results/selection.png, dgc_step.png         charts
#
#   bench/run.sh            full run (n up to 2^26; 15 to 20 minutes on 2 cores)
#   bench/run.sh --quick    n up to 2^20, shorter timings (to try the script)
#
# Environment:
#   BUILD_DIR    build directory (default: build-bench, next to this script's parent)
#   RESULTS_DIR  where results go (default: bench/results)
#   MIN_TIME     --benchmark_min_time in seconds (default 0.5; 0.05 with --quick)
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$script_dir/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build-bench}"
results="${RESULTS_DIR:-$root/bench/results}"
jobs="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
min_time="${MIN_TIME:-0.5}"
filter="."
if [[ $quick -eq 1 ]]; then
  min_time="${MIN_TIME:-0.05}"
  filter="/(65536|1048576)(/|$)"
fi

"$root/scripts/install_deps.sh" >&2

cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_BENCHMARKS=ON \
  -DGRADCOMP_BUILD_TESTS=OFF -DGRADCOMP_BUILD_EXAMPLES=OFF >&2
cmake --build "$build_dir" -j"$jobs" --target bench_select bench_dgc >&2

mkdir -p "$results"
cpu_model="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
for bench in bench_select bench_dgc; do
  echo "== $bench (min_time $min_time s)" >&2
  "$build_dir/bench/$bench" --benchmark_min_time="$min_time" --benchmark_filter="$filter" \
    --benchmark_out="$results/$bench.json" --benchmark_out_format=json
  # The results are committed: name the executable relative to the repository.
  sed -i "s|\"executable\": \"$root/|\"executable\": \"|" "$results/$bench.json"
done

python=""
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import matplotlib' >/dev/null 2>&1; then
    python="$py"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "bench/run.sh: python3-matplotlib is missing; raw results are in $results" >&2
  exit 1
fi
"$python" "$script_dir/summarize.py" --cpu "$cpu_model" --command "bench/run.sh${1:+ $1}" \
  "$results/bench_select.json" "$results/bench_dgc.json" -o "$results"
echo "summary: $results/summary.md" >&2
