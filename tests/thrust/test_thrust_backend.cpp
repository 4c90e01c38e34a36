// The portable Thrust backend on Thrust's OpenMP and C++ systems on the CPU, and on the CUDA
// system where nvcc compiles this file for the CUDA tests (thrust/systems.hpp): each of its
// operations against the CPU backend's on data that exposes order and arithmetic differences
// (large sizes, so that the OpenMP system splits the work; NaN, infinities, values near the
// largest finite one), then the aggregator's part of the conformance suite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/cpu/ops.hpp>
#include <gradcomp/thrust.hpp>

#include "backend/aggregator_conformance.hpp"
#include "backend/conformance.hpp"
#include "thrust/data.hpp"
#include "thrust/systems.hpp"

#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
#include <cuda_runtime_api.h>
#endif

namespace {

using gradcomp_test::bitwise_same;
using gradcomp_test::gaussian;

using gradcomp_test::primary_backend;
using cpu_ops = gradcomp::detail::ops<gradcomp::cpu_backend>;

static_assert(gradcomp::is_backend_v<primary_backend>, "a backend");
static_assert(!gradcomp::is_host_accessible_v<gradcomp::memory_space_t<primary_backend>>,
              "the Thrust backend's memory is reached only through its copies, whatever its system");

// Sorted distinct positions below n, about one in `every`.
std::vector<std::uint32_t> positions(std::size_t n, std::size_t every, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> idx;
  for (std::size_t i = 0; i < n; ++i)
    if (rng() % every == 0) idx.push_back(static_cast<std::uint32_t>(i));
  return idx;
}

template <class T>
gradcomp::span<T> host(std::vector<T>& v) {
  return gradcomp::span<T>(v.data(), v.size());
}
template <class T>
gradcomp::span<const T> host_const(const std::vector<T>& v) {
  return gradcomp::span<const T>(v.data(), v.size());
}

bool same_double(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

constexpr std::size_t n_large = 100003;  // odd, and large enough for every OpenMP thread to work

}  // namespace

TEST_CASE_TEMPLATE("thrust backend: buffers are zeroed, copied deeply and moved", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  using ops = gradcomp::detail::ops<Backend>;
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend b{};
  auto zero = ops::template allocate<double>(b, 1000);
  CHECK(zero.size() == 1000);
  CHECK(harness::template download<double>(b, gradcomp::readonly(zero.view())) == std::vector<double>(1000, 0.0));
  const auto values = gaussian<float>(777, 1);
  auto a = harness::upload(b, values);
  auto copy = a;  // deep
  ops::fill_zero(b, a.view());
  CHECK(harness::template download<float>(b, gradcomp::readonly(copy.view())) == values);
  CHECK(harness::template download<float>(b, gradcomp::readonly(a.view())) == std::vector<float>(777, 0.0f));
  auto moved = std::move(copy);
  CHECK(copy.empty());
  CHECK(harness::template download<float>(b, gradcomp::readonly(moved.view())) == values);
  typename ops::template buffer<float> none;
  CHECK(none.empty());
  none = moved;
  CHECK(harness::template download<float>(b, gradcomp::readonly(none.view())) == values);
}

TEST_CASE_TEMPLATE("thrust backend: add, scatter_add, scale and momentum_apply are bitwise the CPU's", T, float,
                   double) {
  using ops = gradcomp::detail::ops<primary_backend>;
  using harness = gradcomp_test::backend_harness<primary_backend>;
  const primary_backend b{};
  const auto acc0 = gaussian<T>(n_large, 2, 3.0);
  const auto values = gaussian<T>(n_large, 3, 0.7);
  const auto idx = positions(n_large, 7, 4);
  const auto sparse_values = gaussian<T>(idx.size(), 5);

  SUBCASE("add") {
    auto expected = acc0;
    cpu_ops::add(gradcomp::cpu_backend{}, host_const(values), host(expected));
    auto acc = harness::upload(b, acc0);
    const auto v = harness::upload(b, values);
    ops::add(b, gradcomp::readonly(v.view()), acc.view());
    CHECK(bitwise_same(harness::template download<T>(b, gradcomp::readonly(acc.view())), expected));
  }
  SUBCASE("scatter_add") {
    auto expected = acc0;
    cpu_ops::scatter_add(gradcomp::cpu_backend{}, host_const(idx), host_const(sparse_values), host(expected));
    auto acc = harness::upload(b, acc0);
    const auto i = harness::upload(b, idx);
    const auto v = harness::upload(b, sparse_values);
    ops::scatter_add(b, gradcomp::readonly(i.view()), gradcomp::readonly(v.view()), acc.view());
    CHECK(bitwise_same(harness::template download<T>(b, gradcomp::readonly(acc.view())), expected));
  }
  SUBCASE("scale") {
    auto expected = acc0;
    const T c = static_cast<T>(1.0 / 3.0);
    cpu_ops::scale(gradcomp::cpu_backend{}, c, host(expected));
    auto x = harness::upload(b, acc0);
    ops::scale(b, c, x.view());
    CHECK(bitwise_same(harness::template download<T>(b, gradcomp::readonly(x.view())), expected));
  }
  SUBCASE("momentum_apply") {
    for (const auto kind : {gradcomp::momentum_kind::none, gradcomp::momentum_kind::vanilla,
                            gradcomp::momentum_kind::nesterov}) {
      CAPTURE(static_cast<int>(kind));
      auto u_expected = acc0;
      auto a_expected = values;
      const T m = static_cast<T>(0.9);
      cpu_ops::momentum_apply(gradcomp::cpu_backend{}, kind, m, host(u_expected), host(a_expected));
      auto u = harness::upload(b, acc0);
      auto a = harness::upload(b, values);
      ops::momentum_apply(b, kind, m, u.view(), a.view());
      CHECK(bitwise_same(harness::template download<T>(b, gradcomp::readonly(u.view())), u_expected));
      CHECK(bitwise_same(harness::template download<T>(b, gradcomp::readonly(a.view())), a_expected));
    }
  }
}

TEST_CASE_TEMPLATE("thrust backend: the reductions are the CPU's, NaN and overflow included", T, float, double) {
  using ops = gradcomp::detail::ops<primary_backend>;
  using harness = gradcomp_test::backend_harness<primary_backend>;
  const primary_backend b{};
  const gradcomp::cpu_backend cpu{};
  const T big = std::numeric_limits<T>::max() / T(2) * T(1.5);  // two of them overflow
  auto acc0 = gaussian<T>(n_large, 6, 2.0);
  auto values = gaussian<T>(n_large, 7, 2.0);
  const auto idx = positions(n_large, 5, 8);
  auto sparse_values = gaussian<T>(idx.size(), 9);

  SUBCASE("largest_magnitude") {
    for (int variant = 0; variant < 4; ++variant) {
      CAPTURE(variant);
      auto v = values;
      if (variant == 1) v[n_large / 2] = std::numeric_limits<T>::quiet_NaN();
      if (variant == 2) v[n_large - 1] = -std::numeric_limits<T>::infinity();
      if (variant == 3) v[0] = -big;
      const auto d = harness::upload(b, v);
      CHECK(same_double(ops::largest_magnitude(b, gradcomp::readonly(d.view())),
                        cpu_ops::largest_magnitude(cpu, host_const(v))));
    }
    const auto empty = harness::upload(b, std::vector<T>());
    CHECK(ops::largest_magnitude(b, gradcomp::readonly(empty.view())) == 0.0);
  }
  SUBCASE("largest_magnitude_of_sum") {
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      auto acc = acc0;
      if (variant >= 1) {  // one sum overflows, sparse and dense
        acc[idx[idx.size() / 2]] = big;
        sparse_values[idx.size() / 2] = big;
        acc[n_large / 3] = big;
        values[n_large / 3] = big;
      }
      if (variant == 2) acc[idx[1]] = std::numeric_limits<T>::quiet_NaN();
      const auto d_acc = harness::upload(b, acc);
      const auto d_idx = harness::upload(b, idx);
      const auto d_sparse = harness::upload(b, sparse_values);
      const auto d_values = harness::upload(b, values);
      const auto no_idx = harness::upload(b, std::vector<std::uint32_t>());
      CHECK(same_double(
          ops::largest_magnitude_of_sum(b, gradcomp::readonly(d_acc.view()), gradcomp::readonly(d_idx.view()),
                                        gradcomp::readonly(d_sparse.view())),
          cpu_ops::largest_magnitude_of_sum(cpu, host_const(acc), host_const(idx), host_const(sparse_values))));
      CHECK(same_double(
          ops::largest_magnitude_of_sum(b, gradcomp::readonly(d_acc.view()), gradcomp::readonly(no_idx.view()),
                                        gradcomp::readonly(d_values.view())),
          cpu_ops::largest_magnitude_of_sum(cpu, host_const(acc), gradcomp::span<const std::uint32_t>(),
                                            host_const(values))));
    }
  }
  SUBCASE("momentum_apply_magnitudes") {
    for (const auto kind : {gradcomp::momentum_kind::none, gradcomp::momentum_kind::vanilla,
                            gradcomp::momentum_kind::nesterov})
      for (const bool scaled : {false, true})
        for (const bool overflow : {false, true}) {
          CAPTURE(static_cast<int>(kind));
          CAPTURE(scaled);
          CAPTURE(overflow);
          auto u = acc0;
          auto a = values;
          if (overflow) {
            u[77] = big;
            a[77] = big;
          }
          const T m = static_cast<T>(0.9), inv = static_cast<T>(0.25);
          const auto expected =
              cpu_ops::momentum_apply_magnitudes(cpu, kind, m, inv, scaled, host_const(u), host_const(a));
          const auto d_u = harness::upload(b, u);
          const auto d_a = harness::upload(b, a);
          const auto got = ops::momentum_apply_magnitudes(b, kind, m, inv, scaled, gradcomp::readonly(d_u.view()),
                                                          gradcomp::readonly(d_a.view()));
          CHECK(got.finite == expected.finite);
          CHECK(same_double(got.u, expected.u));
          CHECK(same_double(got.v, expected.v));
        }
  }
}

