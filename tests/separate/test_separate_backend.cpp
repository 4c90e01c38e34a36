// separate_backend: host code that includes only host headers (this file is compiled without
// Thrust's or CUDA's include paths) runs the portable Thrust backend whose kernels one other
// translation unit compiled (omp_kernels.cpp; for the CUDA variant, a .cu file), and gets the CPU
// backend's results bit for bit: the conformance suite's DGC, EF-SignSGD, snapshot and aggregator
// cases, every other method's parity (PowerSGD's included), and the public building blocks.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/separate_backend.hpp>

#include "backend/aggregator_conformance.hpp"
#include "backend/conformance.hpp"
#include "isgq/isgq_parity.hpp"
#include "powersgd/powersgd_parity.hpp"
#include "saef/saef_parity.hpp"
#include "separate/kernels_tag.hpp"

#if defined(THRUST_VERSION) || defined(__CUDACC__) || defined(CUDART_VERSION)
#error "the host side of a separate backend must not see Thrust or CUDA"
#endif

namespace {

using backend = gradcomp_test::separate_tested;

TEST_CASE("separate backend: DGC steps are bitwise the CPU backend's, with either selection") {
  for (const auto& cfg : gradcomp_test::conformance_configs()) {
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.momentum_correction);
    CAPTURE(cfg.nesterov);
    CAPTURE(cfg.clip_norm);
    gradcomp_test::check_dgc_against_cpu<float>(cfg, 5, backend{});
    gradcomp_test::check_dgc_against_cpu<double>(cfg, 2, backend{});
  }
  gradcomp_test::check_dgc_against_cpu<float>(gradcomp_test::conformance_configs().front(), 4, backend{}, 2);
}

TEST_CASE("separate backend: EF-SignSGD steps and snapshots are the CPU backend's") {
  gradcomp_test::check_ef_signsgd_against_cpu(backend{}, nullptr);
  auto step = [](auto& c, std::size_t s) { return gradcomp_test::compress_and_encode(c, c.backend(), s); };
  auto make_ef = [](auto b) { return gradcomp_test::conformance_ef_signsgd(b); };
  gradcomp_test::check_snapshots_across_backends(backend{}, make_ef, step);
}

TEST_CASE("separate backend: TernGrad, 1-bit SGD, QSGD and AdaComp steps are the CPU backend's") {
  gradcomp_test::check_terngrad_against_cpu(backend{}, nullptr);
  gradcomp_test::check_onebit_against_cpu(backend{}, nullptr);
  gradcomp_test::check_qsgd_against_cpu(backend{}, nullptr);
  gradcomp_test::check_adacomp_against_cpu(backend{}, nullptr);
}

TEST_CASE("separate backend: ISGQ's messages and SAEF's loop are the CPU backend's") {
  gradcomp_test::isgq_parity::check_isgq_against_cpu<float>(backend{});
  gradcomp_test::isgq_parity::check_isgq_against_cpu<double>(backend{});
  const backend b{};
  gradcomp_test::saef_parity::check_against_cpu(b, [](const auto& on) { return gradcomp_test::saef_parity::topk(on); });
  gradcomp_test::saef_parity::check_against_cpu(
      b, [](const auto& on) { return gradcomp_test::saef_parity::scaled_sign(on); });
}

TEST_CASE("separate backend: PowerSGD's steps and snapshots are the CPU backend's") {
  gradcomp_test::powersgd_parity::check_against_cpu(backend{}, gradcomp_test::powersgd_parity::config());
}

TEST_CASE("separate backend: the aggregator sums, guards and adds messages in its memory as on the CPU") {
  gradcomp_test::check_aggregator_sums(backend{}, nullptr);
  gradcomp_test::check_aggregator_overflow(backend{});
  gradcomp_test::check_aggregator_backend_messages(backend{});
}

TEST_CASE("separate backend: the public building blocks and buffers") {
  const backend b{};
  std::vector<float> host(1000);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 7919) % 1000) - 500.0f;
  auto x = gradcomp::allocate_buffer<float>(b, host.size());
  REQUIRE(gradcomp::copy_to_backend(b, gradcomp::span<const float>(host.data(), host.size()), x.view()));
  auto copy = x;  // a deep copy
  auto idx = gradcomp::allocate_buffer<std::uint32_t>(b, 10);
  const auto k = gradcomp::exact_topk(b, gradcomp::readonly(copy.view()), 10, idx.view());
  REQUIRE(k);
  std::vector<std::uint32_t> got(10);
  REQUIRE(gradcomp::copy_to_host(b, gradcomp::readonly(idx.view()), gradcomp::span<std::uint32_t>(got.data(), 10)));
  gradcomp::synchronize(b);
  CHECK(got == gradcomp::exact_topk(host, 10));
}

}  // namespace
