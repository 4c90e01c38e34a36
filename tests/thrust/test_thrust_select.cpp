// The Thrust backend's exact top-k against the CPU's, on Thrust's OpenMP and C++ systems (and on
// the CUDA system where nvcc compiles this file, thrust/systems.hpp): the same indices, count and
// threshold (bitwise) on both plans (plain radix select and sample-guided), with ties at the k-th
// magnitude, mostly zeros, infinities, NaN, k = 0 and k = n, float and double. Then DGC's sampled
// threshold against the CPU's: the same indices and every field of the selection result, on
// configurations that reach each branch of the adaptation loop.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/cpu/select_kernels.hpp>
#include <gradcomp/select/sampled_threshold.hpp>
#include <gradcomp/thrust/sampled.hpp>
#include <gradcomp/detail/rng.hpp>
#include <gradcomp/thrust/model_sampled.hpp>
#include <gradcomp/thrust/model_select.hpp>
#include <gradcomp/thrust/select.hpp>

#include "support/sanitized.hpp"
#include "thrust/systems.hpp"

namespace {

using gradcomp_test::primary_system;
using gradcomp_test::second_system;

enum class shape { gaussian, few_levels, mostly_zero, heavy_tail };

template <class T>
std::vector<T> input(std::size_t n, shape s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) {
    const double g = normal(rng);
    switch (s) {
      case shape::gaussian: x = static_cast<T>(g); break;
      case shape::few_levels: x = static_cast<T>(std::round(g * 2.0) / 2.0); break;  // many ties
      case shape::mostly_zero: x = rng() % 50 == 0 ? static_cast<T>(g) : T(0); break;
      case shape::heavy_tail: x = static_cast<T>(g * std::exp(3.0 * normal(rng))); break;
    }
  }
  return v;
}

struct outcome {
  gradcomp::errc error = gradcomp::errc::ok;
  std::vector<std::uint32_t> indices;
  std::vector<unsigned char> threshold;  // the bytes
};

// Runs one exact top-k, `topk(values, n, k, out, workspace, workspace_bytes, threshold)`, with a
// workspace of `workspace_bytes` bytes.
template <class T, class TopK>
outcome run_topk(const std::vector<T>& v, std::size_t k, std::size_t workspace_bytes, TopK&& topk) {
  outcome o;
  std::vector<std::byte> ws(workspace_bytes);
  std::vector<std::uint32_t> out(k + 1);
  T threshold{};
  const auto r = topk(v.data(), v.size(), k, out.data(), ws.data(), ws.size(), &threshold);
  if (!r) {
    o.error = r.error();
    return o;
  }
  o.indices.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(*r));
  o.threshold.resize(sizeof(T));
  std::memcpy(o.threshold.data(), &threshold, sizeof(T));
  return o;
}

template <class T>
outcome cpu_topk(const std::vector<T>& v, std::size_t k) {
  return run_topk(v, k, gradcomp::detail::cpu::exact_topk_workspace_bytes<T>(v.size(), k),
                  [](const T* values, std::size_t n, std::size_t kk, std::uint32_t* out, std::byte* ws,
                     std::size_t ws_bytes, T* threshold) {
                    return gradcomp::detail::cpu::exact_topk<T>(gradcomp::span<const T>(values, n), kk,
                                                                gradcomp::span<std::uint32_t>(out, kk + 1),
                                                                gradcomp::span<std::byte>(ws, ws_bytes), threshold);
                  });
}

// The Thrust top-k on System, its input, output and workspace in System's memory.
template <class T, class System>
outcome thrust_topk(const std::vector<T>& v, std::size_t k, std::size_t workspace_bytes) {
  using backend = gradcomp::thrust_backend<System>;
  using ops = gradcomp::detail::ops<backend>;
  const backend b{};
  auto values = ops::template allocate<T>(b, v.size());
  ops::copy_to_backend(b, gradcomp::span<const T>(v.data(), v.size()), values.view());
  auto out = ops::template allocate<std::uint32_t>(b, k + 1);
  auto ws = ops::template allocate<std::byte>(b, workspace_bytes);
  T threshold{};
  outcome o;
  const auto r = gradcomp::detail::thrust_impl::exact_topk<T, System>(
      b.stream, values.view().data(), v.size(), k, out.view().data(), ws.view().data(), workspace_bytes, &threshold);
  if (!r) {
    o.error = r.error();
    return o;
  }
  o.indices.resize(*r);
  ops::copy_to_host(b, gradcomp::readonly(out.view().first(*r)), gradcomp::span<std::uint32_t>(o.indices.data(), *r));
  o.threshold.resize(sizeof(T));
  std::memcpy(o.threshold.data(), &threshold, sizeof(T));
  return o;
}
template <class T, class System>
outcome thrust_topk(const std::vector<T>& v, std::size_t k) {
  using gradcomp::detail::thrust_impl::exact_topk_workspace_bytes;
  return thrust_topk<T, System>(v, k, exact_topk_workspace_bytes<T, System>(v.size(), k));
}