TEST_CASE("thrust backend: check_positions finds the CPU's error, out of range first") {
  using ops = gradcomp::detail::ops<primary_backend>;
  using harness = gradcomp_test::backend_harness<primary_backend>;
  const primary_backend b{};
  const gradcomp::cpu_backend cpu{};
  const auto good = positions(n_large, 3, 10);
  auto check = [&](const std::vector<std::uint32_t>& idx, std::size_t n) {
    const auto d = harness::upload(b, idx);
    const auto e = ops::check_positions(b, gradcomp::readonly(d.view()), n);
    CHECK(e == cpu_ops::check_positions(cpu, host_const(idx), n));
    return e;
  };
  CHECK(check(good, n_large) == gradcomp::errc::ok);
  CHECK(check({}, 0) == gradcomp::errc::ok);
  CHECK(check({0}, 1) == gradcomp::errc::ok);
  CHECK(check({1}, 1) == gradcomp::errc::index_out_of_range);
  auto swapped = good;
  std::swap(swapped[swapped.size() - 2], swapped[swapped.size() - 1]);
  CHECK(check(swapped, n_large) == gradcomp::errc::indices_not_increasing);
  auto repeated = good;
  repeated[5] = repeated[4];
  CHECK(check(repeated, n_large) == gradcomp::errc::indices_not_increasing);
  auto both = swapped;
  both.back() = static_cast<std::uint32_t>(n_large);  // also out of order: range is reported
  CHECK(check(both, n_large) == gradcomp::errc::index_out_of_range);
}

