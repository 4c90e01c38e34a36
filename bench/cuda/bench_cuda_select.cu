// The exact top-k by magnitude on the GPU (the portable Thrust backend on Thrust's CUDA system),
// timed against a device-to-device copy of its input measured in the same iteration: the copy is
// the memory-speed reference (ratio_to_copy = copy time / top-k time; 1.0 would be one read and
// one write of the input at the copy's speed). bench/cuda/torch_topk.py times torch.topk on the
// same sizes for comparison.
//
// The Thrust top-k returns when its result is known to the host (it reads the k-th key and the
// count back), so each timed call includes its synchronisations, as a caller sees it.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include <gradcomp/thrust.hpp>
#include <thrust/system/cuda/execution_policy.h>

#include "gpu_timing.cuh"

namespace {

using gradcomp_bench::event_seconds;

using cuda_system = thrust::system::cuda::tag;
using backend = gradcomp::thrust_backend<cuda_system>;
using ops = gradcomp::detail::ops<backend>;

// args: n, k per million elements.
void BM_cuda_exact_topk(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto k = std::max<std::size_t>(1, n * static_cast<std::size_t>(state.range(1)) / 1000000);
  std::vector<float> host(n);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : host) x = normal(rng);
  const backend b{};
  auto values = ops::allocate<float>(b, n);
  ops::copy_to_backend(b, gradcomp::span<const float>(host.data(), n), values.view());
  auto copy = ops::allocate<float>(b, n);
  auto out = ops::allocate<std::uint32_t>(b, k);
  const std::size_t ws_bytes = gradcomp::detail::thrust_impl::exact_topk_workspace_bytes<float, cuda_system>(n, k);
  auto ws = ops::allocate<std::byte>(b, ws_bytes);
  std::size_t kept = 0;
  auto topk = [&] {
    float threshold = 0;
    const auto r = gradcomp::detail::thrust_impl::exact_topk<float, cuda_system>(
        b.stream, values.view().data(), n, k, out.view().data(), ws.view().data(), ws.size(), &threshold);
    if (!r) throw std::runtime_error("exact_topk failed");
    kept = *r;
  };
  auto device_copy = [&] {
    gradcomp_bench::check(
        cudaMemcpy(copy.view().data(), values.view().data(), n * sizeof(float), cudaMemcpyDeviceToDevice),
        "cudaMemcpy");
  };
  // The first calls carry first-call costs (module load, Thrust's temporary allocations).
  state.counters["ratio_to_copy"] = gradcomp_bench::timed_against(state, topk, device_copy);
  state.counters["k"] = static_cast<double>(kept);
  state.counters["input_GBps"] =
      benchmark::Counter(static_cast<double>(n * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
}

void topk_sizes(benchmark::internal::Benchmark* b) {
  for (const long n : {1L << 16, 1L << 20, 1L << 24, 1L << 26, 100000000L})
    for (const long per_million : {1000L, 10000L}) b->Args({n, per_million});
}

}  // namespace

BENCHMARK(BM_cuda_exact_topk)->Apply(topk_sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
