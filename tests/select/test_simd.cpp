// The AVX2 kernels (detail/simd.hpp) against the portable ones: bitwise the same results on inputs
// with every kind of value (signed zeros, denormals, infinities, NaN) and lengths that are not
// multiples of the vector width. Where the CPU has no AVX2 both runs take the portable path.
#include <gradcomp/ef_signsgd/cpu_ops.hpp>
#include <gradcomp/cpu/fused_kernels.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "support/inputs.hpp"
#include "support/simd_level.hpp"

using gradcomp::momentum_kind;
using namespace gradcomp_test;
namespace cpu = gradcomp::detail::cpu;

namespace {

std::vector<float> awkward_values(std::size_t n, std::uint64_t seed) {
  auto v = random_vector<float>(n, dist::student_t, seed);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::min(), 1e30f, -1e-30f};
  for (std::size_t i = 0; i < n; i += 37) v[i] = specials[(i / 37) % 6];
  return v;
}

struct filtered {
  std::vector<std::uint32_t> idx, keys;
  std::size_t count = 0;
  std::vector<float> u, v;
};

// The entries two filters stored (the first `count`; past them, within the capacity, the
// branch-free append may have left anything).
bool stored_equal(const filtered& a, const filtered& b) {
  return a.count == b.count && std::equal(a.idx.begin(), a.idx.begin() + static_cast<std::ptrdiff_t>(a.count), b.idx.begin()) &&
         std::equal(a.keys.begin(), a.keys.begin() + static_cast<std::ptrdiff_t>(a.count), b.keys.begin());
}

// cpu::accumulate_filter for a momentum kind chosen at run time.
template <class OnBlock>
std::size_t fused_pass(momentum_kind kind, float m, float c, const float* g, float* u, float* v,
                       std::size_t first, std::size_t last, std::uint32_t cut, std::uint32_t* idx,
                       std::uint32_t* keys, std::size_t count, std::size_t cap, OnBlock&& on_block) {
  switch (kind) {
    case momentum_kind::none:
      return cpu::accumulate_filter<momentum_kind::none>(m, c, g, u, v, first, last, cut, idx, keys, count, cap,
                                                         on_block);
    case momentum_kind::vanilla:
      return cpu::accumulate_filter<momentum_kind::vanilla>(m, c, g, u, v, first, last, cut, idx, keys, count,
                                                            cap, on_block);
    case momentum_kind::nesterov:
      break;
  }
  return cpu::accumulate_filter<momentum_kind::nesterov>(m, c, g, u, v, first, last, cut, idx, keys, count, cap,
                                                         on_block);
}

}  // namespace

TEST_CASE("simd: the detected level is reported and can be pinned to portable") {
  const auto detected = cpu::detected_simd_level();
  CHECK(with_level(cpu::simd_level::portable, [] { return cpu::active_simd_level(); }) ==
        cpu::simd_level::portable);
  CHECK(with_level(cpu::simd_level::avx2, [] { return cpu::active_simd_level(); }) == detected);
  CHECK(cpu::active_simd_level() == detected);
}

TEST_CASE("simd: l2_norm is bitwise the same at every level") {
  for (const std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 32u, 33u, 63u, 1000u, 65537u}) {
    CAPTURE(n);
    const auto g = awkward_values(n, 3 + n);
    const auto norm = [&] { return cpu::l2_norm(gradcomp::span<const float>(g.data(), n)); };
    const auto a = with_level(cpu::simd_level::portable, norm);
    const auto b = with_level(cpu::simd_level::avx2, norm);
    CHECK(std::memcmp(&a.norm, &b.norm, sizeof(double)) == 0);
    CHECK(a.finite == b.finite);
  }
  std::vector<float> g(1001, 1.0f);
  g[999] = std::numeric_limits<float>::quiet_NaN();
  const auto r = with_level(cpu::simd_level::avx2,
                            [&] { return cpu::l2_norm(gradcomp::span<const float>(g.data(), g.size())); });
  CHECK_FALSE(r.finite);
}