TEST_CASE_TEMPLATE("conformance (thrust): the aggregator sums, averages and refuses as on the CPU backend", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_aggregator_sums(Backend{}, nullptr);
}

TEST_CASE_TEMPLATE("conformance (thrust): the aggregator's overflow guard refuses the same add, nothing modified",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_aggregator_overflow(Backend{});
}

TEST_CASE_TEMPLATE("conformance (thrust): the aggregator adds messages in backend memory as the CPU adds host ones",
                   Backend, GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_aggregator_backend_messages(Backend{});
}

TEST_CASE_TEMPLATE("conformance (thrust): DGC steps are bitwise the CPU backend's, with either selection", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  for (const auto& cfg : gradcomp_test::conformance_configs()) {
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.momentum_correction);
    CAPTURE(cfg.nesterov);
    CAPTURE(cfg.clip_norm);
    CAPTURE(static_cast<int>(cfg.clipping));
    CAPTURE(cfg.small_tensors.min_kept);
    CAPTURE(static_cast<int>(cfg.small_tensors.action));
    gradcomp_test::check_dgc_against_cpu<float>(cfg, 7, Backend{});
    gradcomp_test::check_dgc_against_cpu<double>(cfg, 3, Backend{});
  }
}

TEST_CASE_TEMPLATE("conformance (thrust): DGC's clipping norm where double squares overflow is the CPU's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  // The first tensor's gradient times 1e160: its plain sum of squares overflows and its norm is
  // the scaled fallback's (a largest magnitude and a second sum), on the Thrust backend for every
  // tensor of the model at once. Messages, statistics and state are bitwise the CPU backend's.
  for (const auto clipping : {gradcomp::clip_scope::global_norm, gradcomp::clip_scope::per_tensor}) {
    CAPTURE(static_cast<int>(clipping));
    gradcomp::dgc_config cfg = gradcomp_test::conformance_configs().front();
    cfg.clip_norm = 1.0;
    cfg.clipping = clipping;
    gradcomp_test::conformance_worker<double, Backend> tested(cfg, Backend{});
    gradcomp_test::conformance_worker<double, gradcomp::cpu_backend> reference(cfg, gradcomp::cpu_backend{});
    for (std::size_t s = 0; s < 3; ++s) {
      CAPTURE(s);
      auto g = gradcomp_test::conformance_gradients<double>(s);
      for (double& x : g[0]) x *= 1e160;
      tested.load(g);
      reference.load(g);
      REQUIRE(tested.compressor.compress(tested.views()));
      REQUIRE(reference.compressor.compress(reference.views()));
      const auto a = tested.encode();
      const auto b = reference.encode();
      REQUIRE(a);
      REQUIRE(b);
      CHECK(*a == *b);
      const auto sa = tested.compressor.stats();
      const auto sb = reference.compressor.stats();
      REQUIRE(sa);
      REQUIRE(sb);
      CHECK(sa->clip_coefficient < 1e-150);
      CHECK(gradcomp_test::same_stats(*sa, *sb));
      CHECK(gradcomp_test::bitwise_equal(tested.state(), reference.state()));
    }
  }
}

