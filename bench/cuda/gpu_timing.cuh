// Timing and input helpers of the GPU benchmarks.
#pragma once

#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gradcomp/backend_memory.hpp>

#include "../model_list.hpp"

namespace gradcomp_bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// False (and the benchmark marked as skipped with an error) where no CUDA device is present.
inline bool have_device(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

// n standard normal floats (the generator seeded with 7) in `b`'s memory: one tensor's gradient.
template <class Backend>
gradcomp::backend_buffer<float, Backend> gaussian_gradient(const Backend& b, std::size_t n) {
  std::vector<float> host(n);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : host) x = normal(rng);
  auto g = gradcomp::allocate_buffer<float>(b, n);
  if (!gradcomp::copy_to_backend(b, gradcomp::span<const float>(host.data(), n), g.view()))
    throw std::runtime_error("gaussian_gradient: the copy to the backend failed");
  return g;
}

// The ResNet-50 tensor list: bench/data/resnet50.txt from $GRADCOMP_BENCH_DATA if set (a GPU
// machine's copy of bench/data), else from the source tree the binary was built from. False (and
// the benchmark marked as skipped) when it cannot be read.
inline bool load_resnet50(benchmark::State& state, std::vector<tensor_spec>& model) {
  const char* dir = std::getenv("GRADCOMP_BENCH_DATA");
  try {
    model = load_model(std::string(dir != nullptr ? dir : GRADCOMP_BENCH_DATA_DIR) + "/resnet50.txt");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return false;
  }
  return true;
}

// Seconds of the work `f` enqueues on the default stream, between two events.
template <class F>
double event_seconds(F&& f) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start), "cudaEventRecord");
  f();
  check(cudaEventRecord(stop), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3;
}

// Times `work` against `reference` in the same iterations (both run once first, for first-call
// costs): each iteration's time is work's; returns the median of reference time / work time.
template <class Work, class Reference>
double timed_against(benchmark::State& state, Work&& work, Reference&& reference) {
  work();
  reference();
  std::vector<double> ratios;
  for (auto _ : state) {
    const double r = event_seconds(reference);
    const double t = event_seconds(work);
    state.SetIterationTime(t);
    ratios.push_back(r / t);
  }
  if (ratios.empty()) return 0.0;
  std::sort(ratios.begin(), ratios.end());
  return ratios[ratios.size() / 2];
}

}  // namespace gradcomp_bench
