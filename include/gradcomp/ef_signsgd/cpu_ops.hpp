// detail::ef_sign_ops<cpu_backend>: the CPU kernels of EF-SignSGD (ef_signsgd/step_plan.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../backend.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/ordered_sum.hpp"
#include "../detail/rounded.hpp"
#include "step_plan.hpp"
#include "../span.hpp"
#include "../detail/simd.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// One element's share of the measure: |p| in double (p = e + lr * g, or lr * g without e, a
// multiplication and an addition, never fused) and the magnitude keys of g and p. Reduced in the
// order of detail/ordered_sum.hpp, with ef_sign_merge, on every backend.
template <class T>
struct ef_sign_sums {
  double l1 = 0.0;
  key_t<T> top_g = 0, top_p = 0;
};

template <class T>
struct ef_sign_merge {
  GRADCOMP_HD ef_sign_sums<T> operator()(const ef_sign_sums<T>& a, const ef_sign_sums<T>& b) const {
    return {a.l1 + b.l1, a.top_g > b.top_g ? a.top_g : b.top_g, a.top_p > b.top_p ? a.top_p : b.top_p};
  }
};

template <class T>
struct ef_sign_leaf {
  T lr;
  const T* g;
  const T* e;  // null: p = lr * g
  GRADCOMP_HD ef_sign_sums<T> operator()(std::size_t i) const {
    const T gi = g[i];
    const T p = e != nullptr ? static_cast<T>(e[i] + rounded(lr * gi)) : static_cast<T>(lr * gi);
    return {std::fabs(static_cast<double>(p)), magnitude_key(gi), magnitude_key(p)};
  }
};

// The tensor's record from its measure: the largest |g| (NaN where g holds a NaN or an infinity),
// whether every p is finite, ||p||_1.
template <class T>
GRADCOMP_HD void ef_sign_record_sums(const ef_sign_sums<T>& s, ef_sign_record& r) {
  r.largest = is_finite_key<T>(s.top_g) ? static_cast<double>(value_of_key<T>(s.top_g)) : __builtin_nan("");
  r.p_finite = is_finite_key<T>(s.top_p) ? 1 : 0;
  r.l1 = s.l1;
}

// One block's measure in progress: the lanes of ||p||_1 and the keys' maxima. Every kernel below
// gives the bits of fold_block over ef_sign_leaf.
template <class T>
struct ef_sign_measure {
  double part[sum_lanes] = {};
  key_t<T> top_g = 0, top_p = 0;
};

// Elements [first, n) of the measure, continuing the lanes of element i at i % sum_lanes.
template <class T>
void ef_sign_measure_portable(T lr, const T* g, const T* e, std::size_t first, std::size_t n, ef_sign_measure<T>& m) {
  const ef_sign_leaf<T> leaf{lr, g, e};
  for (std::size_t i = first; i < n; ++i) {
    const ef_sign_sums<T> x = leaf(i);
    m.top_g = x.top_g > m.top_g ? x.top_g : m.top_g;
    m.top_p = x.top_p > m.top_p ? x.top_p : m.top_p;
    m.part[i % sum_lanes] += x.l1;
  }
}

// sent = sign(p) * s, e = p - sent over [first, n).
template <class T>
void ef_sign_apply_portable(T lr, T s, const T* g, T* e, T* values, std::size_t first, std::size_t n) {
  for (std::size_t i = first; i < n; ++i) {
    const T p = static_cast<T>(e[i] + rounded(lr * g[i]));
    const T v = std::signbit(p) ? -s : s;
    values[i] = v;
    e[i] = static_cast<T>(p - v);
  }
}

#if GRADCOMP_HAVE_AVX2_KERNELS
// The float measure with eight floats per vector: p = e + lr*g with a multiplication and an
// addition (never fused), the keys' maxima as integers, and |p| in double into the 32 lanes in
// the portable order (lane j takes elements i with i % 32 == j, each lane summed in order).
// Returns the first element it did not take.
GRADCOMP_TARGET_AVX2 inline std::size_t ef_sign_measure_avx2(float lr, const float* g, const float* e, std::size_t n,
                                                             ef_sign_measure<float>& m) {
  static_assert(sum_lanes == 32, "four vectors of eight floats per iteration");
  const __m256 vlr = _mm256_set1_ps(lr);
  const __m256i abs = _mm256_set1_epi32(0x7fffffff);
  const __m256d abs_d = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  __m256d acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_loadu_pd(m.part + 4 * j);
  __m256i kg = _mm256_setzero_si256(), kp = kg;
  std::size_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes) {
    for (int j = 0; j < 4; ++j) {
      const __m256 gv = _mm256_loadu_ps(g + i + 8 * j);
      const __m256 lg = rounded_ps(_mm256_mul_ps(vlr, gv));
      const __m256 p = e != nullptr ? _mm256_add_ps(_mm256_loadu_ps(e + i + 8 * j), lg) : lg;
      kg = _mm256_max_epu32(kg, _mm256_and_si256(_mm256_castps_si256(gv), abs));
      kp = _mm256_max_epu32(kp, _mm256_and_si256(_mm256_castps_si256(p), abs));
      const __m256d lo = _mm256_and_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(p)), abs_d);
      const __m256d hi = _mm256_and_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)), abs_d);
      acc[2 * j] = _mm256_add_pd(acc[2 * j], lo);
      acc[2 * j + 1] = _mm256_add_pd(acc[2 * j + 1], hi);
    }
  }
  for (int j = 0; j < 8; ++j) _mm256_storeu_pd(m.part + 4 * j, acc[j]);
  alignas(32) std::uint32_t lanes_g[8], lanes_p[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_g), kg);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_p), kp);
  for (int j = 0; j < 8; ++j) {
    m.top_g = std::max(m.top_g, lanes_g[j]);
    m.top_p = std::max(m.top_p, lanes_p[j]);
  }
  return i;
}

