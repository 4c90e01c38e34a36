// The order of the library's floating-point reductions (detail/ordered_sum.hpp): the host's
// streaming reduction follows the definition at every size (one block, two levels, three), and
// the kernels that use it (the clipping norm, EF-SignSGD's and TernGrad's measures) give its bits
// at every SIMD level.
#include <gradcomp/ef_signsgd/cpu_ops.hpp>
#include <gradcomp/cpu/ops.hpp>
#include <gradcomp/terngrad/cpu_ops.hpp>
#include <gradcomp/detail/ordered_sum.hpp>
#include <gradcomp/detail/rounded.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "support/inputs.hpp"
#include "support/ordered_sum_reference.hpp"
#include "support/simd_level.hpp"

namespace {

namespace cpu = gradcomp::detail::cpu;
namespace reference = gradcomp_test::ordered_sum_reference;
using gradcomp::detail::sum_block;

using gradcomp_test::with_level;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

const cpu::simd_level levels[] = {cpu::simd_level::portable, cpu::simd_level::avx2};

// Sizes at and around every boundary of the order: the lanes, one block, the second level's one
// block of values (sum_block^2 elements) and the third level.
const std::size_t sizes[] = {0,
                             1,
                             31,
                             32,
                             33,
                             sum_block - 1,
                             sum_block,
                             sum_block + 1,
                             2 * sum_block,
                             33 * sum_block + 7,
                             sum_block * sum_block,
                             sum_block * sum_block + 1,
                             sum_block * sum_block + sum_block * 5 + 3};

}  // namespace

TEST_CASE("ordered sum: the host's streaming reduction is the definition's, at every level") {
  const auto leaf = [](std::size_t i) { return reference::wide_term(i); };
  for (const std::size_t n : sizes) {
    CAPTURE(n);
    const double got = gradcomp::detail::ordered_reduce<double>(
        n,
        [&](std::size_t first, std::size_t last) {
          return gradcomp::detail::fold_block<double>(first, last, leaf, gradcomp::detail::sum_merge{});
        },
        gradcomp::detail::sum_merge{});
    CHECK(same_bits(got, reference::sum_of(n, leaf)));
  }
  // The terms tell the orders apart: without the blocks the bits differ.
  CHECK_FALSE(same_bits(reference::sum_of(33 * sum_block + 7, leaf), reference::lanes_only(33 * sum_block + 7, leaf)));
}

TEST_CASE("ordered sum: the clipping norm, EF-SignSGD's and TernGrad's measures take the order at every SIMD level") {
  for (const std::size_t n : {std::size_t(1000), sum_block + 1, 3 * sum_block + 17, std::size_t(300007)}) {
    CAPTURE(n);
    const auto g = gradcomp_test::random_vector<float>(n, gradcomp_test::dist::log_normal, n);
    const auto e = gradcomp_test::random_vector<float>(n, gradcomp_test::dist::student_t, n + 1);
    const float lr = 0.03f;
    const auto x = [&](std::size_t i) { return static_cast<double>(g[i]); };
    const double squares = reference::sum_of(n, [&](std::size_t i) { return x(i) * x(i); });
    const double sum = reference::sum_of(n, x);
    const double l1 = reference::sum_of(n, [&](std::size_t i) {
      return std::fabs(static_cast<double>(static_cast<float>(e[i] + gradcomp::detail::rounded(lr * g[i]))));
    });
    for (const auto level : levels) {
      CAPTURE(static_cast<int>(level));
      const gradcomp::span<const float> gs(g.data(), n), es(e.data(), n);
      const auto norm = with_level(level, [&] { return cpu::l2_norm(gs); });
      CHECK(norm.finite);
      CHECK(same_bits(norm.norm, std::sqrt(squares)));
      const auto ef = with_level(level, [&] {
        gradcomp::detail::ef_sign_record r;
        gradcomp::detail::ef_sign_ops<gradcomp::cpu_backend>::measure(gradcomp::cpu_backend{}, lr, gs, es,
                                                                      gradcomp::span<gradcomp::detail::ef_sign_record>(&r, 1), 0);
        return r;
      });
      CHECK(same_bits(ef.l1, l1));
      CHECK(ef.p_finite == 1);
      gradcomp::detail::terngrad_record t;
      gradcomp::detail::terngrad_ops<gradcomp::cpu_backend>::measure(
          gradcomp::cpu_backend{}, gs, gradcomp::span<gradcomp::detail::terngrad_record>(&t, 1), 0);
      CHECK(same_bits(t.sum, sum));
      CHECK(same_bits(t.squares, squares));
    }
  }
}