TEST_CASE("simd: the finiteness check finds every NaN and infinity at every level") {
  // Each kind of bad value at each position of a vector, of a 32-element group and of the tail;
  // the largest finite value, denormals and -0 pass.
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::signaling_NaN()};
  for (const std::size_t n : {0u, 1u, 7u, 31u, 32u, 33u, 64u, 75u, 1000u}) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i)
      g[i] = i % 3 == 0 ? std::numeric_limits<float>::max() : i % 3 == 1 ? -std::numeric_limits<float>::denorm_min() : -0.0f;
    const auto check = [&] { return cpu::all_finite(gradcomp::span<const float>(g.data(), n)); };
    CAPTURE(n);
    CHECK(with_level(cpu::simd_level::portable, check));
    CHECK(with_level(cpu::simd_level::avx2, check));
    for (std::size_t at = 0; at < n; ++at)
      for (const float x : bad) {
        CAPTURE(at);
        const float keep = g[at];
        g[at] = x;
        CHECK_FALSE(with_level(cpu::simd_level::portable, check));
        CHECK_FALSE(with_level(cpu::simd_level::avx2, check));
        g[at] = keep;
      }
  }
  const std::vector<double> d = {1.0, -std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity()};
  CHECK(cpu::all_finite(gradcomp::span<const double>(d.data(), 2)));
  CHECK_FALSE(cpu::all_finite(gradcomp::span<const double>(d.data(), 3)));
}

TEST_CASE("simd: the threshold filter is the same at every level, capacity overflow included") {
  const std::size_t n = 100003;
  auto v = awkward_values(n, 5);
  v[n - 1] = std::numeric_limits<float>::quiet_NaN();  // NaN keys pass every cut
  for (const float t : {0.0f, 1e-3f, 4e-3f, 1e29f}) {
    for (const std::size_t cap : {std::size_t(10), std::size_t(5000), n}) {
      CAPTURE(t);
      CAPTURE(cap);
      const auto cut = gradcomp::detail::magnitude_key(t);
      const auto run = [&] {
        filtered f;
        f.idx.assign(cap, 0);
        f.keys.assign(cap, 0);
        // Starts at an unaligned offset with a few candidates already stored.
        f.count = cpu::filter_at_least(v.data(), 3, n, cut, f.idx.data(), f.keys.data(), 2, cap);
        return f;
      };
      const auto a = with_level(cpu::simd_level::portable, run);
      const auto b = with_level(cpu::simd_level::avx2, run);
      REQUIRE((a.count > cap) == (b.count > cap));
      if (a.count <= cap) {
        CHECK(a.count == b.count);
        CHECK(stored_equal(a, b));
      }
    }
  }
}

TEST_CASE("simd: the fused update-and-filter pass is the same at every level") {
  for (const std::size_t n : {std::size_t(5), std::size_t(64), std::size_t(20011)}) {
    for (const momentum_kind kind : {momentum_kind::none, momentum_kind::vanilla, momentum_kind::nesterov}) {
      // A few, some (the pass goes branch-free in dense blocks, then back near the capacity), all.
      for (const std::size_t cap : {std::size_t(3), n / 8, n}) {
        CAPTURE(n);
        CAPTURE(static_cast<int>(kind));
        CAPTURE(cap);
        const auto g = awkward_values(n, 7);
        const auto u0 = awkward_values(n, 8);
        const auto v0 = awkward_values(n, 9);
        const auto cut = gradcomp::detail::magnitude_key(2e-3f);
        const auto run = [&] {
          filtered f;
          f.u = u0;
          f.v = v0;
          f.idx.assign(cap, 0);
          f.keys.assign(cap, 0);
          const float m = 0.9f, c = 0.37f;
          f.count = fused_pass(kind, m, c, g.data(), f.u.data(), f.v.data(), 1, n, cut, f.idx.data(),
                               f.keys.data(), 1, cap, [](float*, std::size_t, std::size_t) {});
          return f;
        };
        const auto a = with_level(cpu::simd_level::portable, run);
        const auto b = with_level(cpu::simd_level::avx2, run);
        CHECK(bitwise_equal(a.u, b.u));
        CHECK(bitwise_equal(a.v, b.v));
        if (kind == momentum_kind::none) CHECK(bitwise_equal(a.u, u0));  // momentum untouched
        REQUIRE((a.count > cap) == (b.count > cap));
        if (a.count <= cap) {
          CHECK(a.count == b.count);
          CHECK(stored_equal(a, b));
        }
      }
    }
  }
}

