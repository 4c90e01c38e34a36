#!/usr/bin/env bash
# gradcomp's checks on a machine with an NVIDIA GPU, from binaries already built by nvcc (so a GPU
# machine spends its time running, not compiling):
#
#   scripts/gpu_check.sh BIN_DIR OUT_DIR [SECONDS]
#
# BIN_DIR holds gradcomp_cuda_tests, gradcomp_separate_cuda_tests, gradcomp_nvcc_headers,
# train_fashion_mnist_cuda, bench_cuda_* and optionally gradcomp_consumer (the CUDA consumer
# project), gradcomp_nccl_tests (where NCCL is installed) and lib/ (shared libraries they need that the machine lacks, e.g. Google Benchmark's).
# Build them with
#
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_TESTS=ON \
#         -DGRADCOMP_BUILD_EXAMPLES=ON -DGRADCOMP_BUILD_BENCHMARKS=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   make -C build-gpu gradcomp_cuda_tests gradcomp_separate_cuda_tests gradcomp_nvcc_headers \
#         train_fashion_mnist_cuda bench_cuda_select bench_cuda_dgc bench_cuda_quantisers \
#         bench_cuda_wire bench_cuda_references gradcomp_nccl_tests
#
# First, in parallel (correctness only; each run is limited to SECONDS, default 240): the CUDA
# tests, the demo's CPU-versus-CUDA comparison (needs the Fashion-MNIST files in the demo's default
# directory), and compute-sanitizer's memcheck, racecheck, synccheck and initcheck over both CUDA
# test executables. Then, alone on the GPU: the CUDA benchmarks (JSON), torch.topk on the
# top-k's sizes (bench/cuda/torch_topk.py, where PyTorch is installed) and the ResNet-50 DGC step
# written with torch operations tensor by tensor (bench/cuda/torch_dgc_baseline.py), the baseline
# of BM_cuda_dgc_model. Everything lands in
# OUT_DIR/r/ and is packed into OUT_DIR/results.tgz after each phase; OUT_DIR/r/status.txt lists
# each run's exit code and seconds (124: stopped at its limit).
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 BIN_DIR OUT_DIR [SECONDS]" >&2
  exit 2
fi
bin=$(cd "$1" && pwd)
out=$2
limit=${3:-240}
src=$(cd "$(dirname "$0")/.." && pwd)
r="$out/r"
mkdir -p "$r"
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

pack() { tar -C "$out" -czf "$out/results.tgz.part" r && mv "$out/results.tgz.part" "$out/results.tgz"; }

# One run in the background: its output in r/NAME.log, its exit code and duration in r/status.txt.
run_bg() {
  local name=$1
  shift
  (
    local t0
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$r/$name.log" 2>&1
    echo "$name rc=$? $(( $(date +%s) - t0 ))s" >> "$r/status.txt"
  ) &
}

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -n 2
  nproc
} > "$r/device.txt" 2>&1

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# Phase 1: correctness, everything at once.
run_bg tests_thrust "$bin/gradcomp_cuda_tests"
run_bg tests_separate "$bin/gradcomp_separate_cuda_tests"
run_bg tests_nvcc_headers "$bin/gradcomp_nvcc_headers"
if [ -x "$bin/gradcomp_consumer" ]; then
  run_bg consumer "$bin/gradcomp_consumer"
fi
# The NCCL exchange (DGC's messages, a dense sum, PowerSGD's two rounds): one rank per GPU, so one
# rank on a machine with one GPU.
if [ -x "$bin/gradcomp_nccl_tests" ]; then
  run_bg tests_nccl "$bin/gradcomp_nccl_tests"
fi
# The demo's cpu run, then its cuda run, which must be the same run.
run_bg demo sh -c 'cmake "-DDEMO=$1" "-DWORKDIR=$2/reference" -P "$3/run_reference.cmake" &&
  cmake "-DDEMO=$1" -DOTHER=cuda "-DWORKDIR=$2/cuda" "-DREFERENCE=$2/reference" -P "$3/check_backends.cmake"' \
  sh "$bin/train_fashion_mnist_cuda" "$r/demo" "$src/examples/fashion_mnist"
for tool in memcheck racecheck synccheck initcheck; do
  run_bg "${tool}_thrust" "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin/gradcomp_cuda_tests"
  run_bg "${tool}_separate" "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin/gradcomp_separate_cuda_tests"
done
wait
pack

# Phase 2: timings, one program at a time.
for b in select dgc quantisers wire references; do
  t0=$(date +%s)
  timeout -k 10 120 "$bin/bench_cuda_$b" --benchmark_min_time=0.1 \
    "--benchmark_out=$r/bench_cuda_$b.json" --benchmark_out_format=json > "$r/bench_cuda_$b.log" 2>&1
  echo "bench_cuda_$b rc=$? $(( $(date +%s) - t0 ))s" >> "$r/status.txt"
done
t0=$(date +%s)
timeout -k 10 120 python3 "$src/bench/cuda/torch_topk.py" > "$r/torch_topk.jsonl" 2> "$r/torch_topk.log"
echo "torch_topk rc=$? $(( $(date +%s) - t0 ))s" >> "$r/status.txt"
t0=$(date +%s)
timeout -k 10 120 python3 "$src/bench/cuda/torch_dgc_baseline.py" --density 0.001 \
  > "$r/torch_dgc_baseline.jsonl" 2> "$r/torch_dgc_baseline.log"
echo "torch_dgc_baseline rc=$? $(( $(date +%s) - t0 ))s" >> "$r/status.txt"
pack
cat "$r/status.txt"
