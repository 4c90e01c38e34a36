// The conformance suite on the CPU backend and on the strict test backend (memory the host
// cannot touch, counted synchronisations). A new backend adds its harness and its own run of
// these cases.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <random>
#include <string>
#include <utility>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/aggregator_conformance.hpp"
#include "backend/conformance.hpp"
#include "backend/strict_backend.hpp"

using gradcomp::dgc_config;
using gradcomp::errc;
using gradcomp::cpu_backend;
using gradcomp_test::strict_backend;
using gradcomp_test::conformance_worker;

// The backends every case runs on. The arith builds (tests/arith/, compilers that may contract
// products into fused multiply-adds) run the CPU backend's alone: the strict backend runs the same
// CPU kernels, and what it adds (memory the host cannot touch, counted synchronisations) does not
// depend on how the arithmetic is compiled.
#if defined(GRADCOMP_TEST_ARITH)
#define GRADCOMP_CONFORMANCE_BACKENDS cpu_backend
#else
#define GRADCOMP_CONFORMANCE_BACKENDS cpu_backend, strict_backend
#endif

namespace {

template <class Backend>
Backend backend_for_test() {
  return Backend{};
}
#if !defined(GRADCOMP_TEST_ARITH)
template <>
strict_backend backend_for_test<strict_backend>() {
  return strict_backend{}.on(3);
}
#endif

// The strict backend's synchronisation counter; none for the others.
template <class Backend>
const std::size_t* synchronizations_of() {
  return std::is_same<Backend, strict_backend>::value ? &gradcomp_test::strict_stats().synchronizations : nullptr;
}

}  // namespace

TEST_CASE_TEMPLATE("conformance: DGC steps are bitwise the CPU backend's in every configuration", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  for (const auto& cfg : gradcomp_test::conformance_configs()) {
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.momentum_correction);
    CAPTURE(cfg.nesterov);
    CAPTURE(cfg.clip_norm);
    CAPTURE(static_cast<int>(cfg.clipping));
    CAPTURE(cfg.small_tensors.min_kept);
    CAPTURE(static_cast<int>(cfg.small_tensors.action));
    gradcomp_test::check_dgc_against_cpu<float>(cfg, 7, backend_for_test<Backend>());
  }
  gradcomp_test::check_dgc_against_cpu<double>(gradcomp_test::conformance_configs().front(), 5,
                                              backend_for_test<Backend>());
}

TEST_CASE_TEMPLATE("conformance: a non-finite gradient is refused on the backend, nothing modified", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  for (const double clip : {0.0, 3.0}) {
    CAPTURE(clip);
    dgc_config cfg = gradcomp_test::conformance_configs().front();
    cfg.clip_norm = clip;
    gradcomp_test::check_dgc_against_cpu<float>(cfg, 6, backend_for_test<Backend>(), 3);
  }
}

TEST_CASE_TEMPLATE("conformance: an overflowing step is refused on the backend, nothing modified", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.01);
  conformance_worker<float, Backend> w(cfg, backend_for_test<Backend>());
  auto g = gradcomp_test::conformance_gradients<float>(0);
  for (auto& x : g[0]) x = 1e37f;  // grows the first accumulator past the largest float
  w.load(g);
  bool refused = false;
  for (int s = 0; s < 100 && !refused; ++s) {
    const auto before = w.state();
    const std::size_t step = w.compressor.step();
    REQUIRE(w.compressor.compress(w.views()));
    const auto r = w.compressor.stats();
    if (r) continue;
    refused = true;
    CHECK(r.error() == errc::state_overflow);
    CHECK(w.encode().error() == errc::state_overflow);
    CHECK(gradcomp_test::bitwise_equal(w.state(), before));
    CHECK(w.compressor.step() == step);
  }
  CHECK(refused);
  for (const auto& x : w.state())
    for (float v : x) REQUIRE(std::isfinite(v));
}