template <class T, class System>
void check_same(const std::vector<T>& v, std::size_t k) {
  const outcome a = thrust_topk<T, System>(v, k);
  const outcome b = cpu_topk(v, k);
  CHECK(a.error == b.error);
  CHECK(a.indices.size() == b.indices.size());
  CHECK(a.indices == b.indices);
  CHECK(a.threshold == b.threshold);
}

}  // namespace

TEST_CASE_TEMPLATE("thrust exact top-k: the CPU's indices and threshold on both plans", T, float, double) {
  // n below 2^15 takes the plain radix select; above, k <= n / 16 the sample-guided one.
  for (const std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(40000), std::size_t(300007)})
    for (const auto s : {shape::gaussian, shape::few_levels, shape::mostly_zero, shape::heavy_tail}) {
      const auto v = input<T>(n, s, n + static_cast<std::uint64_t>(s));
      for (const std::size_t k : {std::size_t(0), std::size_t(1), n / 1000, n / 100, n / 16, n / 3, n}) {
        if (k > n) continue;
        CAPTURE(n);
        CAPTURE(static_cast<int>(s));
        CAPTURE(k);
        check_same<T, primary_system>(v, k);
      }
    }
}

#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
TEST_CASE_TEMPLATE("thrust exact top-k on the GPU: its hand-written kernels, a fixed number of launches", T, float,
                   double) {
  // Every hand-written kernel goes through cuda_kernels::launch, which counts it: the plain radix
  // select is radix_init, one pass per digit and the compaction's three; the sample-guided plan
  // adds its cut's four. The count depends on the plan and the key's width, never on n.
  namespace impl = gradcomp::detail::thrust_impl;
  constexpr std::size_t digits = (gradcomp::detail::magnitude_traits<T>::key_bits + impl::radix_bits - 1) /
                                 impl::radix_bits;
  for (const std::size_t n : {std::size_t(40000), std::size_t(300007), std::size_t(9000011)})
    for (const std::size_t k : {n / 100, n / 3}) {
      CAPTURE(n);
      CAPTURE(k);
      const auto v = input<T>(n, shape::gaussian, n + k);
      const bool sampled = !gradcomp::detail::cpu::plan_topk(n, k).radix_only;
      const auto before = impl::cuda_kernels::kernel_launch_count.load();
      const outcome o = thrust_topk<T, primary_system>(v, k);
      CHECK(o.error == gradcomp::errc::ok);
      CHECK(impl::cuda_kernels::kernel_launch_count.load() - before == (sampled ? 4 : 0) + 1 + digits + 3);
    }
}
#endif

TEST_CASE("thrust exact top-k: many ties at the k-th magnitude, on the second system (C++; CUDA under nvcc)") {
  const auto v = input<float>(300007, shape::few_levels, 3);
  for (const std::size_t k : {std::size_t(300), std::size_t(3000), std::size_t(100000)}) check_same<float, second_system>(v, k);
}

TEST_CASE("thrust exact top-k: inputs of millions of elements, both plans") {
  // More than 1,024 tiles of 2,048 keys (the CUDA kernels scan the tiles' counts in several
  // chunks) and more keys than one grid of the histogram kernel covers in one sweep.
  const std::size_t n = 9000011;
  // Under AddressSanitizer, one shape: the sizes, not the values, reach these paths.
  const std::vector<shape> shapes = gradcomp_test::sanitized
                                        ? std::vector<shape>{shape::gaussian}
                                        : std::vector<shape>{shape::gaussian, shape::few_levels, shape::mostly_zero};
  for (const auto s : shapes) {
    const auto v = input<float>(n, s, 77 + static_cast<std::uint64_t>(s));
    for (const std::size_t k : {std::size_t(1), std::size_t(9000), n / 20, n - 1}) {
      // Past the Gaussian input, the two plans' sizes of k (the ties and zeros reach the same
      // paths at the others).
      if (s != shape::gaussian && (k == 1 || k == n - 1)) continue;
      CAPTURE(static_cast<int>(s));
      CAPTURE(k);
      check_same<float, primary_system>(v, k);
    }
  }
}

