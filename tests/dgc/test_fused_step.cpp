// The fused DGC step's kernel (cpu/fused_kernels.hpp): whatever guide it is given, and whichever
// way it then finds the threshold, it must leave the momentum and the accumulator and select
// exactly what momentum_accumulate followed by sampled_threshold_select does.
#include <gradcomp/cpu/fused_kernels.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "support/inputs.hpp"
#include "support/sanitized.hpp"

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

// Runs the fused kernel with `guide` on (u, v) and the unfused reference (update, select, move
// the selection out, mask) on copies; checks that state, selection and sent values agree
// bitwise. `guide` receives what the fused kernel hands on to the next step. `move` always
// makes the pass move its candidates out whatever the size and density (the way of large
// tensors at low density); never keeps them in.
template <class T>
void check_fused(momentum_kind kind, const std::vector<T>& g, std::vector<T>& u, std::vector<T>& v,
                 std::size_t k, const sampled_threshold_config& cfg, std::uint64_t seed,
                 gradcomp::detail::cpu::step_guide<T>& guide, bool masking = true,
                 cpu::candidate_move move = cpu::candidate_move::always) {
  const std::size_t n = g.size();
  const T m = T(0.9), c = T(0.75);
  std::vector<T> u_ref = u, v_ref = v;
  std::vector<std::byte> ws(cpu::accumulate_and_select_workspace_bytes<T>(cfg, n, k));
  std::vector<std::uint32_t> got(k), want(k);
  std::vector<T> got_values(k), want_values(k);

  const auto fused = cpu::accumulate_and_select<T>(
      kind, m, c, span<const T>(g.data(), n), span<T>(u.data(), u.size()), span<T>(v.data(), n), k,
      cfg, seed, span<std::uint32_t>(got.data(), k), span<T>(got_values.data(), k), masking,
      span<std::byte>(ws.data(), ws.size()), &guide, move);
  cpu::momentum_accumulate(kind, m, c, span<const T>(g.data(), n), span<T>(u_ref.data(), u_ref.size()),
                           span<T>(v_ref.data(), n));
  const auto ref = cpu::sampled_threshold_select<T>(span<const T>(v_ref.data(), n), k, cfg, seed,
                                                    span<std::uint32_t>(want.data(), k),
                                                    span<std::byte>(ws.data(), ws.size()));
  REQUIRE(fused);
  REQUIRE(ref);
  cpu::gather_and_zero(span<T>(v_ref.data(), n), span<const std::uint32_t>(want.data(), ref->count),
                       span<T>(want_values.data(), ref->count),
                       masking ? span<T>(u_ref.data(), u_ref.size()) : span<T>());
  CHECK(bitwise_equal(u, u_ref));
  CHECK(bitwise_equal(v, v_ref));
  REQUIRE(fused->count == ref->count);
  got.resize(fused->count);
  want.resize(ref->count);
  got_values.resize(fused->count);
  want_values.resize(ref->count);
  CHECK(bitwise_equal(got, want));
  CHECK(bitwise_equal(got_values, want_values));
  CHECK(fused->threshold == ref->threshold);
  CHECK(fused->rounds == ref->rounds);
  CHECK(fused->exact == ref->exact);
  CHECK(fused->sample_count == ref->sample_count);
  CHECK(guide.sample > T(0));
  CHECK(guide.kept == fused->threshold);
}

}  // namespace

