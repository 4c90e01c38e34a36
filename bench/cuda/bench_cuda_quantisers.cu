// One step of each quantising compressor on the GPU (the portable Thrust backend on Thrust's CUDA
// system): compress() of one tensor of n elements, waited for through stats(), timed against a
// streaming loop of the bytes the step must move in the same iteration:
//   BM_cuda_quantiser_step/<n>/0  EF-SignSGD   a read of g and e (the L1 norm first), then
//                                              v = e + g, e = g: 24 bytes per element
//   BM_cuda_quantiser_step/<n>/1  TernGrad     a read of g (the scale first), then v = g + g:
//                                              12 bytes per element
//   BM_cuda_quantiser_step/<n>/2  1-bit SGD    as EF-SignSGD (256 columns), 24 bytes per element
//   BM_cuda_quantiser_step/<n>/3  QSGD         as TernGrad (the bucket norms first), 12 bytes
//   BM_cuda_quantiser_step/<n>/4  AdaComp      as EF-SignSGD (n / 512 rows of 512, bins of 500:
//                                              each bin's maximum and count, then its selection
//                                              and r), 24 bytes
// ratio_to_stream = stream time / step time; wire_bits_per_element: the step's message (encoded on
// the host from the staged copy, untimed), its section per element.
//   BM_cuda_quantiser_model/<method>  the same methods over every tensor of ResNet-50
//                                     (bench/data/resnet50.txt, 161 tensors, 25.6 M parameters,
//                                     each compressed as the method's policy decides) in one
//                                     compress(): a whole model's step in a fixed number of
//                                     launches, against the stream of all its elements.
//   BM_cuda_powersgd_model/<r>  PowerSGD of rank r over ResNet-50: one worker's whole step (round 1,
//                               its payload as the average, round 2 likewise: the update and the
//                               error), against the 24-byte stream of all its elements (the step
//                               itself reads M three times and writes it twice: about 32 bytes).
//                               wire_bits_per_element: both rounds' payloads per element.
//   BM_cuda_isgq_step/<n>  ISGQ, dithered (s = 3, buckets of 512): compress() of one layer of n
//                          inputs and n outputs over a batch of 32 (X and Delta, 64 n elements):
//                          the finiteness reads, one thread per bucket, the codes and scales
//                          copied to the host and packed there; against a read of X and Delta
//                          (4 bytes per element), a write of a byte per element and its copy to
//                          the host. wire_bits_per_element: the payload per factor element.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>
#include <thrust/system/cuda/execution_policy.h>

#include "gpu_timing.cuh"