TEST_CASE("simd: the fused pass with its sample and its moves equals update, filter, sample and move") {
  // Stretches where a few percent of the elements pass the cut alternate with stretches where almost
  // none do, so the AVX2 pass switches between its branch-free and its branching append. The pass
  // also moves its candidates out of v and u block by block (the fused DGC step's candidate
  // pool): zeros there, the values kept, and put_back restores the updated state exactly.
  const std::size_t n = 50001;
  auto g = random_vector<float>(n, dist::gaussian, 21);
  auto u0 = random_vector<float>(n, dist::gaussian, 22);
  auto v0 = random_vector<float>(n, dist::gaussian, 23);
  for (std::size_t i = 0; i < n; ++i) {
    if ((i / 3000) % 2 == 1) {
      g[i] *= 0.25f;
      u0[i] *= 0.25f;
      v0[i] *= 0.25f;
    }
  }
  const float m = 0.9f, c = 0.5f;
  const auto cut = gradcomp::detail::magnitude_key(2.5f);
  const std::size_t offset = 5, stride = 97;
  for (const momentum_kind kind : {momentum_kind::none, momentum_kind::vanilla, momentum_kind::nesterov}) {
    // The reference: the portable update over everything, then the filter, then the sample.
    std::vector<float> ru = u0, rv = v0;
    cpu::momentum_accumulate(kind, m, c, gradcomp::span<const float>(g.data(), n),
                             kind == momentum_kind::none ? gradcomp::span<float>() : gradcomp::span<float>(ru.data(), n),
                             gradcomp::span<float>(rv.data(), n));
    std::vector<std::uint32_t> ridx, rkeys, rsamples;
    for (std::size_t i = 0; i < n; ++i) {
      const auto key = gradcomp::detail::magnitude_key(rv[i]);
      if (key >= cut) {
        ridx.push_back(static_cast<std::uint32_t>(i));
        rkeys.push_back(key);
      }
    }
    for (std::size_t i = offset; i < n; i += stride) rsamples.push_back(gradcomp::detail::magnitude_key(rv[i]));
    REQUIRE(ridx.size() > n / 100);
    REQUIRE(ridx.size() < n / 10);

    for (const std::size_t cap : {ridx.size() / 2, ridx.size(), n}) {
      // Every candidate moved out, or only those at or above a higher cut.
      for (const auto move_cut : {std::uint32_t(0), gradcomp::detail::magnitude_key(3.0f)})
      for (const auto level : {cpu::simd_level::portable, cpu::simd_level::avx2}) {
        CAPTURE(static_cast<int>(kind));
        CAPTURE(cap);
        CAPTURE(move_cut);
        CAPTURE(static_cast<int>(level));
        filtered f;
        f.u = u0;
        f.v = v0;
        f.idx.assign(cap, 0);
        f.keys.assign(cap, 0);
        std::vector<std::uint32_t> samples(n / stride + 1);
        cpu::strided_sampler<float> sampler;
        sampler.next = offset;
        sampler.stride = stride;
        sampler.out = samples.data();
        std::vector<float> moved_v(cap), moved_u(cap);
        cpu::candidate_pool<float> pool;
        pool.idx = f.idx.data();
        pool.keys = f.keys.data();
        pool.data = f.v.data();
        pool.momentum = kind == momentum_kind::none ? nullptr : f.u.data();
        pool.values = moved_v.data();
        pool.momentum_values = moved_u.data();
        pool.move_cut = move_cut;
        with_level(level, [&] {
          f.count = fused_pass(kind, m, c, g.data(), f.u.data(), f.v.data(), 0, n, cut, f.idx.data(),
                               f.keys.data(), 0, cap, [&](float* v, std::size_t end, std::size_t count) {
                                 sampler.take(v, end);
                                 pool.move_out(std::min(count, cap));
                               });
          return 0;
        });
        const std::size_t sample_count = sampler.count;
        // Recorded: exactly the stored candidates, their values kept; those at or above the move
        // cut are zero in v (and u) now, the others untouched.
        REQUIRE(pool.moved == std::min(f.count, cap));
        std::size_t out = 0;
        for (std::size_t j = 0; j < pool.moved; ++j) {
          const std::uint32_t i = f.idx[j];
          REQUIRE(i < n);
          const bool moved = f.keys[j] >= move_cut;
          out += moved ? 1 : 0;
          CHECK(bitwise_equal(std::vector<float>{moved_v[j], f.v[i]}, std::vector<float>{rv[i], moved ? 0.0f : rv[i]}));
          if (kind != momentum_kind::none)
            CHECK(bitwise_equal(std::vector<float>{moved_u[j], f.u[i]}, std::vector<float>{ru[i], moved ? 0.0f : ru[i]}));
        }
        CHECK(out > 0);
        CHECK((out < pool.moved) == (move_cut != 0));
        pool.put_back();
        CHECK(pool.moved == 0);
        CHECK(bitwise_equal(f.u, ru));
        CHECK(bitwise_equal(f.v, rv));
        samples.resize(sample_count);
        CHECK(bitwise_equal(samples, rsamples));
        if (cap >= ridx.size()) {
          CHECK(f.count == ridx.size());
          f.idx.resize(f.count);
          f.keys.resize(f.count);
          CHECK(bitwise_equal(f.idx, ridx));
          CHECK(bitwise_equal(f.keys, rkeys));
        } else {
          // Past the capacity: the count says so, and what was stored is the reference's prefix.
          CHECK(f.count > cap);
          CHECK(std::equal(f.idx.begin(), f.idx.end(), ridx.begin()));
          CHECK(std::equal(f.keys.begin(), f.keys.end(), rkeys.begin()));
        }
      }
    }
  }
}