TEST_CASE_TEMPLATE("fused step: every guide gives the unfused result", T, float, double) {
  // A third of the size under AddressSanitizer, where this case ran for half a minute, and in the
  // arith builds (tests/arith/), which run aarch64's under an emulator.
#if defined(GRADCOMP_TEST_ARITH)
  const std::size_t n = 100003;
#else
  const std::size_t n = gradcomp_test::sanitized ? 100003 : 300007;
#endif
  for (const auto move : {cpu::candidate_move::always, cpu::candidate_move::never}) {
    for (const momentum_kind kind : {momentum_kind::vanilla, momentum_kind::nesterov, momentum_kind::none})
      for (const double density : {0.001, 0.01}) {
        CAPTURE(static_cast<int>(move));
        CAPTURE(static_cast<int>(kind));
        CAPTURE(density);
        const std::size_t k = static_cast<std::size_t>(density * static_cast<double>(n));
        sampled_threshold_config cfg;
        std::vector<T> u(kind == momentum_kind::none ? 0 : n, T(0)), v(n, T(0));
        // Step 0 has no guide; later steps get what the previous step handed on (the compressor's
        // case), then guides that miss on purpose: a sample threshold far above every value (the
        // sample finds no key above the cut), the smallest positive one (far more candidates than
        // the pool holds), kept thresholds far above and far below the truth (nothing, then every
        // candidate moved out during the pass), and the previous step's guide while the
        // gradient's scale jumps up or down tenfold.
        gradcomp::detail::cpu::step_guide<T> guide{};
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 1), u, v, k, cfg, 11, guide, true, move);
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 2), u, v, k, cfg, 12, guide, true, move);
        check_fused<T>(kind, random_vector<T>(n, dist::gaussian, 3), u, v, k, cfg, 13, guide, true, move);
        auto miss = guide;
        miss.sample = T(1e30);
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 4), u, v, k, cfg, 14, miss, true, move);
        miss = guide;
        miss.sample = std::numeric_limits<T>::denorm_min();
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 5), u, v, k, cfg, 15, miss, true, move);
        miss.kept = miss.kept_before = T(1e30);
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 20), u, v, k, cfg, 21, miss, true, move);
        miss.kept = miss.kept_before = std::numeric_limits<T>::denorm_min();
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 22), u, v, k, cfg, 23, miss, true, move);
        guide = miss;
        auto g = random_vector<T>(n, dist::log_normal, 6);
        for (auto& x : g) x *= T(10);
        check_fused<T>(kind, g, u, v, k, cfg, 16, guide, true, move);
        g = random_vector<T>(n, dist::student_t, 7);
        for (auto& x : g) x *= T(0.1);
        check_fused<T>(kind, g, u, v, k, cfg, 17, guide, true, move);
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 8), u, v, k, cfg, 18, guide, true, move);
        // Without momentum masking the momentum keeps its values at the sent positions.
        check_fused<T>(kind, random_vector<T>(n, dist::student_t, 9), u, v, k, cfg, 19, guide, false, move);
      }
  }
}

TEST_CASE_TEMPLATE("fused step: a NaN in the accumulator fails with the state updated and nothing moved out",
                   T, float, double) {
  // The guided pass moves its candidates out as it goes; a NaN is always a candidate, so the
  // failure is found after the move and everything must go back.
  const std::size_t n = 100003, k = 1000;
  const T m = T(0.9), c = T(1);
  sampled_threshold_config cfg;
  std::vector<T> u(n, T(0)), v(n, T(0));
  gradcomp::detail::cpu::step_guide<T> guide{};
  check_fused<T>(momentum_kind::vanilla, random_vector<T>(n, dist::student_t, 1), u, v, k, cfg, 1, guide);
  REQUIRE(guide.sample > T(0));
  v[777] = std::numeric_limits<T>::quiet_NaN();
  const auto g = random_vector<T>(n, dist::student_t, 2);
  std::vector<T> u_ref = u, v_ref = v;
  cpu::momentum_accumulate(momentum_kind::vanilla, m, c, span<const T>(g.data(), n),
                           span<T>(u_ref.data(), n), span<T>(v_ref.data(), n));
  std::vector<std::byte> ws(cpu::accumulate_and_select_workspace_bytes<T>(cfg, n, k));
  std::vector<std::uint32_t> idx(k);
  std::vector<T> values(k);
  const auto r = cpu::accumulate_and_select<T>(
      momentum_kind::vanilla, m, c, span<const T>(g.data(), n), span<T>(u.data(), n), span<T>(v.data(), n), k,
      cfg, 2, span<std::uint32_t>(idx.data(), k), span<T>(values.data(), k), true,
      span<std::byte>(ws.data(), ws.size()), &guide);
  REQUIRE_FALSE(r);
  CHECK(r.error() == gradcomp::errc::nan_input);
  CHECK(bitwise_equal(u, u_ref));
  CHECK(bitwise_equal(v, v_ref));
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
  gradcomp::detail::cpu::step_guide<T> guide{};
  for (std::uint64_t step = 0; step < 6; ++step) {
    CAPTURE(step);
    check_fused<T>(momentum_kind::vanilla, random_vector<T>(n, dist::gaussian, 40 + step), u, v, k, cfg,
                   70 + step, guide);
  }
}

