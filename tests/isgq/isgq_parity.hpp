// ISGQ's messages on a backend against the CPU backend's (the Thrust and the separate backends'
// tests): the dithered quantiser and the minimum-MSE fit over several steps, bitwise, and the same
// refusals with nothing modified.
#pragma once

#include <gradcomp/backend_memory.hpp>
#include <gradcomp/isgq/compressor.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace gradcomp_test {
namespace isgq_parity {

template <class T>
std::vector<T> factor(std::size_t n, std::uint64_t seed, bool relu) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> w(n);
  for (auto& x : w) {
    x = static_cast<T>(normal(rng));
    if (relu && x < T(-0.5)) x = T(0);
  }
  return w;
}

// The message of `c`'s layer 0 for host factors, on `backend` (copied into its memory first).
template <class T, class Backend>
gradcomp::result<std::vector<std::byte>> payload(gradcomp::isgq_compressor<T, Backend>& c, Backend backend,
                                                 const std::vector<T>& x, const std::vector<T>& d,
                                                 std::size_t batch) {
  auto bx = gradcomp::allocate_buffer<T>(backend, x.size());
  auto bd = gradcomp::allocate_buffer<T>(backend, d.size());
  REQUIRE(gradcomp::copy_to_backend(backend, gradcomp::span<const T>(x.data(), x.size()), bx.view()));
  REQUIRE(gradcomp::copy_to_backend(backend, gradcomp::span<const T>(d.data(), d.size()), bd.view()));
  const auto m = c.compress(0, gradcomp::readonly(bx.view()), gradcomp::readonly(bd.view()), batch);
  if (!m) return gradcomp::fail(m.error());
  return std::vector<std::byte>(m->payload.begin(), m->payload.end());
}

template <class T, class Backend>
void check_isgq_against_cpu(Backend backend) {
  const std::size_t batch = 9, n_in = 70, n_out = 23;
  for (const auto method : {gradcomp::isgq_method::dithered, gradcomp::isgq_method::min_mse}) {
    for (const std::uint32_t levels : {2u, 4u}) {  // s or L
      CAPTURE(static_cast<int>(method));
      CAPTURE(levels);
      gradcomp::isgq_config cfg;
      cfg.method = method;
      cfg.levels = levels;
      cfg.bucket = 64;  // buckets across rows, the last one short
      cfg.rank = 3;
      gradcomp::isgq_compressor<T> cpu(cfg);
      gradcomp::isgq_compressor<T, Backend> dev(cfg, backend);
      cpu.add_layer("fc", n_in, n_out, gradcomp::isgq_layout::in_out, 5);
      dev.add_layer("fc", n_in, n_out, gradcomp::isgq_layout::in_out, 5);
      for (std::uint64_t step = 0; step < 3; ++step) {
        const auto x = factor<T>(batch * n_in, 10 + step, true), d = factor<T>(batch * n_out, 20 + step, false);
        const auto want = payload(cpu, gradcomp::cpu_backend{}, x, d, batch);
        const auto got = payload(dev, backend, x, d, batch);
        REQUIRE(want);
        REQUIRE(got);
        CHECK(*got == *want);
      }
      CHECK(dev.layer(0).steps == 3);
      // A NaN, then an infinity: refused on both, the step counters unchanged.
      auto x = factor<T>(batch * n_in, 1, true);
      const auto d = factor<T>(batch * n_out, 2, false);
      for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
        x[17] = bad;
        CHECK(payload(dev, backend, x, d, batch).error() == gradcomp::errc::non_finite_input);
        CHECK(payload(cpu, gradcomp::cpu_backend{}, x, d, batch).error() == gradcomp::errc::non_finite_input);
      }
      CHECK(dev.layer(0).steps == 3);
    }
  }
}

}  // namespace isgq_parity
}  // namespace gradcomp_test