TEST_CASE("EF-SignSGD's AVX2 kernels equal the portable ones bitwise") {
  for (const std::size_t n : {std::size_t(0), std::size_t(7), std::size_t(31), std::size_t(32), std::size_t(1000),
                              std::size_t(4099)}) {
    CAPTURE(n);
    auto g = awkward_values(n, 3 * n + 1);
    auto e0 = awkward_values(n, 5 * n + 2);
    if (n == 1000) g[517] = std::numeric_limits<float>::infinity();  // keys and sums of non-finite p
    if (n == 4099) e0[2050] = std::numeric_limits<float>::quiet_NaN();
    for (const bool with_e : {true, false}) {
      CAPTURE(with_e);
      auto measure = [&] {
        cpu::ef_sign_measure<float> m;
        cpu::ef_sign_measure_all(0.03f, g.data(), with_e ? e0.data() : nullptr, n, m);
        return std::vector<double>(m.part, m.part + gradcomp::detail::sum_lanes);
      };
      auto keys = [&] {
        cpu::ef_sign_measure<float> m;
        cpu::ef_sign_measure_all(0.03f, g.data(), with_e ? e0.data() : nullptr, n, m);
        return std::vector<std::uint32_t>{m.top_g, m.top_p};
      };
      CHECK(bitwise_equal(with_level(cpu::simd_level::avx2, measure), with_level(cpu::simd_level::portable, measure)));
      CHECK(with_level(cpu::simd_level::avx2, keys) == with_level(cpu::simd_level::portable, keys));
    }
    auto apply = [&] {
      std::vector<float> e = e0, values(n);
      cpu::ef_sign_apply_all(0.03f, 0.75f, g.data(), e.data(), values.data(), n);
      e.insert(e.end(), values.begin(), values.end());
      return e;
    };
    CHECK(bitwise_equal(with_level(cpu::simd_level::avx2, apply), with_level(cpu::simd_level::portable, apply)));
  }
}