namespace {

// Where the sample-guided plan goes on `v`: -1 fewer than k pass the sample's cut, 0 the
// candidates are used, 1 more than the plan's capacity pass.
int sample_guided_branch(const std::vector<float>& v, std::size_t k) {
  namespace cpu = gradcomp::detail::cpu;
  using gradcomp::detail::magnitude_key;
  const cpu::topk_plan plan = cpu::plan_topk(v.size(), k);
  REQUIRE_FALSE(plan.radix_only);
  std::vector<std::uint32_t> sample;
  for (std::size_t i = plan.stride / 2; i < v.size(); i += plan.stride) sample.push_back(magnitude_key(v[i]));
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(plan.rank - 1), sample.end(),
                   std::greater<std::uint32_t>());
  const std::uint32_t cut = sample[plan.rank - 1];
  REQUIRE(cut != 0);
  std::size_t passing = 0;
  for (const float x : v) passing += magnitude_key(x) >= cut ? 1 : 0;
  return passing < k ? -1 : passing > plan.candidate_cap ? 1 : 0;
}

}  // namespace

TEST_CASE("thrust exact top-k: the sample-guided plan's fallbacks to the whole input") {
  // The sampled positions (stride / 2 + j * stride) hold the largest magnitudes: too few pass
  // the cut. Then they hold the smallest: far too many pass it. The result is the CPU's either way.
  const std::size_t n = 300007, k = n / 100;
  const std::size_t stride = gradcomp::detail::cpu::plan_topk(n, k).stride;
  auto v = input<float>(n, shape::gaussian, 21);
  for (std::size_t i = stride / 2; i < n; i += stride) v[i] = 100.0f + static_cast<float>(i % 13);
  CHECK(sample_guided_branch(v, k) == -1);
  check_same<float, primary_system>(v, k);
  for (std::size_t i = 0; i < n; ++i) v[i] = i % stride == stride / 2 ? 0.001f : 10.0f + static_cast<float>(i % 101);
  CHECK(sample_guided_branch(v, k) == 1);
  check_same<float, primary_system>(v, k);
  const auto normal = input<float>(n, shape::gaussian, 22);
  CHECK(sample_guided_branch(normal, k) == 0);
  check_same<float, primary_system>(normal, k);
}

TEST_CASE_TEMPLATE("thrust exact top-k: infinities are ordinary magnitudes, NaN is refused", T, float, double) {
  for (const std::size_t n : {std::size_t(5000), std::size_t(200000)}) {
    auto v = input<T>(n, shape::gaussian, 9);
    v[n / 7] = -std::numeric_limits<T>::infinity();
    v[n / 5] = std::numeric_limits<T>::infinity();
    check_same<T, primary_system>(v, n / 100);
    check_same<T, primary_system>(v, 1);
    v[n / 3] = std::numeric_limits<T>::quiet_NaN();
    CHECK(thrust_topk<T, primary_system>(v, n / 100).error == gradcomp::errc::nan_input);
    check_same<T, primary_system>(v, n / 100);
  }
}

TEST_CASE("thrust exact top-k: a workspace that is too small is refused") {
  const auto v = input<float>(100000, shape::gaussian, 4);
  const std::size_t enough =
      gradcomp::detail::thrust_impl::exact_topk_workspace_bytes<float, primary_system>(v.size(), 100);
  CHECK(thrust_topk<float, primary_system>(v, 100, enough / 2).error == gradcomp::errc::workspace_too_small);
  CHECK(thrust_topk<float, primary_system>(v, 100, enough).error == gradcomp::errc::ok);
}

