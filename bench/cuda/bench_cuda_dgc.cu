// One DGC step on the GPU (dgc_compressor on the portable Thrust backend, Thrust's CUDA system,
// with the exact top-k or the sampled threshold): compress() of one tensor, waited for through stats(), timed against the step's
// streaming part alone in the same iteration (u = m*u + g; v += u over the same elements: reads
// g, u, v and writes u, v, 20 bytes per element, with the library's own element functor).
// ratio_to_stream = stream time / step time: the share of memory speed the whole step reaches.
// BM_cuda_dgc_model: the same for every tensor of ResNet-50 (bench/data/resnet50.txt, 161 tensors,
// 25.6 M parameters) in one compress() call, plus the message encoded (with a CRC-32C) into host
// memory by encode_message, or on the GPU into device memory by a wire::device_encoder (raw_u32
// indices), its length read back: the step of a whole model as a trainer runs it; the stream
// covers all its elements.
// BM_cuda_saef_step: saef_worker::step around dgc_compressor (exact top-k, no momentum
// correction): the worker's momentum M = m M + g and u = eta M, then the compressor's error
// feedback and selection on u; against the same stream (20 bytes per element: g, M and the
// residual read, M and the residual written), as BM_saef_step of bench_dgc on the CPU.
// The list is read from $GRADCOMP_BENCH_DATA if set (a GPU machine's copy of bench/data), else
// from the source tree this binary was built from.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <gradcomp/thrust/wire_encode.hpp>
#include <thrust/system/cuda/execution_policy.h>

#include "../model_list.hpp"
#include "gpu_timing.cuh"

