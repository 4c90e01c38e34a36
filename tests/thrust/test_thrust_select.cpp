// The Thrust backend's exact top-k against the CPU's, on Thrust's OpenMP and C++ systems (and on
// the CUDA system where nvcc compiles this file, thrust/systems.hpp): the same indices, count and threshold (bitwise) on both plans (plain radix select and
// sample-guided), with ties at the k-th magnitude, mostly zeros, infinities, NaN, k = 0 and
// k = n, float and double.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/cpu/select_kernels.hpp>
#include <gradcomp/thrust/select.hpp>

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
      values.view().data(), v.size(), k, out.view().data(), ws.view().data(), workspace_bytes, &threshold);
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
  return thrust_topk<T, System>(v, k, gradcomp::detail::thrust_impl::exact_topk_workspace_bytes<T>(v.size(), k));
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

TEST_CASE("thrust exact top-k: many ties at the k-th magnitude, on the second system (C++; CUDA under nvcc)") {
  const auto v = input<float>(300007, shape::few_levels, 3);
  for (const std::size_t k : {std::size_t(300), std::size_t(3000), std::size_t(100000)}) check_same<float, second_system>(v, k);
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
  const std::size_t enough = gradcomp::detail::thrust_impl::exact_topk_workspace_bytes<float>(v.size(), 100);
  CHECK(thrust_topk<float, primary_system>(v, 100, enough / 2).error == gradcomp::errc::workspace_too_small);
  CHECK(thrust_topk<float, primary_system>(v, 100, enough).error == gradcomp::errc::ok);
}
