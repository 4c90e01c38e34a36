// Decode-and-accumulate on the GPU: 8 workers' gradient messages of a whole ResNet-50
// (bench/data/resnet50.txt, 161 tensors, 25.6 M parameters), each tensor keeping a share of its
// elements (args: per million, index coding 0 raw_u32 / 1 delta_varint / 2 bitmap / 3 rice, fp32
// values, a CRC-32C), gathered in one buffer of device memory as an allgather leaves them (each in
// a slot of the longest one's length, with its length), then decoded and added into the
// receiver's accumulators by a wire::device_accumulator, all 8 in one accumulate_all call (a fixed
// number of launches), on one stream; timed (CUDA events) against the same additions without any
// decoding or checking in the same iteration: a scatter-add of every worker's positions and values,
// already as 32-bit integers and floats in device memory. ratio_to_scatter = scatter time / decode
// time. message_bytes: one worker's message.
// The list is read from $GRADCOMP_BENCH_DATA if set (a GPU machine's copy of bench/data), else
// from the source tree this binary was built from.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/thrust.hpp>
#include <gradcomp/thrust/wire_decode.hpp>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/execution_policy.h>

#include "../model_list.hpp"
#include "gpu_timing.cuh"

namespace {

using cuda_system = thrust::system::cuda::tag;
using backend = gradcomp::thrust_backend<cuda_system>;
using space = gradcomp::memory_space_t<backend>;

constexpr int workers = 8;

// acc[tensor[e]][index[e]] += value[e] for every entry e of every worker: the additions alone.
struct scatter_add {
  float* const* acc;
  const std::uint32_t* tensor;
  const std::uint32_t* index;
  const float* value;
  __device__ void operator()(std::size_t e) const { acc[tensor[e]][index[e]] += value[e]; }
};

void BM_cuda_decode_accumulate(benchmark::State& state) {
  if (!gradcomp_bench::have_device(state)) return;
  std::vector<gradcomp_bench::tensor_spec> model;
  if (!gradcomp_bench::load_resnet50(state, model)) return;
  const double density = static_cast<double>(state.range(0)) * 1e-6;
  const gradcomp::wire::index_coding codings[] = {
      gradcomp::wire::index_coding::raw_u32, gradcomp::wire::index_coding::delta_varint,
      gradcomp::wire::index_coding::bitmap, gradcomp::wire::index_coding::rice};
  gradcomp::wire::encode_options opt;
  opt.indices = codings[state.range(1)];
  opt.checksum = true;

  // Every worker's message (positions at random, values normal), and the same entries flat.
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<std::byte>> messages;
  std::vector<std::uint64_t> lengths;
  std::vector<std::uint32_t> flat_tensor, flat_index;
  std::vector<float> flat_value;
  for (int w = 0; w < workers; ++w) {
    std::vector<std::vector<std::uint32_t>> idx(model.size());
    std::vector<std::vector<float>> val(model.size());
    std::vector<gradcomp::tensor_message<float>> sections(model.size());
    for (std::size_t t = 0; t < model.size(); ++t) {
      const auto n = static_cast<std::uint32_t>(model[t].numel);
      const auto every = static_cast<std::uint32_t>(1.0 / density);
      for (std::uint32_t i = static_cast<std::uint32_t>(rng() % every); i < n;
           i += 1 + static_cast<std::uint32_t>(rng() % (2 * every - 1))) {
        idx[t].push_back(i);
        val[t].push_back(normal(rng));
        flat_tensor.push_back(static_cast<std::uint32_t>(t));
        flat_index.push_back(i);
        flat_value.push_back(val[t].back());
      }
      sections[t].tensor = t;
      sections[t].numel = n;
      sections[t].indices = gradcomp::span<const std::uint32_t>(idx[t].data(), idx[t].size());
      sections[t].values = gradcomp::span<const float>(val[t].data(), val[t].size());
    }
    const auto m = gradcomp::wire::encode(
        gradcomp::span<const gradcomp::tensor_message<float>>(sections.data(), sections.size()), opt);
    messages.push_back(m);
    lengths.push_back(m.size());
  }
  std::size_t longest = 0;
  for (const std::size_t l : lengths) longest = l > longest ? l : longest;
  std::vector<std::byte> gathered(workers * longest);
  for (int w = 0; w < workers; ++w)
    std::copy(messages[w].begin(), messages[w].end(), gathered.begin() + static_cast<std::ptrdiff_t>(w * longest));

  const backend b{};
  std::vector<gradcomp::backend_buffer<float, backend>> acc;
  std::vector<gradcomp::span<float, space>> views;
  std::vector<float*> pointers;
  bool ok = true;
  for (const auto& t : model) {
    acc.push_back(gradcomp::allocate_buffer<float>(b, t.numel));
    const std::vector<float> zero(t.numel, 0.0f);
    ok &= static_cast<bool>(gradcomp::copy_to_backend(b, gradcomp::span<const float>(zero.data(), zero.size()),
                                                      acc.back().view()));
    views.push_back(acc.back().view());
    pointers.push_back(acc.back().view().data());
  }
  auto upload = [&](const auto& host) {
    using V = typename std::decay_t<decltype(host)>::value_type;
    auto buf = gradcomp::allocate_buffer<V>(b, host.size());
    ok &= static_cast<bool>(gradcomp::copy_to_backend(b, gradcomp::span<const V>(host.data(), host.size()), buf.view()));
    return buf;
  };
  auto bytes = upload(gathered);
  auto length = upload(lengths);
  auto tensors = upload(flat_tensor);
  auto indices = upload(flat_index);
  auto values = upload(flat_value);
  auto table = upload(pointers);
  auto outcomes = gradcomp::allocate_buffer<std::uint64_t>(b, 2 * workers);
  gradcomp::wire::device_accumulator<float, backend> decoder(
      b, gradcomp::span<const gradcomp::span<float, space>>(views.data(), views.size()), longest, {}, {}, workers);

  auto decode = [&] {
    ok &= static_cast<bool>(decoder.accumulate_all(b, gradcomp::readonly(bytes.view()), longest,
                                                   gradcomp::readonly(length.view()), outcomes.view()));
  };
  auto scatter = [&] {
    thrust::for_each_n(thrust::cuda::par_nosync, thrust::counting_iterator<std::size_t>(0), flat_value.size(),
                       scatter_add{table.view().data(), tensors.view().data(), indices.view().data(),
                                   values.view().data()});
  };
  const double ratio = gradcomp_bench::timed_against(state, decode, scatter);
  std::vector<std::uint64_t> result(2 * workers);
  ok &= static_cast<bool>(gradcomp::copy_to_host(b, gradcomp::readonly(outcomes.view()),
                                                 gradcomp::span<std::uint64_t>(result.data(), result.size())));
  gradcomp::synchronize(b);
  for (int w = 0; w < workers; ++w) ok &= result[2 * w] == 0;
  if (!ok) state.SkipWithError("a message was refused or a call failed");
  state.counters["ratio_to_scatter"] = ratio;
  state.counters["message_bytes"] = static_cast<double>(lengths[0]);
  state.counters["workers"] = workers;
  state.counters["entries"] = static_cast<double>(flat_value.size());
}

}  // namespace

BENCHMARK(BM_cuda_decode_accumulate)
    ->ArgsProduct({{1000, 10000}, {0, 1, 2, 3}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