// The float apply with eight floats per vector: the sent value is s with p's sign bit.
GRADCOMP_TARGET_AVX2 inline std::size_t ef_sign_apply_avx2(float lr, float s, const float* g, float* e, float* values,
                                                           std::size_t n) {
  const __m256 vlr = _mm256_set1_ps(lr), vs = _mm256_set1_ps(s);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 p = _mm256_add_ps(_mm256_loadu_ps(e + i), rounded_ps(_mm256_mul_ps(vlr, _mm256_loadu_ps(g + i))));
    const __m256 v = _mm256_or_ps(vs, _mm256_and_ps(p, sign));
    _mm256_storeu_ps(values + i, v);
    _mm256_storeu_ps(e + i, _mm256_sub_ps(p, v));
  }
  return i;
}
#endif

template <class T>
void ef_sign_measure_all(T lr, const T* g, const T* e, std::size_t n, ef_sign_measure<T>& m) {
  std::size_t first = 0;
#if GRADCOMP_HAVE_AVX2_KERNELS
  if constexpr (std::is_same<T, float>::value)
    if (use_avx2()) first = ef_sign_measure_avx2(lr, g, e, n, m);
#endif
  ef_sign_measure_portable(lr, g, e, first, n, m);
}

template <class T>
void ef_sign_apply_all(T lr, T s, const T* g, T* e, T* values, std::size_t n) {
  std::size_t first = 0;
#if GRADCOMP_HAVE_AVX2_KERNELS
  if constexpr (std::is_same<T, float>::value)
    if (use_avx2()) first = ef_sign_apply_avx2(lr, s, g, e, values, n);
#endif
  ef_sign_apply_portable(lr, s, g, e, values, first, n);
}

}  // namespace cpu

template <>
struct ef_sign_ops<cpu_backend> {
  // One read of g and e: the largest |g| (through magnitude keys, so a NaN or an infinity shows),
  // whether every p is finite, and ||p||_1 in double in the order of every backend
  // (detail/ordered_sum.hpp).
  template <class T>
  static void measure(const cpu_backend&, T lr, span<const T> g, span<const T> e, span<ef_sign_record> records,
                      std::size_t t) {
    const T* gp = g.data();
    const T* ep = e.empty() ? nullptr : e.data();
    const auto s = ordered_reduce<cpu::ef_sign_sums<T>>(
        g.size(),
        [&](std::size_t first, std::size_t last) {
          cpu::ef_sign_measure<T> m;
          cpu::ef_sign_measure_all(lr, gp + first, ep != nullptr ? ep + first : nullptr, last - first, m);
          combine_lanes(m.part, sum_merge{});
          return cpu::ef_sign_sums<T>{m.part[0], m.top_g, m.top_p};
        },
        cpu::ef_sign_merge<T>{});
    cpu::ef_sign_record_sums(s, records[t]);
  }
  static void plan(const cpu_backend&, span<ef_sign_record> records, span<ef_sign_step_record> step) {
    plan_step(records.data(), records.size(), step.data());
  }
  // The step, if the verdict allows: a compressed tensor sends sign(p) * scale (a zero keeps its
  // sign) and keeps e = p - sent; a dense one sends lr * g.
  template <class T>
  static void apply(const cpu_backend&, T lr, span<const T> g, span<T> e, span<T> values,
                    span<const ef_sign_record> records, std::size_t t, span<const ef_sign_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(errc::ok)) return;
    const std::size_t n = g.size();
    if (records[t].compressed == 0) {
      for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<T>(lr * g[i]);
      return;
    }
    cpu::ef_sign_apply_all(lr, static_cast<T>(records[t].scale), g.data(), e.data(), values.data(), n);
  }
};

}  // namespace detail
}  // namespace gradcomp
