// CPU kernels of the DGC step: norms, momentum correction, accumulation, gather-and-zero, masking
// and the receiving side's scatter-add. Arguments are validated by the public functions in dgc/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "../detail/magnitude.hpp"
#include "../detail/ordered_sum.hpp"
#include "../detail/state_bounds.hpp"
#include "../error.hpp"
#include "../detail/dgc_arithmetic.hpp"
#include "../momentum_kind.hpp"
#include "../span.hpp"
#include "../detail/simd.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

// L2 norm in double, kept as scale * root: finite is false when an element is NaN or infinite.
// Normally scale is 1 and root the norm. A sum of squares that overflows double (only possible for
// double input) is recomputed scaled by the largest magnitude, which becomes `scale`; the norm
// itself (their product) may then exceed the double range, the pair never does.
struct norm_result {
  double norm = 0.0;   // scale * root (infinite when beyond the double range)
  bool finite = true;
  double scale = 1.0;  // 1, or the largest magnitude when the plain sum overflowed
  double root = 0.0;   // the norm divided by scale
};

// The largest magnitude key of g (magnitude_key order: a key at or above the key of infinity
// means g holds a NaN or an infinity): one read, cheaper than l2_norm's arithmetic, for the
// finiteness check that also bounds what the step can add to the state.
template <class T>
key_t<T> largest_key(span<const T> g) {
  const T* p = g.data();
  const std::size_t n = g.size();
#if GRADCOMP_HAVE_AVX2_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx2()) return largest_key_avx2(p, n);
  }
#endif
  key_t<T> largest = 0;
  for (std::size_t i = 0; i < n; ++i) largest = std::max(largest, magnitude_key(p[i]));
  return largest;
}

// The largest magnitude of g, or NaN when g holds a NaN or an infinity.
template <class T>
double largest_magnitude(span<const T> g) {
  const key_t<T> key = largest_key(g);
  if (!is_finite_key<T>(key)) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(value_of_key<T>(key));
}

// True when no element of g is NaN or infinite.
template <class T>
bool all_finite(span<const T> g) {
  return is_finite_key<T>(largest_key(g));
}

// The squares of g[first, last) in double into the lanes of one block (detail/ordered_sum.hpp),
// vectorised for float where the CPU allows.
template <class T>
void sum_squares(const T* g, std::size_t first, std::size_t last, double* lanes) {
#if GRADCOMP_HAVE_AVX2_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx2()) {
      sum_squares_avx2(g + first, last - first, lanes);
      return;
    }
  }
#endif
  std::size_t i = first;
  for (; i + sum_lanes <= last; i += sum_lanes)
    for (std::size_t j = 0; j < sum_lanes; ++j) lanes[j] = sum_merge{}(lanes[j], square_leaf<T>{g}(i + j));
  for (std::size_t j = 0; i < last; ++i, ++j) lanes[j] = sum_merge{}(lanes[j], square_leaf<T>{g}(i));
}

template <class T>
norm_result l2_norm(span<const T> g) {
  norm_result r;
  // The sum of squares in the order of every backend (detail/ordered_sum.hpp): 32 lanes per block,
  // which the compiler vectorises and whose additions' latency hides behind the memory reads. A
  // NaN or an infinity makes the sum non-finite, so the element-wise check only runs then.
  const T* p = g.data();
  const std::size_t n = g.size();
  const double sum = ordered_reduce<double>(
      n,
      [p](std::size_t first, std::size_t last) {
        double lanes[sum_lanes] = {};
        sum_squares(p, first, last, lanes);
        combine_lanes(lanes, sum_merge{});
        return lanes[0];
      },
      sum_merge{});
  if (std::isfinite(sum)) {
    r.norm = r.root = std::sqrt(sum);
    return r;
  }
  key_t<T> largest = 0;
  for (std::size_t k = 0; k < n; ++k) largest = std::max(largest, magnitude_key(p[k]));
  r.finite = is_finite_key<T>(largest);
  if (!r.finite) return r;
  // Only double input gets here: finite values whose squares overflow. Scale by the largest.
  const double top = std::fabs(static_cast<double>(value_of_key<T>(largest)));
  const scaled_square_leaf<T> leaf{p, top};
  const double scaled = ordered_reduce<double>(
      n, [leaf](std::size_t first, std::size_t last) { return fold_block<double>(first, last, leaf, sum_merge{}); },
      sum_merge{});
  r.scale = top;
  r.root = std::sqrt(scaled);
  r.norm = top * r.root;
  return r;
}

// vanilla:  U = m*U + c*g;     V = V + U
// nesterov: U = m*(U + c*g);   V = V + U + c*g
// none:     V = V + c*g
// A scale c == 1 is applied as an exact no-op, so unclipped steps are bitwise reproducible.
template <class T>
void momentum_accumulate(momentum_kind kind, T m, T c, span<const T> g, span<T> u, span<T> v) {
  const std::size_t n = g.size();
  const T* gp = g.data();
  T* up = u.data();
  T* vp = v.data();
  switch (kind) {
    case momentum_kind::none:
      for (std::size_t i = 0; i < n; ++i) {
        T unused = T(0);  // u may be empty
        accumulate_one<momentum_kind::none>(m, c, gp[i], unused, vp[i]);
      }
      break;
    case momentum_kind::vanilla:
      for (std::size_t i = 0; i < n; ++i) accumulate_one<momentum_kind::vanilla>(m, c, gp[i], up[i], vp[i]);
      break;
    case momentum_kind::nesterov:
      for (std::size_t i = 0; i < n; ++i) accumulate_one<momentum_kind::nesterov>(m, c, gp[i], up[i], vp[i]);
      break;
  }
}