namespace {

using cuda_system = thrust::system::cuda::tag;
using backend = gradcomp::thrust_backend<cuda_system>;
using ops = gradcomp::detail::ops<backend>;
using backend_buffer = gradcomp::backend_buffer<float, backend>;

struct absolute {
  __host__ __device__ float operator()(float x) const { return x < 0.0f ? -x : x; }
};
struct larger {
  __host__ __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};
struct sum {
  __host__ __device__ float operator()(float a, float b) const { return a + b; }
};

// v[i] = g[i] + (e ? e[i] : g[i]); with e, e[i] = g[i] as well.
struct stream_write {
  const float* g;
  float* e;
  float* v;
  __host__ __device__ void operator()(std::size_t i) const {
    const float x = g[i];
    v[i] = x + (e != nullptr ? e[i] : x);
    if (e != nullptr) e[i] = x;
  }
};

// The streaming loop of a step: a reduction over g (and e), then the write pass. `with_error`:
// the error-feedback methods' 24 bytes per element, else 12.
struct stream_reference {
  backend_buffer g, e, v;
  std::size_t n;
  bool with_error;
  stream_reference(const backend& b, std::size_t count, bool error)
      : g(ops::allocate<float>(b, count)), e(ops::allocate<float>(b, error ? count : 0)),
        v(ops::allocate<float>(b, count)), n(count), with_error(error) {}
  void operator()() {
    float* gp = g.view().data();
    benchmark::DoNotOptimize(thrust::transform_reduce(cuda_system{}, gp, gp + n, absolute{}, 0.0f,
                                                      larger{}));
    if (with_error)
      benchmark::DoNotOptimize(thrust::transform_reduce(cuda_system{}, e.view().data(), e.view().data() + n,
                                                        absolute{}, 0.0f, sum{}));
    thrust::for_each_n(cuda_system{}, thrust::counting_iterator<std::size_t>(0), n,
                       stream_write{gp, with_error ? e.view().data() : nullptr, v.view().data()});
  }
};

// A step of c over the gradients `grads` (n elements in all), against the stream of n elements.
template <class C>
void run(benchmark::State& state, C& c, const std::vector<gradcomp::backend_span<const float, backend>>& grads,
         std::size_t n, bool with_error) {
  const backend b{};
  bool ok = true;
  auto step = [&] {
    const auto issued = c.compress(grads);
    ok &= issued && c.stats();
  };
  stream_reference stream(b, n, with_error);
  const double ratio = gradcomp_bench::timed_against(state, step, stream);
  std::vector<std::byte> msg(c.max_message_bytes());
  const auto bytes = c.encode_message({}, gradcomp::span<std::byte>(msg.data(), msg.size()));
  if (!ok || !bytes) state.SkipWithError("compress failed");
  state.counters["ratio_to_stream"] = ratio;
  state.counters["wire_bits_per_element"] =
      bytes ? 8.0 * static_cast<double>(*bytes - gradcomp::wire::message_header_bytes) / static_cast<double>(n) : 0.0;
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// A step of c over one tensor of n elements, registered by `add(c)`.
template <class C, class Add>
void run_one(benchmark::State& state, C& c, std::size_t n, bool with_error, Add add) {
  add(c);
  const auto g = gradcomp_bench::gaussian_gradient(backend{}, n);
  run(state, c, {gradcomp::readonly(g.view())}, n, with_error);
}

// A step of c over every tensor of ResNet-50, each registered as the method's policy decides.
template <class C>
void run_model(benchmark::State& state, C& c, bool with_error) {
  std::vector<gradcomp_bench::tensor_spec> model;
  if (!gradcomp_bench::load_resnet50(state, model)) return;
  std::vector<backend_buffer> buffers;
  std::vector<gradcomp::backend_span<const float, backend>> grads;
  for (const auto& t : model) {
    c.add_tensor(t.name, t.shape);
    buffers.push_back(gradcomp_bench::gaussian_gradient(backend{}, t.numel));
    grads.push_back(gradcomp::readonly(buffers.back().view()));
  }
  run(state, c, grads, gradcomp_bench::model_numel(model), with_error);
}

// One tensor of n elements (n > 0) or ResNet-50 (n = 0) with each method: its compressor, the
// shape of the one tensor, and whether it keeps an error.
template <class Run>
void with_method(long method, std::size_t n, Run run_it) {
  const backend b{};
  const auto one = [&](std::vector<std::size_t> shape) {
    return [shape](auto& c) { c.add_tensor("w", shape, gradcomp::tensor_mode::compressed); };
  };
  switch (method) {
    case 0: {
      gradcomp::ef_signsgd_config cfg;
      cfg.learning_rate = 0.01;
      gradcomp::ef_signsgd_compressor<float, backend> c(cfg, b);
      run_it(c, true, one({n}));
      break;
    }
    case 1: {
      gradcomp::terngrad_compressor<float, backend> c(gradcomp::terngrad_config{}, b);
      run_it(c, false, one({n}));
      break;
    }
    case 2: {
      gradcomp::onebit_sgd_compressor<float, backend> c(gradcomp::onebit_sgd_config{}, b);
      run_it(c, true, one({n / 256, 256}));
      break;
    }
    case 3: {
      gradcomp::qsgd_compressor<float, backend> c(gradcomp::qsgd_config{}, b);
      run_it(c, false, one({n}));
      break;
    }
    default: {
      gradcomp::adacomp_compressor<float, backend> c(gradcomp::adacomp_config{}, b);
      run_it(c, true, one({n / 512, 512}));
      break;
    }
  }
}

// args: n, method (0 EF-SignSGD, 1 TernGrad, 2 1-bit SGD, 3 QSGD, 4 AdaComp).
void BM_cuda_quantiser_step(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  with_method(state.range(1), n, [&](auto& c, bool with_error, auto add) { run_one(state, c, n, with_error, add); });
}

// args: method, as above.
void BM_cuda_quantiser_model(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  with_method(state.range(0), 1, [&](auto& c, bool with_error, auto) { run_model(state, c, with_error); });
}

// args: r.
void BM_cuda_powersgd_model(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  std::vector<gradcomp_bench::tensor_spec> model;
  if (!gradcomp_bench::load_resnet50(state, model)) return;
  const backend b{};
  gradcomp::powersgd_config cfg;
  cfg.rank = static_cast<std::size_t>(state.range(0));
  gradcomp::powersgd_compressor<float, backend> c(cfg, b);
  std::vector<backend_buffer> buffers;
  std::vector<gradcomp::backend_span<const float, backend>> grads;
  for (const auto& t : model) {
    c.add_tensor(t.name, t.shape);
    buffers.push_back(gradcomp_bench::gaussian_gradient(b, t.numel));
    grads.push_back(gradcomp::readonly(buffers.back().view()));
  }
  const std::size_t n = gradcomp_bench::model_numel(model);
  bool ok = true;
  double payload = 0.0;
  auto step = [&] {
    using view = gradcomp::backend_span<const float, backend>;
    auto next = c.begin_step(gradcomp::span<const view>(grads.data(), grads.size()));
    payload = 0.0;
    while (next && !next->empty()) {
      payload += static_cast<double>(next->size());
      next = c.end_round(*next);  // a lone worker's average: its own payload
    }
    ok &= static_cast<bool>(next);
    ops::synchronize(b);
  };
  stream_reference stream(b, n, true);
  const double ratio = gradcomp_bench::timed_against(state, step, stream);
  if (!ok) state.SkipWithError("step failed");
  state.counters["ratio_to_stream"] = ratio;
  state.counters["wire_bits_per_element"] = 32.0 * payload / static_cast<double>(n);
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// The streaming loop of an ISGQ step over `n` factor elements: a reduction over them, a byte
// written per element, and those bytes copied to the host.
struct to_byte {
  __host__ __device__ std::uint8_t operator()(float x) const { return static_cast<std::uint8_t>(x > 0.0f); }
};
struct isgq_stream_reference {
  backend_buffer w;
  gradcomp::backend_buffer<std::uint8_t, backend> codes;
  std::vector<std::uint8_t> host;
  std::size_t n;
  isgq_stream_reference(const backend& b, std::size_t count)
      : w(ops::allocate<float>(b, count)), codes(ops::allocate<std::uint8_t>(b, count)), host(count), n(count) {}
  void operator()() {
    float* wp = w.view().data();
    benchmark::DoNotOptimize(thrust::transform_reduce(cuda_system{}, wp, wp + n, absolute{}, 0.0f, larger{}));
    thrust::transform(cuda_system{}, wp, wp + n, codes.view().data(), to_byte{});
    ops::copy_to_host(backend{}, gradcomp::readonly(codes.view()), gradcomp::span<std::uint8_t>(host.data(), n));
  }
};

// args: n (the layer's inputs and outputs).
void BM_cuda_isgq_step(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t batch = 32;
  const backend b{};
  std::vector<float> host(batch * n);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto x = ops::allocate<float>(b, host.size());
  auto d = ops::allocate<float>(b, host.size());
  for (auto& v : host) v = normal(rng) < 0.0f ? 0.0f : normal(rng);  // half exact zeros, as after a ReLU
  ops::copy_to_backend(b, gradcomp::span<const float>(host.data(), host.size()), x.view());
  for (auto& v : host) v = 1e-3f * normal(rng);
  ops::copy_to_backend(b, gradcomp::span<const float>(host.data(), host.size()), d.view());
  gradcomp::isgq_config cfg;
  cfg.levels = 3;
  gradcomp::isgq_compressor<float, backend> c(cfg, b);
  c.add_layer("fc", n, n);
  bool ok = true;
  std::size_t payload = 0;
  auto step = [&] {
    const auto m = c.compress(0, gradcomp::readonly(x.view()), gradcomp::readonly(d.view()), batch);
    ok &= static_cast<bool>(m);
    payload = m ? m->payload.size() : 0;
  };
  isgq_stream_reference stream(b, 2 * batch * n);
  const double ratio = gradcomp_bench::timed_against(state, step, stream);
  if (!ok) state.SkipWithError("compress failed");
  state.counters["ratio_to_stream"] = ratio;
  state.counters["wire_bits_per_element"] = 8.0 * static_cast<double>(payload) / static_cast<double>(2 * batch * n);
  state.counters["elements_per_s"] =
      benchmark::Counter(static_cast<double>(2 * batch * n), benchmark::Counter::kIsIterationInvariantRate);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (const long n : {1L << 20, 1L << 24})
    for (const long method : {0L, 1L, 2L, 3L, 4L}) b->Args({n, method});
}

}  // namespace

BENCHMARK(BM_cuda_quantiser_step)->Apply(sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_quantiser_model)->DenseRange(0, 4)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_powersgd_model)->Arg(1)->Arg(4)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cuda_isgq_step)->Arg(1 << 12)->Arg(1 << 14)->UseManualTime()->Unit(benchmark::kMicrosecond);