namespace {

// The exact top-k of k of a tensor's size, from a table of distinct sizes (0 for a size not in
// it): the caller's mode of the model-wide top-k.
struct k_of_size {
  std::size_t n[16] = {};
  std::size_t k[16] = {};
  std::size_t count = 0;
  GRADCOMP_HD std::size_t operator()(std::size_t size) const {
    for (std::size_t i = 0; i < count; ++i)
      if (n[i] == size) return k[i];
    return 0;
  }
  template <class T>
  GRADCOMP_HD gradcomp::detail::thrust_impl::model_topk_mode operator()(
      const gradcomp::detail::model_tensor<T>&, std::uint32_t, std::size_t size) const {
    return {(*this)(size), gradcomp::detail::thrust_impl::model_topk_kind::planned, 0};
  }
  template <class T>
  gradcomp::detail::thrust_impl::model_topk_bounds bounds(const gradcomp::detail::model_tensor<T>&,
                                                          std::size_t size) const {
    return gradcomp::detail::thrust_impl::planned_bounds(size, (*this)(size));
  }
};

template <class T>
struct write_index {
  GRADCOMP_HD void operator()(const gradcomp::detail::model_tensor<T>& x, std::uint32_t, std::uint64_t j,
                              std::uint32_t index) const {
    x.indices[j] = index;
  }
};

// One tensor of a model-wide top-k: its values, k, and whether it has an error buffer to select
// from (none: skipped).
template <class T>
struct model_topk_case {
  std::vector<T> values;
  std::size_t k;
  bool selected = true;
};

// A model of the cases' tensors on System: each one's values and room for its indices in the
// system's memory, the model's table bound to them, k of each tensor's size.
template <class T, class System>
struct model_fixture {
  using backend = gradcomp::thrust_backend<System>;
  using ops = gradcomp::detail::ops<backend>;
  backend b{};
  k_of_size k_of;
  std::vector<typename ops::template buffer<T>> values;
  std::vector<typename ops::template buffer<std::uint32_t>> indices;
  gradcomp::detail::thrust_impl::model_table<T, System> m;