// Receiver-side momentum, in place on the averaged gradient a (the same arithmetic as the sender's
// momentum correction, so a dense tensor and a compressed tensor with k = n agree bitwise):
// vanilla:  U = m*U + a;    a = U
// nesterov: U = m*(U + a);  a = U + a
template <class T>
void momentum_apply(momentum_kind kind, T m, span<T> u, span<T> a) {
  const std::size_t n = a.size();
  T* up = u.data();
  T* ap = a.data();
  if (kind == momentum_kind::vanilla) {
    for (std::size_t i = 0; i < n; ++i) receiver_momentum_one(momentum_kind::vanilla, m, up[i], ap[i]);
  } else if (kind == momentum_kind::nesterov) {
    for (std::size_t i = 0; i < n; ++i) receiver_momentum_one(momentum_kind::nesterov, m, up[i], ap[i]);
  }
}

// values[j] = v[idx[j]], then v[idx[j]] = 0; with a non-empty `also_zero` (momentum factor
// masking), also_zero[idx[j]] = 0 in the same loop.
template <class T>
void gather_and_zero(span<T> v, span<const std::uint32_t> idx, span<T> values, span<T> also_zero = {}) {
  const std::uint32_t* ip = idx.data();
  T* vp = v.data();
  T* up = also_zero.data();
  T* out = values.data();
  const std::size_t count = idx.size();
  const bool mask = !also_zero.empty();
  const std::size_t ahead = count > gather_prefetch_distance ? count - gather_prefetch_distance : 0;
  std::size_t j = 0;
  for (; j < ahead; ++j) {
    prefetch_for_write(vp + ip[j + gather_prefetch_distance]);
    if (mask) prefetch_for_write(up + ip[j + gather_prefetch_distance]);
    out[j] = vp[ip[j]];
    vp[ip[j]] = T(0);
    if (mask) up[ip[j]] = T(0);
  }
  for (; j < count; ++j) {
    out[j] = vp[ip[j]];
    vp[ip[j]] = T(0);
    if (mask) up[ip[j]] = T(0);
  }
}

template <class T>
void zero_at(span<T> u, span<const std::uint32_t> idx) {
  for (std::size_t j = 0; j < idx.size(); ++j) u[idx[j]] = T(0);
}

template <class T>
void scale_copy(T c, span<const T> g, span<T> out) {
  for (std::size_t i = 0; i < g.size(); ++i) out[i] = c * g[i];
}

template <class T>
void scatter_add(span<const std::uint32_t> idx, span<const T> values, span<T> acc) {
  for (std::size_t j = 0; j < idx.size(); ++j) acc[idx[j]] += values[j];
}

template <class T>
void add(span<const T> values, span<T> acc) {
  for (std::size_t i = 0; i < values.size(); ++i) acc[i] += values[i];
}

template <class T>
void scale(T c, span<T> x) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] *= c;
}

template <class T>
void fill_zero(span<T> x) {
  std::fill(x.begin(), x.end(), T(0));
}

using state_magnitudes = gradcomp::detail::state_magnitudes;

// The magnitudes of the largest keys of the two buffers (finite: both keys below infinity's).
template <class T>
state_magnitudes magnitudes_of_keys(key_t<T> ku, key_t<T> kv) noexcept {
  state_magnitudes r;
  r.finite = is_finite_key<T>(ku) && is_finite_key<T>(kv);
  r.u = static_cast<double>(value_of_key<T>(ku));
  r.v = static_cast<double>(value_of_key<T>(kv));
  return r;
}

// The largest magnitude of acc[i] + values[j] over the positions an add would touch (i = idx[j];
// i = j when idx is empty), with the add's arithmetic, writing nothing; NaN when a sum would not
// be finite.
template <class T>
double largest_magnitude_of_sum(span<const T> acc, span<const std::uint32_t> idx, span<const T> values) {
  key_t<T> largest = 0;
  const bool dense = idx.empty();
  for (std::size_t j = 0; j < values.size(); ++j) {
    const T s = acc[dense ? j : idx[j]] + values[j];
    largest = std::max(largest, magnitude_key(s));
  }
  if (!is_finite_key<T>(largest)) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(value_of_key<T>(largest));
}

// What momentum_apply would leave in u and a (v: the update) after `a` is first multiplied by
// `inv` (when `scaled`), with the same arithmetic, writing nothing.
template <class T>
state_magnitudes momentum_apply_magnitudes(momentum_kind kind, T m, T inv, bool scaled, span<const T> u,
                                           span<const T> a) {
  key_t<T> ku = 0, ka = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    T av = scaled ? rounded(a[i] * inv) : a[i];
    T uv = kind == momentum_kind::none ? T(0) : u[i];
    receiver_momentum_one(kind, m, uv, av);
    ku = std::max(ku, magnitude_key(uv));
    ka = std::max(ka, magnitude_key(av));
  }
  return magnitudes_of_keys<T>(ku, ka);
}

inline bool all_below(span<const std::uint32_t> idx, std::size_t n) {
  bool ok = true;
  for (std::size_t j = 0; j < idx.size(); ++j) ok &= idx[j] < n;
  return ok;
}

// errc::ok when every position is below n and each is above the one before it, else
// errc::index_out_of_range (checked first) or errc::indices_not_increasing.
inline errc check_positions(span<const std::uint32_t> idx, std::size_t n) {
  if (!all_below(idx, n)) return errc::index_out_of_range;
  for (std::size_t j = 1; j < idx.size(); ++j)
    if (idx[j] <= idx[j - 1]) return errc::indices_not_increasing;
  return errc::ok;
}

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
