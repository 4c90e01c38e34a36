// The fused DGC step's kernel (cpu/fused_kernels.hpp): whatever guide it is given, and whichever
// way it then finds the threshold, it must leave the momentum and the accumulator and select
// exactly what momentum_accumulate followed by sampled_threshold_select does.
#include <gradcomp/cpu/fused_kernels.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "support/inputs.hpp"

using gradcomp::momentum_kind;
using gradcomp::sampled_threshold_config;
using gradcomp::span;
using namespace gradcomp_test;
namespace cpu = gradcomp::detail::cpu;

namespace {

struct outcome {
  std::vector<std::uint32_t> idx;
  std::size_t count = 0;
  double threshold = 0;
  int rounds = 0;
  bool exact = false;
};

// Runs the fused kernel with `guide` on copies of (u, v) and the unfused reference on other
// copies; checks that state and selection agree bitwise. Returns the sample threshold the fused
// kernel hands on as the next guide.
template <class T>
T check_fused(momentum_kind kind, const std::vector<T>& g, std::vector<T>& u, std::vector<T>& v,
              std::size_t k, const sampled_threshold_config& cfg, std::uint64_t seed, T guide) {
  const std::size_t n = g.size();
  const T m = T(0.9), c = T(0.75);
  std::vector<T> u_ref = u, v_ref = v;
  std::vector<std::byte> ws(cpu::accumulate_and_select_workspace_bytes<T>(cfg, n, k));
  std::vector<std::uint32_t> got(k), want(k);

  const auto fused = cpu::accumulate_and_select<T>(
      kind, m, c, span<const T>(g.data(), n), span<T>(u.data(), u.size()), span<T>(v.data(), n), k,
      cfg, seed, span<std::uint32_t>(got.data(), k), span<std::byte>(ws.data(), ws.size()), &guide);
  cpu::momentum_accumulate(kind, m, c, span<const T>(g.data(), n), span<T>(u_ref.data(), u_ref.size()),
                           span<T>(v_ref.data(), n));
  const auto ref = cpu::sampled_threshold_select<T>(span<const T>(v_ref.data(), n), k, cfg, seed,
                                                    span<std::uint32_t>(want.data(), k),
                                                    span<std::byte>(ws.data(), ws.size()));
  REQUIRE(fused);
  REQUIRE(ref);
  CHECK(bitwise_equal(u, u_ref));
  CHECK(bitwise_equal(v, v_ref));
  REQUIRE(fused->count == ref->count);
  got.resize(fused->count);
  want.resize(ref->count);
  CHECK(bitwise_equal(got, want));
  CHECK(fused->threshold == ref->threshold);
  CHECK(fused->rounds == ref->rounds);
  CHECK(fused->exact == ref->exact);
  CHECK(fused->sample_count == ref->sample_count);
  CHECK(guide > T(0));
  return guide;
}

}  // namespace

TEST_CASE_TEMPLATE("fused step: every guide gives the unfused result", T, float, double) {
  const std::size_t n = 300007;
  for (const momentum_kind kind : {momentum_kind::vanilla, momentum_kind::nesterov, momentum_kind::none})
    for (const double density : {0.001, 0.01}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(density);
      const std::size_t k = static_cast<std::size_t>(density * static_cast<double>(n));
      sampled_threshold_config cfg;
      std::vector<T> u(kind == momentum_kind::none ? 0 : n, T(0)), v(n, T(0));
      // Step 0 has no guide; later steps get the previous step's threshold (the compressor's
      // case), then guides that miss on purpose: far above every value (the sample finds no key
      // above the cut), the smallest positive value (far more candidates than the pool holds),
      // and the previous threshold while the gradient's scale jumps up or down tenfold.
      T guide = check_fused<T>(kind, random_vector<T>(n, dist::student_t, 1), u, v, k, cfg, 11, T(0));
      guide = check_fused<T>(kind, random_vector<T>(n, dist::student_t, 2), u, v, k, cfg, 12, guide);
      guide = check_fused<T>(kind, random_vector<T>(n, dist::gaussian, 3), u, v, k, cfg, 13, guide);
      (void)check_fused<T>(kind, random_vector<T>(n, dist::student_t, 4), u, v, k, cfg, 14, T(1e30));
      guide = check_fused<T>(kind, random_vector<T>(n, dist::student_t, 5), u, v, k, cfg, 15,
                             std::numeric_limits<T>::denorm_min());
      auto g = random_vector<T>(n, dist::log_normal, 6);
      for (auto& x : g) x *= T(10);
      guide = check_fused<T>(kind, g, u, v, k, cfg, 16, guide);
      g = random_vector<T>(n, dist::student_t, 7);
      for (auto& x : g) x *= T(0.1);
      guide = check_fused<T>(kind, g, u, v, k, cfg, 17, guide);
      (void)check_fused<T>(kind, random_vector<T>(n, dist::student_t, 8), u, v, k, cfg, 18, guide);
    }
}

TEST_CASE_TEMPLATE("fused step: adaptation rounds from the candidate pool match the unfused loop", T,
                   float, double) {
  // lower_bound 1 with a slow decay makes the loop lower its threshold several times: the first
  // rounds stay above the guided cut (filtered from the pool), later ones fall below it
  // (filtered from the accumulator).
  const std::size_t n = 200003;
  const std::size_t k = 400;
  sampled_threshold_config cfg;
  cfg.lower_bound = 1.0;
  cfg.threshold_decay = 0.97;
  cfg.upper_bound = 4.0;
  cfg.truncation = gradcomp::truncation_mode::index_order;
  std::vector<T> u(n, T(0)), v(n, T(0));
  T guide = T(0);
  for (std::uint64_t step = 0; step < 6; ++step) {
    CAPTURE(step);
    guide = check_fused<T>(momentum_kind::vanilla, random_vector<T>(n, dist::gaussian, 40 + step), u, v,
                           k, cfg, 70 + step, guide);
  }
}

TEST_CASE("fused step: the uniform sampling mode ignores the guide and still matches") {
  const std::size_t n = 100003;
  sampled_threshold_config cfg;
  cfg.sampling = gradcomp::sampling_mode::uniform;
  std::vector<float> u(n, 0.0f), v(n, 0.0f);
  float guide = 0.0f;
  for (std::uint64_t step = 0; step < 3; ++step)
    guide = check_fused<float>(momentum_kind::nesterov, random_vector<float>(n, dist::student_t, 90 + step),
                               u, v, 100, cfg, step, guide);
}