TEST_CASE("fused step: the uniform sampling mode ignores the guide and still matches") {
  const std::size_t n = 100003;
  sampled_threshold_config cfg;
  cfg.sampling = gradcomp::sampling_mode::uniform;
  std::vector<float> u(n, 0.0f), v(n, 0.0f);
  gradcomp::detail::cpu::step_guide<float> guide{};
  for (std::uint64_t step = 0; step < 3; ++step)
    check_fused<float>(momentum_kind::nesterov, random_vector<float>(n, dist::student_t, 90 + step), u, v,
                       100, cfg, step, guide);
}

TEST_CASE("fused step: the guide's cut margin narrows while it suffices and widens after a miss") {
  using guide_t = gradcomp::detail::cpu::step_guide<float>;
  guide_t g;
  CHECK(g.cut_margin() == guide_t::initial_margin);
  g.cut_sufficed();
  CHECK(g.cut_margin() == doctest::Approx(0.75 * guide_t::initial_margin));
  for (int i = 0; i < 50; ++i) g.cut_sufficed();
  CHECK(g.cut_margin() == guide_t::min_margin);
  g.cut_too_high();
  CHECK(g.cut_margin() == doctest::Approx(2 * guide_t::min_margin));
  for (int i = 0; i < 50; ++i) g.cut_too_high();
  CHECK(g.cut_margin() == guide_t::max_margin);
  g.cut_too_low();
  CHECK(g.cut_margin() == doctest::Approx(0.5 * guide_t::max_margin));

  // The cut follows half the threshold's last move (its ratio held within [0.9, 1.1]); the kept
  // threshold's guess follows all of it.
  CHECK(g.predicted_sample_floor() == 0.0f);
  g.sample = 1.1f;
  CHECK(g.predicted_sample_floor() == doctest::Approx(1.1f));
  g.sample_before = 1.0f;
  CHECK(g.predicted_sample_floor() == doctest::Approx(1.1f * 1.05f));
  g.sample = 2.0f;
  CHECK(g.predicted_sample_floor() == doctest::Approx(2.0f * 1.05f));
  g.sample = 0.5f;
  CHECK(g.predicted_sample_floor() == doctest::Approx(0.5f * 0.95f));
  g.sample_before = std::numeric_limits<float>::infinity();
  CHECK(g.predicted_sample_floor() == doctest::Approx(0.5f));
  g.kept = 1.1f;
  g.kept_before = 1.0f;
  CHECK(g.predicted_kept() == doctest::Approx(1.1f * 1.1f));

  // Through a run of steps the margin moves, the results never do (check_fused compares every
  // step with the unfused reference).
  const std::size_t n = 200003, k = 2000;
  sampled_threshold_config cfg;
  std::vector<float> u(n, 0.0f), v(n, 0.0f);
  gradcomp::detail::cpu::step_guide<float> guide{};
  for (std::uint64_t step = 0; step < 12; ++step) {
    CAPTURE(step);
    check_fused<float>(momentum_kind::vanilla, random_vector<float>(n, dist::student_t, 300 + step), u, v, k,
                       cfg, step, guide);
  }
  CHECK(guide.cut_margin() < guide_t::initial_margin);
}

TEST_CASE("fused step: candidates move out in the pass only for large tensors at low density") {
  using cpu::candidate_move;
  const std::size_t large = std::size_t(1) << 22;  // 32 MiB of accumulator and momentum
  CHECK(cpu::moves_in_pass<float>(candidate_move::by_size_and_density, large, large / 1000));
  CHECK_FALSE(cpu::moves_in_pass<float>(candidate_move::by_size_and_density, large, large / 100));
  CHECK_FALSE(cpu::moves_in_pass<float>(candidate_move::by_size_and_density, large / 4, large / 4000));
  CHECK(cpu::moves_in_pass<double>(candidate_move::by_size_and_density, large / 2, large / 2000));
  CHECK(cpu::moves_in_pass<float>(candidate_move::always, 1000, 100));
  CHECK_FALSE(cpu::moves_in_pass<float>(candidate_move::never, large, 1));
}