#if !defined(GRADCOMP_TEST_ARITH)
TEST_CASE("conformance (strict): compress + encode_message synchronise once, on the stream of the call") {
  auto& counters = gradcomp_test::strict_stats();
  conformance_worker<float, strict_backend> w(gradcomp_test::conformance_configs().front(), strict_backend{});
  for (std::size_t s = 0; s < 6; ++s) {
    CAPTURE(s);
    w.load(gradcomp_test::conformance_gradients<float>(s));
    const std::size_t before = counters.synchronizations;
    REQUIRE(w.compressor.compress(strict_backend{}.on(7), w.views()));
    CHECK(counters.synchronizations == before);  // compress issues; it never waits
    CHECK(counters.last_stream == 7);
    REQUIRE(w.encode());
    CHECK(counters.synchronizations == before + 1);
    CHECK(counters.last_stream == 7);  // the step is waited for where it ran
    // Statistics, selections and the next compress cost nothing more once the step is known.
    REQUIRE(w.compressor.stats());
    (void)w.compressor.selection(0);
    (void)w.compressor.message(0);
    CHECK(counters.synchronizations == before + 1);
  }
}

TEST_CASE("conformance (strict): the host cannot read the strict backend's memory") {
  // Proves the suite's guard: a host read of backend memory outside the backend's operations
  // crashes (here in a child process), so the library's passing runs never read it directly.
  conformance_worker<float, strict_backend> w(gradcomp_test::conformance_configs().front(), strict_backend{});
  w.load(gradcomp_test::conformance_gradients<float>(0));
  const float* p = w.compressor.residual(0).data();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGSEGV, SIG_DFL);  // no test-framework report from the child
    ::signal(SIGBUS, SIG_DFL);
    volatile float x = *p;  // must fault
    (void)x;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  // Killed by the fault, or (under AddressSanitizer, which reports the fault itself) exited with
  // an error; only a read that succeeded exits with 0.
  CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)));
  // And a host pointer handed over as backend memory is refused by the backend.
  std::vector<float> host(16);
  CHECK_THROWS(gradcomp_test::unwrap(gradcomp_test::strict_span<float>(host.data(), host.size())));
}
#endif

TEST_CASE_TEMPLATE("conformance: EF-SignSGD steps are bitwise the CPU backend's, one synchronisation per step", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_ef_signsgd_against_cpu(backend_for_test<Backend>(), synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: TernGrad steps are bitwise the CPU backend's, one synchronisation per step", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_terngrad_against_cpu(backend_for_test<Backend>(), synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: 1-bit SGD steps are bitwise the CPU backend's, one synchronisation per step", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_onebit_against_cpu(backend_for_test<Backend>(), synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: QSGD steps are bitwise the CPU backend's, one synchronisation per step", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_qsgd_against_cpu(backend_for_test<Backend>(), synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: AdaComp steps are bitwise the CPU backend's, counts then payload", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_adacomp_against_cpu(backend_for_test<Backend>(), synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: DGC snapshots are the CPU's bytes and restore across backends", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  for (const auto& cfg : {gradcomp_test::conformance_configs()[5], gradcomp_test::conformance_configs()[10]}) {
    CAPTURE(cfg.nesterov);
    auto make = [&](auto backend) {
      gradcomp::dgc_compressor<float, decltype(backend)> c(cfg, backend);
      for (const auto& x : gradcomp_test::conformance_model()) c.add_tensor(x.name, x.shape);
      return c;
    };
    auto step = [](auto& c, std::size_t s) { return gradcomp_test::compress_and_encode(c, c.backend(), s); };
    gradcomp_test::check_snapshots_across_backends(backend_for_test<Backend>(), make, step, synchronizations_of<Backend>());
  }
}

TEST_CASE_TEMPLATE("conformance: EF-SignSGD snapshots are the CPU's bytes and restore across backends", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  auto make = [](auto backend) { return gradcomp_test::conformance_ef_signsgd(backend); };
  auto step = [](auto& c, std::size_t s) { return gradcomp_test::compress_and_encode(c, c.backend(), s); };
  gradcomp_test::check_snapshots_across_backends(backend_for_test<Backend>(), make, step, synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: the aggregator sums, averages and refuses as on the CPU backend, without waiting",
                   Backend, GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_aggregator_sums(backend_for_test<Backend>(), synchronizations_of<Backend>());
}

TEST_CASE_TEMPLATE("conformance: the aggregator's overflow guard refuses the same add, nothing modified", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_aggregator_overflow(backend_for_test<Backend>());
}

TEST_CASE_TEMPLATE("conformance: the aggregator adds messages in backend memory as the CPU adds host ones", Backend,
                   GRADCOMP_CONFORMANCE_BACKENDS) {
  gradcomp_test::check_aggregator_backend_messages(backend_for_test<Backend>());
}