// The configurations of the suite, and the sampled selection's other modes (uniform sample, the
// first k by index, a single round).
std::vector<gradcomp::dgc_config> issue_configs() {
  auto configs = gradcomp_test::conformance_configs();
  for (int mode = 0; mode < 3; ++mode) {
    gradcomp::dgc_config cfg = configs.front();
    cfg.sampling.sampling = mode == 0 ? gradcomp::sampling_mode::uniform : gradcomp::sampling_mode::strided;
    cfg.sampling.truncation = mode == 1 ? gradcomp::truncation_mode::index_order : cfg.sampling.truncation;
    cfg.sampling.max_rounds = mode == 2 ? 1 : cfg.sampling.max_rounds;
    configs.push_back(cfg);
  }
  return configs;
}

TEST_CASE("thrust backend: a DGC step is issued without the host waiting, and reads its outcome in one batch") {
  using gradcomp::detail::thrust_impl::host_transfer_count;
  for (const auto& cfg : issue_configs()) {
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(static_cast<int>(cfg.sampling.sampling));
    CAPTURE(cfg.momentum_correction);
    CAPTURE(cfg.clip_norm);
    CAPTURE(static_cast<int>(cfg.clipping));
    gradcomp_test::conformance_worker<float, primary_backend> tested(cfg, primary_backend{});
    gradcomp_test::conformance_worker<float, gradcomp::cpu_backend> reference(cfg, gradcomp::cpu_backend{});
    for (std::size_t s = 0; s < 5; ++s) {
      CAPTURE(s);
      const auto g = gradcomp_test::conformance_gradients<float>(s);
      tested.load(g);
      reference.load(g);
      const auto before = host_transfer_count.load();
      REQUIRE(tested.compressor.compress(tested.views()));
      CHECK(host_transfer_count.load() == before);  // nothing copied, nothing returned
      REQUIRE(reference.compressor.compress(reference.views()));
      const auto a = tested.encode();
      CHECK(host_transfer_count.load() > before);  // the outcome, read when asked for
      const auto b = reference.encode();
      REQUIRE(a);
      REQUIRE(b);
      CHECK(*a == *b);
      CHECK(gradcomp_test::bitwise_equal(tested.state(), reference.state()));
    }
  }
}

