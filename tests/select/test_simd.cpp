// The AVX2 kernels (cpu/simd.hpp) against the portable ones: bitwise the same results on inputs
// with every kind of value (signed zeros, denormals, infinities, NaN) and lengths that are not
// multiples of the vector width. Where the CPU has no AVX2 both runs take the portable path.
#include <gradcomp/cpu/fused_kernels.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "support/inputs.hpp"

using gradcomp::momentum_kind;
using namespace gradcomp_test;
namespace cpu = gradcomp::detail::cpu;

namespace {

// Runs f() with the kernels pinned to `level`, then restores automatic dispatch.
template <class F>
auto with_level(cpu::simd_level level, F f) {
  cpu::simd_override().store(static_cast<int>(level));
  auto r = f();
  cpu::simd_override().store(-1);
  return r;
}

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

}  // namespace

TEST_CASE("simd: the detected level is reported and can be pinned to portable") {
  const auto detected = cpu::detected_simd_level();
  CHECK(with_level(cpu::simd_level::portable, [] { return cpu::active_simd_level(); }) ==
        cpu::simd_level::portable);
  CHECK(with_level(cpu::simd_level::avx2, [] { return cpu::active_simd_level(); }) == detected);
  CHECK(cpu::active_simd_level() == detected);
}

TEST_CASE("simd: l2_norm is bitwise the same at every level") {
  for (const std::size_t n : {0u, 1u, 7u, 8u, 9u, 1000u, 65537u}) {
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
        CHECK(bitwise_equal(a.idx, b.idx));
        CHECK(bitwise_equal(a.keys, b.keys));
      }
    }
  }
}

TEST_CASE("simd: the fused update-and-filter pass is the same at every level") {
  for (const std::size_t n : {std::size_t(5), std::size_t(64), std::size_t(20011)}) {
    for (const momentum_kind kind : {momentum_kind::none, momentum_kind::vanilla, momentum_kind::nesterov}) {
      for (const std::size_t cap : {std::size_t(3), n}) {
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
          switch (kind) {
            case momentum_kind::none:
              f.count = cpu::accumulate_filter<momentum_kind::none>(m, c, g.data(), f.u.data(), f.v.data(), 1, n,
                                                                    cut, f.idx.data(), f.keys.data(), 1, cap);
              break;
            case momentum_kind::vanilla:
              f.count = cpu::accumulate_filter<momentum_kind::vanilla>(m, c, g.data(), f.u.data(), f.v.data(),
                                                                       1, n, cut, f.idx.data(), f.keys.data(), 1, cap);
              break;
            case momentum_kind::nesterov:
              f.count = cpu::accumulate_filter<momentum_kind::nesterov>(m, c, g.data(), f.u.data(), f.v.data(),
                                                                        1, n, cut, f.idx.data(), f.keys.data(), 1, cap);
              break;
          }
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
          CHECK(bitwise_equal(a.idx, b.idx));
          CHECK(bitwise_equal(a.keys, b.keys));
        }
      }
    }
  }
}
