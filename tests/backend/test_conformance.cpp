// The conformance suite on the CPU backend and on the strict test backend (memory the host
// cannot touch, counted synchronisations). A new backend adds its harness and its own run of
// these cases.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/conformance.hpp"
#include "backend/strict_backend.hpp"

using gradcomp::dgc_config;
using gradcomp::errc;
using gradcomp::cpu_backend;
using gradcomp_test::strict_backend;
using gradcomp_test::conformance_worker;

namespace {

template <class Backend>
Backend backend_for_test() {
  return Backend{};
}
template <>
strict_backend backend_for_test<strict_backend>() {
  return strict_backend{}.on(3);
}

// Runs `steps` steps of `cfg` on Backend and on the CPU backend and checks every observable
// result bitwise; `bad_step` gets a NaN in one gradient (the step must be refused on both,
// nothing modified).
template <class T, class Backend>
void check_against_cpu(const dgc_config& cfg, std::size_t steps, std::size_t bad_step = SIZE_MAX) {
  conformance_worker<T, Backend> tested(cfg, backend_for_test<Backend>());
  conformance_worker<T, cpu_backend> reference(cfg, cpu_backend{});
  for (std::size_t s = 0; s < steps; ++s) {
    CAPTURE(s);
    auto g = gradcomp_test::conformance_gradients<T>(s);
    if (s == bad_step) g[1][g[1].size() / 3] = std::numeric_limits<T>::quiet_NaN();
    tested.load(g);
    reference.load(g);
    const auto before = tested.state();
    REQUIRE(tested.compressor.compress(tested.views()));
    REQUIRE(reference.compressor.compress(reference.views()));
    const auto a = tested.encode();
    const auto b = reference.encode();
    if (s == bad_step) {
      CHECK(a.error() == errc::non_finite_input);
      CHECK(b.error() == errc::non_finite_input);
      CHECK(tested.compressor.stats().error() == errc::non_finite_input);
      CHECK(gradcomp_test::bitwise_equal(tested.state(), before));
      CHECK(tested.compressor.step() == reference.compressor.step());
      continue;
    }
    REQUIRE(a);
    REQUIRE(b);
    CHECK(*a == *b);  // the messages, byte for byte (checksum included)
    const auto sa = tested.compressor.stats();
    const auto sb = reference.compressor.stats();
    REQUIRE(sa);
    REQUIRE(sb);
    CHECK(gradcomp_test::same_stats(*sa, *sb));
    for (std::size_t t = 0; t < tested.compressor.num_tensors(); ++t)
      if (tested.compressor.info(t).compressed)
        CHECK(gradcomp_test::same_selection(tested.compressor.selection(t), reference.compressor.selection(t)));
    CHECK(gradcomp_test::bitwise_equal(tested.state(), reference.state()));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("conformance: DGC steps are bitwise the CPU backend's in every configuration", Backend,
                   cpu_backend, strict_backend) {
  for (const auto& cfg : gradcomp_test::conformance_configs()) {
    CAPTURE(static_cast<int>(cfg.selection));
    CAPTURE(cfg.momentum_correction);
    CAPTURE(cfg.nesterov);
    CAPTURE(cfg.clip_norm);
    CAPTURE(static_cast<int>(cfg.clipping));
    check_against_cpu<float, Backend>(cfg, 7);
  }
  check_against_cpu<double, Backend>(gradcomp_test::conformance_configs().front(), 5);
}

TEST_CASE_TEMPLATE("conformance: a non-finite gradient is refused on the backend, nothing modified", Backend,
                   cpu_backend, strict_backend) {
  for (const double clip : {0.0, 3.0}) {
    CAPTURE(clip);
    dgc_config cfg = gradcomp_test::conformance_configs().front();
    cfg.clip_norm = clip;
    check_against_cpu<float, Backend>(cfg, 6, 3);
  }
}

TEST_CASE_TEMPLATE("conformance: an overflowing step is refused on the backend, nothing modified", Backend,
                   cpu_backend, strict_backend) {
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

TEST_CASE_TEMPLATE("conformance: EF-SignSGD steps are bitwise the CPU backend's, one synchronisation per step", Backend,
                   cpu_backend, strict_backend) {
  using harness = gradcomp_test::backend_harness<Backend>;
  const Backend backend = backend_for_test<Backend>();
  gradcomp::ef_signsgd_config cfg;
  cfg.learning_rate = 0.02;
  gradcomp::ef_signsgd_compressor<float, Backend> tested(cfg, backend);
  gradcomp::ef_signsgd_compressor<float> reference(cfg);
  for (const auto& x : gradcomp_test::conformance_model()) {
    tested.add_tensor(x.name, x.shape, x.shape.size() == 1 ? gradcomp::tensor_mode::dense : gradcomp::tensor_mode::automatic);
    reference.add_tensor(x.name, x.shape, x.shape.size() == 1 ? gradcomp::tensor_mode::dense : gradcomp::tensor_mode::automatic);
  }
  auto& counters = gradcomp_test::strict_stats();
  for (std::size_t s = 0; s < 6; ++s) {
    CAPTURE(s);
    auto g = gradcomp_test::conformance_gradients<float>(s);
    if (s == 3) g[0][5] = std::numeric_limits<float>::infinity();
    std::vector<typename harness::template buffer<float>> device;
    std::vector<gradcomp::backend_span<const float, Backend>> dv;
    std::vector<gradcomp::span<const float>> hv;
    for (const auto& x : g) {
      device.push_back(harness::upload(backend, x));
      hv.emplace_back(x.data(), x.size());
    }
    for (const auto& d : device) dv.push_back(d.view());
    const std::size_t before = counters.synchronizations;
    REQUIRE(tested.compress(dv));
    REQUIRE(reference.compress(hv));
    std::vector<std::byte> a(tested.max_message_bytes()), b(reference.max_message_bytes());
    const auto na = tested.encode_message({}, gradcomp::span<std::byte>(a.data(), a.size()));
    const auto nb = reference.encode_message({}, gradcomp::span<std::byte>(b.data(), b.size()));
    if (std::is_same<Backend, strict_backend>::value) CHECK(counters.synchronizations == before + 1);
    if (s == 3) {
      CHECK(na.error() == errc::non_finite_input);
      CHECK(nb.error() == errc::non_finite_input);
      continue;
    }
    REQUIRE(na);
    REQUIRE(nb);
    CHECK(a == b);
    for (std::size_t t = 0; t < tested.num_tensors(); ++t)
      CHECK(harness::template download<float>(backend, tested.error_feedback(t)) ==
            std::vector<float>(reference.error_feedback(t).begin(), reference.error_feedback(t).end()));
  }
}