TEST_CASE("thrust backend: a step issued on another stream (ignored by the host systems) is the same step") {
  gradcomp::dgc_config cfg = gradcomp_test::conformance_configs().front();
  gradcomp_test::conformance_worker<float, primary_backend> tested(cfg, primary_backend{});
  gradcomp_test::conformance_worker<float, gradcomp::cpu_backend> reference(cfg, gradcomp::cpu_backend{});
  CHECK(primary_backend{}.stream == nullptr);
#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const primary_backend user = primary_backend{}.on(stream);
#else
  const primary_backend user = primary_backend{}.on(reinterpret_cast<primary_backend::stream_type>(std::uintptr_t(64)));
#endif
  CHECK(user.stream != nullptr);
  for (std::size_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    const auto g = gradcomp_test::conformance_gradients<float>(s);
    tested.load(g);
    reference.load(g);
    const auto views = tested.views();
#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
    // After a first step outside (buffers the compressor sets up once), each step is captured in
    // a CUDA graph on the user's stream and launched from it: capture fails on any
    // synchronisation, host copy or use of the legacy default stream inside the step.
    if (s > 0) {
      REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      const auto issued = tested.compressor.compress(user, gradcomp::span<const decltype(views)::value_type>(
                                                               views.data(), views.size()));
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
      REQUIRE(issued);
      cudaGraphExec_t instance = nullptr;
      REQUIRE(cudaGraphInstantiate(&instance, graph, 0) == cudaSuccess);
      REQUIRE(cudaGraphLaunch(instance, stream) == cudaSuccess);
      REQUIRE(cudaGraphExecDestroy(instance) == cudaSuccess);
      REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    } else {
      REQUIRE(tested.compressor.compress(user, gradcomp::span<const decltype(views)::value_type>(views.data(),
                                                                                               views.size())));
    }
#else
    REQUIRE(tested.compressor.compress(user, gradcomp::span<const decltype(views)::value_type>(views.data(),
                                                                                             views.size())));
#endif
    REQUIRE(reference.compressor.compress(reference.views()));
    const auto a = tested.encode();  // waits on the step's stream
    const auto b = reference.encode();
    REQUIRE(a);
    REQUIRE(b);
    CHECK(*a == *b);
    CHECK(gradcomp_test::bitwise_equal(tested.state(), reference.state()));
  }
#if defined(GRADCOMP_TEST_CUDA_SYSTEM)
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
#endif
}