namespace {

using gradcomp_bench::event_seconds;

using cuda_system = thrust::system::cuda::tag;
using backend = gradcomp::thrust_backend<cuda_system>;
using ops = gradcomp::detail::ops<backend>;
using backend_buffer = gradcomp::backend_buffer<float, backend>;

// The step's streaming part alone over n elements: u = m*u + g; v += u (reads g, u, v, writes u
// and v), with the library's own element functor.
struct stream_reference {
  backend_buffer g, u, v;
  std::size_t n;
  stream_reference(const backend& b, std::size_t count)
      : g(ops::allocate<float>(b, count)), u(ops::allocate<float>(b, count)), v(ops::allocate<float>(b, count)),
        n(count) {}
  void operator()() {
    thrust::for_each_n(cuda_system{}, thrust::counting_iterator<std::size_t>(0), n,
                       gradcomp::detail::thrust_impl::momentum_accumulate_op<float>{
                           gradcomp::momentum_kind::vanilla, 0.9f, 1.0f, g.view().data(), u.view().data(),
                           v.view().data()});
  }
};

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
  const auto g = gradcomp_bench::gaussian_gradient(b, n);
  const std::vector<gradcomp::backend_span<const float, backend>> grads = {gradcomp::readonly(g.view())};
  bool ok = true;
  double kept = 0;
  auto step = [&] {
    const auto issued = c.compress(grads);
    const auto r = issued ? c.stats() : gradcomp::fail(issued.error());
    ok &= static_cast<bool>(r);
    if (r) kept += static_cast<double>(r->kept_elements);
  };
  stream_reference stream(b, n);
  const double ratio = gradcomp_bench::timed_against(state, step, stream);
  if (!ok) state.SkipWithError("compress failed");
  state.counters["ratio_to_stream"] = ratio;
  state.counters["kept_per_step"] = kept / static_cast<double>(state.iterations() + 1);
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// args: density per million, selection (0: exact top-k, 1: sampled threshold), encoding (0: on the
// host by encode_message, 1: on the GPU by a device_encoder).
void BM_cuda_dgc_model(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  std::vector<gradcomp_bench::tensor_spec> model;
  if (!gradcomp_bench::load_resnet50(state, model)) return;
  const std::size_t n = gradcomp_bench::model_numel(model);
  gradcomp::dgc_config cfg;
  cfg.selection = state.range(1) == 0 ? gradcomp::selection_method::exact_topk
                                      : gradcomp::selection_method::sampled_threshold;
  cfg.schedule = gradcomp::warmup_schedule::constant(static_cast<double>(state.range(0)) * 1e-6);
  cfg.clip_norm = 5.0;
  cfg.num_workers = 8;
  const backend b{};
  gradcomp::dgc_compressor<float, backend> c(cfg, b);
  std::vector<gradcomp::backend_buffer<float, backend>> grads;
  std::vector<gradcomp::backend_span<const float, backend>> views;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& t : model) {
    c.add_tensor(t.name, t.shape);
    std::vector<float> host(t.numel);
    for (auto& x : host) x = normal(rng);
    grads.push_back(gradcomp::allocate_buffer<float>(b, t.numel));
    if (!gradcomp::copy_to_backend(b, gradcomp::span<const float>(host.data(), host.size()), grads.back().view())) {
      state.SkipWithError("copy failed");
      return;
    }
    views.push_back(gradcomp::readonly(grads.back().view()));
  }
  gradcomp::wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> message(c.max_message_bytes(opt));
  bool ok = true;
  double bytes = 0;
  const bool on_device = state.range(2) == 1;
  gradcomp::wire::encode_options device_opt = opt;
  device_opt.indices = gradcomp::wire::index_coding::raw_u32;
  gradcomp::wire::device_encoder<float, backend> encoder(b, c.device_message(), device_opt);
  auto device_out = gradcomp::allocate_buffer<std::byte>(b, encoder.max_message_bytes());
  auto outcome = gradcomp::allocate_buffer<std::uint64_t>(b, 2);
  auto step = [&] {
    const auto issued = c.compress(views);
    ok &= static_cast<bool>(issued);
    if (on_device) {
      ok &= static_cast<bool>(encoder.encode(b, device_out.view(), outcome.view()));
      ok &= static_cast<bool>(c.stats());  // waits for the stream: the step and the encoding
      std::uint64_t result[2] = {};
      ok &= static_cast<bool>(
          gradcomp::copy_to_host(b, gradcomp::readonly(outcome.view()), gradcomp::span<std::uint64_t>(result, 2)));
      gradcomp::synchronize(b);
      ok &= result[1] == 0;
      bytes = static_cast<double>(result[0]);
      return;
    }
    ok &= static_cast<bool>(c.stats());
    const auto r = c.encode_message(opt, gradcomp::span<std::byte>(message.data(), message.size()));
    ok &= static_cast<bool>(r);
    if (r) bytes = static_cast<double>(*r);
  };
  stream_reference stream(b, n);
  const double ratio = gradcomp_bench::timed_against(state, step, stream);
  if (!ok) state.SkipWithError("compress or encode failed");
  state.counters["ratio_to_stream"] = ratio;
  state.counters["message_bytes"] = bytes;
  state.counters["tensors"] = static_cast<double>(model.size());
}

// args: n, density per million.
void BM_cuda_saef_step(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  gradcomp::dgc_config cfg;
  cfg.momentum_correction = false;
  cfg.momentum_masking = false;
  cfg.selection = gradcomp::selection_method::exact_topk;
  cfg.schedule = gradcomp::warmup_schedule::constant(static_cast<double>(state.range(1)) * 1e-6);
  const backend b{};
  gradcomp::dgc_compressor<float, backend> c(cfg, b);
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  gradcomp::saef_config scfg;
  scfg.learning_rate = 0.1;
  gradcomp::saef_worker<gradcomp::dgc_compressor<float, backend>> w(c, scfg);
  const auto g = gradcomp_bench::gaussian_gradient(b, n);
  const std::vector<gradcomp::backend_span<const float, backend>> grads = {gradcomp::readonly(g.view())};
  bool ok = true;
  auto step = [&] { ok &= static_cast<bool>(w.step(grads)); };
  stream_reference stream(b, n);
  const double ratio = gradcomp_bench::timed_against(state, step, stream);
  if (!ok) state.SkipWithError("step failed");
  state.counters["ratio_to_stream"] = ratio;
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
BENCHMARK(BM_cuda_saef_step)
    ->Args({1L << 20, 1000})
    ->Args({1L << 24, 1000})
    ->Args({1L << 26, 1000})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_dgc_model)
    ->Args({1000, 0, 0})
    ->Args({1000, 1, 0})
    ->Args({1000, 0, 1})
    ->Args({1000, 1, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
