// One DGC step on the GPU (dgc_compressor on the portable Thrust backend, Thrust's CUDA system,
// with the exact top-k or the sampled threshold): compress() of one tensor, waited for through stats(), timed against the step's
// streaming part alone in the same iteration (u = m*u + g; v += u over the same elements: reads
// g, u, v and writes u, v, 20 bytes per element, with the library's own element functor).
// ratio_to_stream = stream time / step time: the share of memory speed the whole step reaches.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust/backend.hpp>
#include <thrust/system/cuda/execution_policy.h>

#include "gpu_timing.cuh"

namespace {

using gradcomp_bench::event_seconds;

using cuda_system = thrust::system::cuda::tag;
using backend = gradcomp::thrust_backend<cuda_system>;
using ops = gradcomp::detail::ops<backend>;

// args: n, density per million, selection (0: exact top-k, 1: sampled threshold).
void BM_cuda_dgc_step(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  const double density = static_cast<double>(state.range(1)) * 1e-6;
  gradcomp::dgc_config cfg;
  cfg.selection = state.range(2) == 0 ? gradcomp::selection_method::exact_topk
                                      : gradcomp::selection_method::sampled_threshold;
  cfg.schedule = gradcomp::warmup_schedule::constant(density);
  const backend b{};
  gradcomp::dgc_compressor<float, backend> c(cfg, b);
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  std::vector<float> host(n);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : host) x = normal(rng);
  auto g = ops::allocate<float>(b, n);
  ops::copy_to_backend(b, gradcomp::span<const float>(host.data(), n), g.view());
  auto u = ops::allocate<float>(b, n);
  auto v = ops::allocate<float>(b, n);
  const std::vector<gradcomp::backend_span<const float, backend>> grads = {gradcomp::readonly(g.view())};
  bool ok = true;
  double kept = 0;
  auto step = [&] {
    const auto issued = c.compress(grads);
    const auto r = issued ? c.stats() : gradcomp::fail(issued.error());
    ok &= static_cast<bool>(r);
    if (r) kept += static_cast<double>(r->kept_elements);
  };
  auto stream = [&] {
    thrust::for_each_n(cuda_system{}, thrust::counting_iterator<std::size_t>(0), n,
                       gradcomp::detail::thrust_impl::momentum_accumulate_op<float>{
                           gradcomp::momentum_kind::vanilla, 0.9f, 1.0f, g.view().data(), u.view().data(),
                           v.view().data()});
  };
  step();
  stream();
  std::vector<double> ratios;
  for (auto _ : state) {
    const double s = event_seconds(stream);
    const double t = event_seconds(step);
    state.SetIterationTime(t);
    ratios.push_back(s / t);
  }
  if (!ok) state.SkipWithError("compress failed");
  std::sort(ratios.begin(), ratios.end());
  state.counters["ratio_to_stream"] = ratios[ratios.size() / 2];
  state.counters["kept_per_step"] = kept / static_cast<double>(state.iterations() + 1);
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void step_sizes(benchmark::internal::Benchmark* b) {
  for (const long n : {1L << 20, 1L << 24, 1L << 26})
    for (const long per_million : {1000L, 10000L})
      for (const long selection : {0L, 1L}) b->Args({n, per_million, selection});
}

}  // namespace

BENCHMARK(BM_cuda_dgc_step)->Apply(step_sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