TEST_CASE("thrust backend: an EF-SignSGD step is issued without the host waiting") {
  using gradcomp::detail::thrust_impl::host_transfer_count;
  using harness = gradcomp_test::backend_harness<primary_backend>;
  auto tested = gradcomp_test::conformance_ef_signsgd(primary_backend{});
  for (std::size_t s = 0; s < 3; ++s) {
    std::vector<harness::buffer<float>> device;
    std::vector<gradcomp::backend_span<const float, primary_backend>> views;
    for (const auto& x : gradcomp_test::conformance_gradients<float>(s))
      device.push_back(harness::upload(primary_backend{}, x));
    for (const auto& d : device) views.push_back(d.view());
    const auto before = host_transfer_count.load();
    REQUIRE(tested.compress(views));
    CHECK(host_transfer_count.load() == before);
    std::vector<std::byte> out(tested.max_message_bytes());
    CHECK(tested.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size())));
  }
}

TEST_CASE("conformance (thrust): a non-finite gradient is refused, nothing modified") {
  for (const auto& cfg : gradcomp_test::conformance_configs()) {
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.clip_norm);
    CAPTURE(static_cast<int>(cfg.clipping));
    gradcomp_test::check_dgc_against_cpu<float>(cfg, 6, primary_backend{}, 3);
  }
}

TEST_CASE_TEMPLATE("conformance (thrust): EF-SignSGD steps are bitwise the CPU backend's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_ef_signsgd_against_cpu(Backend{}, nullptr);
}

TEST_CASE_TEMPLATE("conformance (thrust): TernGrad steps are bitwise the CPU backend's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_terngrad_against_cpu(Backend{}, nullptr);
}

TEST_CASE_TEMPLATE("conformance (thrust): 1-bit SGD steps are bitwise the CPU backend's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_onebit_against_cpu(Backend{}, nullptr);
}

TEST_CASE_TEMPLATE("conformance (thrust): QSGD steps are bitwise the CPU backend's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_qsgd_against_cpu(Backend{}, nullptr);
}

TEST_CASE_TEMPLATE("conformance (thrust): AdaComp steps are bitwise the CPU backend's", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  gradcomp_test::check_adacomp_against_cpu(Backend{}, nullptr);
}

TEST_CASE_TEMPLATE("conformance (thrust): snapshots are the CPU's bytes and restore across backends", Backend,
                   GRADCOMP_THRUST_TEST_BACKENDS) {
  auto step = [](auto& c, std::size_t s) { return gradcomp_test::compress_and_encode(c, c.backend(), s); };
  for (const auto& cfg : gradcomp_test::conformance_configs()) {
    if (cfg.clip_norm != 0.0) continue;
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.momentum_correction);
    CAPTURE(cfg.nesterov);
    auto make = [&](auto backend) {
      gradcomp::dgc_compressor<float, decltype(backend)> c(cfg, backend);
      for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
      return c;
    };
    gradcomp_test::check_snapshots_across_backends(Backend{}, make, step);
  }
  auto make_ef = [](auto backend) { return gradcomp_test::conformance_ef_signsgd(backend); };
  gradcomp_test::check_snapshots_across_backends(Backend{}, make_ef, step);
  auto make_tg = [](auto backend) {
    gradcomp::terngrad_compressor<float, decltype(backend)> c(gradcomp::terngrad_config{}, backend);
    for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
    return c;
  };
  gradcomp_test::check_snapshots_across_backends(Backend{}, make_tg, step);
  auto make_qsgd = [](auto backend) {
    gradcomp::qsgd_compressor<float, decltype(backend)> c(gradcomp::qsgd_config{}, backend);
    for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
    return c;
  };
  gradcomp_test::check_snapshots_across_backends(Backend{}, make_qsgd, step);
  auto make_adacomp = [](auto backend) {
    gradcomp::adacomp_compressor<float, decltype(backend)> c(gradcomp::adacomp_config{}, backend);
    for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
    return c;
  };
  gradcomp_test::check_snapshots_across_backends(Backend{}, make_adacomp, step);
}

TEST_CASE("thrust backend: a buffer whose size in bytes overflows is refused, not truncated") {
  using ops = gradcomp::detail::ops<primary_backend>;
  CHECK_THROWS_AS(ops::allocate<double>(primary_backend{}, std::numeric_limits<std::size_t>::max() / 4),
                  std::bad_alloc);
}