  explicit model_fixture(const std::vector<model_topk_case<T>>& cases) {
    std::vector<std::size_t> numel;
    std::vector<gradcomp::detail::model_items> items(cases.size());
    for (std::size_t t = 0; t < cases.size(); ++t) {
      const auto& c = cases[t];
      numel.push_back(c.values.size());
      items[t].count[1] = c.values.size();
      REQUIRE(k_of.count < 16);
      REQUIRE(k_of(c.values.size()) == 0);
      k_of.n[k_of.count] = c.values.size();
      k_of.k[k_of.count++] = c.k;
      values.push_back(ops::template allocate<T>(b, c.values.size()));
      ops::copy_to_backend(b, gradcomp::span<const T>(c.values.data(), c.values.size()), values.back().view());
      indices.push_back(ops::template allocate<std::uint32_t>(b, c.k + 1));
    }
    m = gradcomp::detail::thrust_impl::model_table<T, System>(
        gradcomp::span<const std::size_t>(numel.data(), numel.size()),
        gradcomp::span<const gradcomp::detail::model_items>(items.data(), items.size()));
    m.bind(b, [&](std::size_t t, gradcomp::detail::model_tensor<T>& entry) {
      entry.e = cases[t].selected ? values[t].view().data() : nullptr;
      entry.indices = indices[t].view().data();
    });
  }
};

// Every tensor's selection by the model-wide top-k on System, against the CPU's exact top-k of
// each: the same indices, count and threshold bits, a NaN refused for its tensor alone.
template <class T, class System>
void check_model_topk(const std::vector<model_topk_case<T>>& cases) {
  namespace impl = gradcomp::detail::thrust_impl;
  using ops = typename model_fixture<T, System>::ops;
  model_fixture<T, System> f(cases);
  const auto& b = f.b;
  const auto& m = f.m;
  const auto& k_of = f.k_of;
  const auto& indices = f.indices;
  impl::model_topk<T, System, k_of_size> topk(b.stream, m, 1, k_of);
  topk.issue(b.stream, m, nullptr);
  topk.for_each_selected(b.stream, m, write_index<T>{});
  std::vector<impl::model_topk_tensor<T>> sel(cases.size());
  impl::copy_bytes_to_host<System>(b.stream, topk.tensors(), sel.data(), sel.size() * sizeof(sel[0]));
  for (std::size_t t = 0; t < cases.size(); ++t) {
    CAPTURE(t);
    const auto& s = sel[t].s;
    if (!cases[t].selected) {
      CHECK(s.skipped != 0);
      CHECK(s.count == 0);
      continue;
    }
    CHECK(s.skipped == 0);
    const outcome expected = cpu_topk(cases[t].values, cases[t].k);
    if (expected.error == gradcomp::errc::nan_input) {
      CHECK(s.nan != 0);
      CHECK(s.count == 0);
      continue;
    }
    REQUIRE(expected.error == gradcomp::errc::ok);
    CHECK(s.nan == 0);
    REQUIRE(s.count == expected.indices.size());
    std::vector<std::uint32_t> got(expected.indices.size());
    ops::copy_to_host(b, gradcomp::readonly(indices[t].view().first(got.size())),
                      gradcomp::span<std::uint32_t>(got.data(), got.size()));
    CHECK(got == expected.indices);
    const T threshold = gradcomp::detail::value_of_key<T>(static_cast<gradcomp::detail::key_t<T>>(s.prefix));
    std::vector<unsigned char> bytes(sizeof(T));
    std::memcpy(bytes.data(), &threshold, sizeof(T));
    CHECK(bytes == expected.threshold);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("thrust model top-k: every tensor's selection is the CPU's, both plans and every fallback", T, float,
                   double) {
  // Tensors of one model, interleaved: sample-guided ones that keep their candidates, fall back
  // for mostly zeros (a zero cut), for too few passing the cut (the sampled positions hold the
  // largest magnitudes) and for too many (they hold the smallest); plain radix ones with ties at
  // the k-th magnitude, k = n, k = 0, one element, infinities; a NaN (refused for its tensor
  // alone); a tensor without a buffer (skipped). The CPU's indices and threshold bits for each.
  // Under AddressSanitizer, float only.
  if (gradcomp_test::sanitized && sizeof(T) == 8) return;
  std::vector<model_topk_case<T>> cases;
  cases.push_back({input<T>(50000, shape::gaussian, 1), 500});
  cases.push_back({input<T>(3000, shape::gaussian, 2), 30, false});
  cases.push_back({input<T>(300, shape::few_levels, 3), 40});
  cases.push_back({input<T>(40000, shape::mostly_zero, 4), 400});
  auto high = input<T>(60000, shape::gaussian, 5);
  const std::size_t high_stride = gradcomp::detail::cpu::plan_topk(high.size(), 600).stride;
  for (std::size_t i = high_stride / 2; i < high.size(); i += high_stride) high[i] = T(100) + T(i % 13);
  cases.push_back({high, 600});
  std::vector<T> low(70000);
  const std::size_t low_stride = gradcomp::detail::cpu::plan_topk(low.size(), 700).stride;
  for (std::size_t i = 0; i < low.size(); ++i)
    low[i] = i % low_stride == low_stride / 2 ? T(0.001) : T(10) + T(i % 101);
  cases.push_back({low, 700});
  cases.push_back({input<T>(45000, shape::heavy_tail, 7), 45000 / 16});
  auto inf = input<T>(5000, shape::gaussian, 8);
  inf[700] = std::numeric_limits<T>::infinity();
  inf[3000] = -std::numeric_limits<T>::infinity();
  cases.push_back({inf, 50});
  auto nan = input<T>(33000, shape::gaussian, 9);
  nan[11000] = std::numeric_limits<T>::quiet_NaN();
  cases.push_back({nan, 100});
  cases.push_back({input<T>(1, shape::gaussian, 10), 1});
  cases.push_back({input<T>(100, shape::few_levels, 11), 100});
  cases.push_back({input<T>(65536, shape::few_levels, 12), 3000});
  cases.push_back({input<T>(200, shape::gaussian, 13), 0});
  cases.push_back({input<T>(40001, shape::gaussian, 14), 40});
  // The primary system here (OpenMP; CUDA under nvcc); the C++ system's algorithms run the same
  // selections in the launch test's full-size DGC steps (test_thrust_launches.cpp).
  check_model_topk<T, primary_system>(cases);
}

TEST_CASE("thrust model top-k: one tensor, and a model of tensors that all select over every element") {
  check_model_topk<float, primary_system>({{input<float>(9000011 / 100, shape::gaussian, 31), 901}});
  check_model_topk<float, primary_system>({{input<float>(1000, shape::few_levels, 32), 10},
                                           {input<float>(2000, shape::few_levels, 33), 1000},
                                           {input<float>(40000, shape::gaussian, 34), 20000}});
}

namespace {

template <class T>
struct sampled_outcome {
  gradcomp::errc error = gradcomp::errc::ok;
  std::vector<std::uint32_t> indices;
  gradcomp::selection_result<T> res;
};

template <class T>
sampled_outcome<T> cpu_sampled(const std::vector<T>& v, std::size_t k, const gradcomp::sampled_threshold_config& cfg,
                               std::uint64_t seed) {
  namespace cpu = gradcomp::detail::cpu;
  std::vector<std::byte> ws(cpu::sampled_threshold_workspace_bytes<T>(cfg, v.size(), k));
  std::vector<std::uint32_t> out(k);
  sampled_outcome<T> o;
  const auto r = cpu::sampled_threshold_select<T>(gradcomp::span<const T>(v.data(), v.size()), k, cfg, seed,
                                                  gradcomp::span<std::uint32_t>(out.data(), k),
                                                  gradcomp::span<std::byte>(ws.data(), ws.size()));
  if (!r) {
    o.error = r.error();
    return o;
  }
  o.res = *r;
  o.indices.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(r->count));
  return o;
}

template <class T, class System>
sampled_outcome<T> thrust_sampled(const std::vector<T>& v, std::size_t k, const gradcomp::sampled_threshold_config& cfg,
                                  std::uint64_t seed) {
  using backend = gradcomp::thrust_backend<System>;
  using ops = gradcomp::detail::ops<backend>;
  const backend b{};
  auto values = ops::template allocate<T>(b, v.size());
  ops::copy_to_backend(b, gradcomp::span<const T>(v.data(), v.size()), values.view());
  auto out = ops::template allocate<std::uint32_t>(b, k);
  auto ws = ops::template allocate<std::byte>(b, ops::template sampled_threshold_workspace_bytes<T>(b, cfg, v.size(), k));
  sampled_outcome<T> o;
  const auto r = gradcomp::sampled_threshold_select(b, gradcomp::readonly(values.view()), k, cfg, seed, out.view(),
                                                    ws.view());
  if (!r) {
    o.error = r.error();
    return o;
  }
  o.res = *r;
  o.indices.resize(r->count);
  ops::copy_to_host(b, gradcomp::readonly(out.view().first(r->count)),
                    gradcomp::span<std::uint32_t>(o.indices.data(), r->count));
  return o;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T, class System>
sampled_outcome<T> check_same_sampled(const std::vector<T>& v, std::size_t k, const gradcomp::sampled_threshold_config& cfg,
                        std::uint64_t seed) {
  const auto a = thrust_sampled<T, System>(v, k, cfg, seed);
  const auto b = cpu_sampled<T>(v, k, cfg, seed);
  REQUIRE(a.error == b.error);
  CHECK(a.indices == b.indices);
  CHECK(a.res.count == b.res.count);
  CHECK(a.res.target == b.res.target);
  CHECK(same_bits(a.res.threshold, b.res.threshold));
  CHECK(a.res.sample_count == b.res.sample_count);
  CHECK(a.res.rounds == b.res.rounds);
  CHECK(a.res.exact == b.res.exact);
  return b;
}

// Configurations that lead the adaptation loop through each of its branches.
std::vector<gradcomp::sampled_threshold_config> sampled_configs() {
  std::vector<gradcomp::sampled_threshold_config> out;
  gradcomp::sampled_threshold_config c;
  out.push_back(c);  // the defaults: strided, truncation to the largest
  c.sampling = gradcomp::sampling_mode::uniform;
  out.push_back(c);
  c = {};
  c.truncation = gradcomp::truncation_mode::index_order;  // the first k by index
  c.upper_bound = 3.0;
  out.push_back(c);
  c = {};
  c.lower_bound = 1.0;  // more rounds with a lower threshold
  c.threshold_decay = 0.9;
  c.max_rounds = 4;
  c.sample_ratio = 0.002;
  out.push_back(c);
  c = {};
  c.lower_bound = 1.0;  // the second round lets far too many through: the exact top-k
  c.threshold_decay = 0.01;
  c.sample_ratio = 0.001;
  out.push_back(c);
  c = {};
  c.sample_ratio = 1.0;  // every element sampled
  c.sampling = gradcomp::sampling_mode::uniform;
  out.push_back(c);
  c = {};
  c.lower_bound = 1.0;  // many rounds, each a little lower: the device counts them in several passes
  c.threshold_decay = 0.999;
  c.max_rounds = 40;
  out.push_back(c);
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("thrust sampled threshold: the CPU's indices and selection result, every branch", T, float, double) {
  const auto configs = sampled_configs();
  // The branches the inputs reached, so that the comparison cannot pass on one path alone.
  bool plain_radix = false, several_rounds = false, more_rounds_than_a_pass = false, exact_of_all = false,
       exact_of_candidates = false, first_k = false, accepted = false;
  for (const std::size_t n : {std::size_t(1000), std::size_t(40000), std::size_t(300007)})
    for (const auto s : {shape::gaussian, shape::few_levels, shape::mostly_zero, shape::heavy_tail}) {
      const auto v = input<T>(n, s, 7 * n + static_cast<std::uint64_t>(s));
      for (const std::size_t k : {std::size_t(1), std::size_t(2), n / 1000, n / 100, n / 20})
        for (std::size_t c = 0; c < configs.size(); ++c)
          for (const std::uint64_t seed : {std::uint64_t(3), std::uint64_t(1234567)}) {
            // The second seed on the smaller inputs only; under AddressSanitizer, the first seed
            // only, and the largest input in one shape: the flags below must still all be set.
            if (k == 0 || (n > 40000 && seed != 3) ||
                (gradcomp_test::sanitized && (seed != 3 || (n > 40000 && s != shape::gaussian))))
              continue;
            CAPTURE(n);
            CAPTURE(static_cast<int>(s));
            CAPTURE(k);
            CAPTURE(c);
            CAPTURE(seed);
            const auto o = check_same_sampled<T, primary_system>(v, k, configs[c], seed);
            const auto& r = o.res;
            plain_radix |= r.exact && r.sample_count == 0;
            several_rounds |= r.rounds > 1;
            more_rounds_than_a_pass |= r.rounds > gradcomp::detail::thrust_impl::rounds_per_count;
            exact_of_all |= r.exact && r.sample_count > 0 && r.rounds > 1;
            exact_of_candidates |= r.exact && r.sample_count > 0 && r.rounds == 1;
            first_k |= !r.exact && r.count == k && configs[c].truncation == gradcomp::truncation_mode::index_order;
            accepted |= !r.exact && r.count < k;
          }
    }
  CHECK(plain_radix);
  CHECK(several_rounds);
  CHECK(more_rounds_than_a_pass);
  CHECK(exact_of_all);
  CHECK(exact_of_candidates);
  CHECK(first_k);
  CHECK(accepted);
}

namespace {

// Where the outcome of each tensor of a model-wide selection goes: one selection_result, status
// and count per tensor.
template <class T>
struct outcome_sink {
  gradcomp::selection_result<T>* results;
  std::int32_t* status;
  std::uint64_t* kept;
  GRADCOMP_HD gradcomp::detail::thrust_impl::selection_sink<T> operator()(std::uint32_t t) const {
    return {results + t, status + t, kept + t};
  }
};

// Every tensor's selection by the model-wide sampled threshold on System (the seeds of tensor t
// derived from `seed`, t and `step`), against the CPU's sampled threshold of each: the same
// indices, error and every field of the selection result. Returns the paths the tensors took.
template <class T, class System>
std::vector<std::int32_t> check_model_sampled(const std::vector<model_topk_case<T>>& cases,
                                              const gradcomp::sampled_threshold_config& cfg, std::uint64_t seed,
                                              std::uint64_t step) {
  namespace impl = gradcomp::detail::thrust_impl;
  using ops = typename model_fixture<T, System>::ops;
  model_fixture<T, System> f(cases);
  const auto& b = f.b;
  const auto& m = f.m;
  const auto& k_of = f.k_of;
  const auto& indices = f.indices;
  auto results = ops::template allocate<gradcomp::selection_result<T>>(b, cases.size());
  auto status = ops::template allocate<std::int32_t>(b, cases.size());
  auto kept = ops::template allocate<std::uint64_t>(b, cases.size());
  impl::model_sampled<T, System, k_of_size> selection(b.stream, m, 1, k_of, cfg);
  selection.issue(b.stream, m, seed, step, nullptr,
                  outcome_sink<T>{results.view().data(), status.view().data(), kept.view().data()}, write_index<T>{});
  std::vector<gradcomp::selection_result<T>> res(cases.size());
  std::vector<std::int32_t> errors(cases.size());
  std::vector<std::uint64_t> counts(cases.size());
  std::vector<impl::model_sampled_tensor<T>> sel(cases.size());
  ops::copy_to_host(b, gradcomp::readonly(results.view()),
                    gradcomp::span<gradcomp::selection_result<T>>(res.data(), res.size()));
  ops::copy_to_host(b, gradcomp::readonly(status.view()), gradcomp::span<std::int32_t>(errors.data(), errors.size()));
  ops::copy_to_host(b, gradcomp::readonly(kept.view()), gradcomp::span<std::uint64_t>(counts.data(), counts.size()));
  impl::copy_bytes_to_host<System>(b.stream, selection.tensors(), sel.data(), sel.size() * sizeof(sel[0]));
  std::vector<std::int32_t> paths;
  for (std::size_t t = 0; t < cases.size(); ++t) {
    CAPTURE(t);
    if (!cases[t].selected) {
      CHECK(counts[t] == 0);
      continue;
    }
    paths.push_back(sel[t].kind == impl::model_sampled_kind::exact ? -1 : sel[t].st.action);
    const auto expected =
        cpu_sampled<T>(cases[t].values, cases[t].k, cfg, gradcomp::detail::derive_seed(seed, t, step));
    CHECK(static_cast<gradcomp::errc>(errors[t]) == expected.error);
    if (expected.error != gradcomp::errc::ok) continue;
    REQUIRE(counts[t] == expected.res.count);
    std::vector<std::uint32_t> got(expected.res.count);
    ops::copy_to_host(b, gradcomp::readonly(indices[t].view().first(got.size())),
                      gradcomp::span<std::uint32_t>(got.data(), got.size()));
    CHECK(got == expected.indices);
    CHECK(res[t].count == expected.res.count);
    CHECK(res[t].target == expected.res.target);
    CHECK(same_bits(res[t].threshold, expected.res.threshold));
    CHECK(res[t].sample_count == expected.res.sample_count);
    CHECK(res[t].rounds == expected.res.rounds);
    CHECK(res[t].exact == expected.res.exact);
  }
  return paths;
}

}  // namespace

TEST_CASE_TEMPLATE("thrust model sampled threshold: every tensor's selection is the CPU's, every path", T, float,
                   double) {
  // One model of tensors of every shape and size, each with its own seed, under every
  // configuration of the single-tensor test: every path of the adaptation loop is taken by some
  // tensor (the plain radix select where a tensor is too small to sample, the exact top-k of all
  // or of the candidates, the first k, acceptance), a NaN refused for its tensor alone, a tensor
  // without a buffer skipped.
  namespace impl = gradcomp::detail::thrust_impl;
  std::vector<model_topk_case<T>> cases;
  cases.push_back({input<T>(40000, shape::gaussian, 1), 400});
  cases.push_back({input<T>(3000, shape::gaussian, 2), 30, false});
  cases.push_back({input<T>(1000, shape::few_levels, 3), 10});
  cases.push_back({input<T>(300007, shape::mostly_zero, 4), 3000});
  cases.push_back({input<T>(64, shape::gaussian, 5), 64});
  cases.push_back({input<T>(40001, shape::few_levels, 6), 40});
  cases.push_back({input<T>(30000, shape::heavy_tail, 7), 1500});
  auto nan = input<T>(20000, shape::gaussian, 8);
  nan[777] = std::numeric_limits<T>::quiet_NaN();
  cases.push_back({nan, 20});
  cases.push_back({input<T>(300, shape::gaussian, 9), 2});
  cases.push_back({input<T>(100003, shape::gaussian, 10), 5000});
  // Under AddressSanitizer, float only and one step: the paths, not the types, reach the code.
  if (gradcomp_test::sanitized && sizeof(T) == 8) return;
  std::set<std::int32_t> reached;
  for (const auto& cfg : sampled_configs())
    for (const std::uint64_t step : {std::uint64_t(0), std::uint64_t(7)}) {
      if (gradcomp_test::sanitized && step != 0) continue;
      CAPTURE(static_cast<int>(cfg.sampling));
      CAPTURE(cfg.max_rounds);
      CAPTURE(step);
      for (const std::int32_t p : check_model_sampled<T, primary_system>(cases, cfg, 11, step)) reached.insert(p);
    }
  using action = impl::sampled_action;
  for (const std::int32_t p : {-1, static_cast<std::int32_t>(action::exact_all),
                               static_cast<std::int32_t>(action::exact_candidates),
                               static_cast<std::int32_t>(action::first_k), static_cast<std::int32_t>(action::accept),
                               static_cast<std::int32_t>(action::refuse_nan)}) {
    CAPTURE(p);
    CHECK(reached.count(p) == 1);
  }
}

TEST_CASE("thrust sampled threshold: NaN is refused as on the CPU, on the second system too") {
  auto v = input<float>(200000, shape::gaussian, 11);
  for (const auto& cfg : sampled_configs()) check_same_sampled<float, second_system>(v, 2000, cfg, 5);
  v[123457] = std::numeric_limits<float>::quiet_NaN();
  for (const auto& cfg : sampled_configs()) {
    CHECK(thrust_sampled<float, primary_system>(v, 2000, cfg, 5).error == gradcomp::errc::nan_input);
    check_same_sampled<float, primary_system>(v, 2000, cfg, 5);
  }
}
