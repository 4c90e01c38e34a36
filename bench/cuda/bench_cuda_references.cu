// The references the GPU top-k is measured against, on the sizes of bench_cuda_select (run both
// binaries in one session, with bench/cuda/torch_topk.py):
// - BM_cuda_copy_kernel: a plain copy kernel (grid-stride, 16-byte loads and stores) of the
//   input, the bandwidth ceiling of any pass that reads it; counter bytes_per_second counts the
//   bytes read and written.
// - BM_cuda_cub_select_known_threshold: cub::DeviceSelect::If of the positions whose magnitude is
//   at or above the k-th largest, that threshold given (found on the host beforehand): what a
//   top-k costs when the threshold is known, with the count copied back as the top-k copies its
//   own.
// - BM_cuda_sort_by_key_top_k: thrust::sort_by_key of the magnitudes (descending) with their
//   positions, then the first k positions sorted ascending: the top-k a sort gives, in the order
//   gradcomp returns.
// Times are CUDA-event medians of what the host waits for.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <cub/device/device_select.cuh>
#include <gradcomp/thrust.hpp>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform.h>

#include "gpu_timing.cuh"

namespace {

using gradcomp_bench::check;
using gradcomp_bench::event_seconds;

// The input of bench_cuda_select: n gaussian floats, seed 42.
std::vector<float> gaussian_input(std::size_t n) {
  std::vector<float> host(n);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : host) x = normal(rng);
  return host;
}

std::size_t k_of(const benchmark::State& state, std::size_t n) {
  return std::max<std::size_t>(1, n * static_cast<std::size_t>(state.range(1)) / 1000000);
}

__global__ void copy_kernel(const float4* in, float4* out, std::size_t quads, const float* tail_in, float* tail_out,
                            std::size_t tail) {
  const std::size_t step = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < quads; i += step) out[i] = in[i];
  if (blockIdx.x == 0 && threadIdx.x < tail) tail_out[threadIdx.x] = tail_in[threadIdx.x];
}

void BM_cuda_copy_kernel(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto host = gaussian_input(n);
  thrust::device_vector<float> in(host.begin(), host.end()), out(n);
  const float* src = thrust::raw_pointer_cast(in.data());
  float* dst = thrust::raw_pointer_cast(out.data());
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  const std::size_t quads = n / 4;
  auto copy = [&] {
    copy_kernel<<<static_cast<unsigned>(sms) * 8, 256>>>(reinterpret_cast<const float4*>(src),
                                                          reinterpret_cast<float4*>(dst), quads, src + 4 * quads,
                                                          dst + 4 * quads, n - 4 * quads);
    check(cudaGetLastError(), "copy_kernel");
  };
  copy();
  for (auto _ : state) state.SetIterationTime(event_seconds(copy));
  state.counters["bytes_per_second"] =
      benchmark::Counter(static_cast<double>(2 * n * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
}

struct at_or_above {
  const float* v;
  float t;
  __device__ bool operator()(std::uint32_t i) const { return fabsf(v[i]) >= t; }
};

void BM_cuda_cub_select_known_threshold(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t k = k_of(state, n);
  const auto host = gaussian_input(n);
  std::vector<float> magnitudes(n);
  std::transform(host.begin(), host.end(), magnitudes.begin(), [](float x) { return std::fabs(x); });
  std::nth_element(magnitudes.begin(), magnitudes.begin() + static_cast<std::ptrdiff_t>(k - 1), magnitudes.end(),
                   std::greater<float>());
  const float threshold = magnitudes[k - 1];
  thrust::device_vector<float> in(host.begin(), host.end());
  thrust::device_vector<std::uint32_t> out(n);
  thrust::device_vector<std::int64_t> selected(1);
  const at_or_above pred{thrust::raw_pointer_cast(in.data()), threshold};
  std::size_t temp_bytes = 0;
  check(cub::DeviceSelect::If(nullptr, temp_bytes, thrust::counting_iterator<std::uint32_t>(0),
                              thrust::raw_pointer_cast(out.data()), thrust::raw_pointer_cast(selected.data()),
                              static_cast<std::int64_t>(n), pred),
        "cub::DeviceSelect::If (temporary storage)");
  thrust::device_vector<unsigned char> temp(temp_bytes);
  std::int64_t count = 0;
  auto run = [&] {
    check(cub::DeviceSelect::If(thrust::raw_pointer_cast(temp.data()), temp_bytes,
                                thrust::counting_iterator<std::uint32_t>(0), thrust::raw_pointer_cast(out.data()),
                                thrust::raw_pointer_cast(selected.data()), static_cast<std::int64_t>(n), pred),
          "cub::DeviceSelect::If");
    check(cudaMemcpy(&count, thrust::raw_pointer_cast(selected.data()), sizeof(count), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
  };
  run();
  for (auto _ : state) state.SetIterationTime(event_seconds(run));
  state.counters["selected"] = static_cast<double>(count);
  state.counters["input_GBps"] =
      benchmark::Counter(static_cast<double>(n * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
}

struct magnitude_bits {
  __device__ std::uint32_t operator()(float x) const { return __float_as_uint(x) & 0x7fffffffu; }
};

void BM_cuda_sort_by_key_top_k(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t k = k_of(state, n);
  const auto host = gaussian_input(n);
  thrust::device_vector<float> in(host.begin(), host.end());
  thrust::device_vector<std::uint32_t> keys(n), positions(n);
  const auto policy = thrust::cuda::par_nosync(gradcomp::detail::thrust_impl::stream_ordered_temporaries{});
  auto run = [&] {
    thrust::transform(policy, in.begin(), in.end(), keys.begin(), magnitude_bits{});
    thrust::sequence(policy, positions.begin(), positions.end());
    thrust::sort_by_key(policy, keys.begin(), keys.end(), positions.begin(), thrust::greater<std::uint32_t>());
    thrust::sort(policy, positions.begin(), positions.begin() + static_cast<std::ptrdiff_t>(k));
    check(cudaStreamSynchronize(cudaStream_t{}), "cudaStreamSynchronize");
  };
  run();
  for (auto _ : state) state.SetIterationTime(event_seconds(run));
  state.counters["input_GBps"] =
      benchmark::Counter(static_cast<double>(n * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
}

void copy_sizes(benchmark::internal::Benchmark* b) {
  for (const long n : {1L << 16, 1L << 20, 1L << 24, 1L << 26, 100000000L}) b->Args({n});
}
void topk_sizes(benchmark::internal::Benchmark* b) {
  for (const long n : {1L << 16, 1L << 20, 1L << 24, 1L << 26, 100000000L})
    for (const long per_million : {1000L, 10000L}) b->Args({n, per_million});
}

}  // namespace

BENCHMARK(BM_cuda_copy_kernel)->Apply(copy_sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_cub_select_known_threshold)->Apply(topk_sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_sort_by_key_top_k)->Apply(topk_sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
