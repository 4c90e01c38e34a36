// The DGC step's kernels of the portable Thrust backend: each applies the per-element arithmetic
// the CPU kernels use (detail/dgc_arithmetic.hpp), and the L2 norm keeps the CPU's summation
// order (detail/ordered_sum.hpp), so every result is bitwise the CPU's.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <thrust/for_each.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include "../config.hpp"
#include "../cpu/dgc_kernels.hpp"
#include "../detail/dgc_arithmetic.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/state_bounds.hpp"
#include "../momentum_kind.hpp"
#include "../error.hpp"
#include "ordered_sum.hpp"
#include "system_memory.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

template <class T>
struct momentum_accumulate_op {
  momentum_kind kind;
  T m;
  T c;
  const T* g;
  T* u;
  T* v;
  GRADCOMP_HD void operator()(std::size_t i) const {
    T unused = T(0);  // u is empty for momentum_kind::none
    accumulate_one(kind, m, c, g[i], kind == momentum_kind::none ? unused : u[i], v[i]);
  }
};

// The largest magnitude keys of two buffers, reduced together (maxima: the order of the
// reduction does not matter).
template <class Key>
struct key_pair {
  Key u;
  Key v;
};

template <class Key>
struct key_pair_max {
  GRADCOMP_HD key_pair<Key> operator()(key_pair<Key> x, key_pair<Key> y) const {
    return key_pair<Key>{x.u < y.u ? y.u : x.u, x.v < y.v ? y.v : x.v};
  }
};

// The magnitudes of a reduced key pair (cpu::magnitudes_of_keys).
template <class T>
GRADCOMP_HD state_magnitudes magnitudes_of(key_pair<key_t<T>> keys) noexcept {
  state_magnitudes r;
  r.finite = is_finite_key<T>(keys.u) && is_finite_key<T>(keys.v);
  r.u = static_cast<double>(value_of_key<T>(keys.u));
  r.v = static_cast<double>(value_of_key<T>(keys.v));
  return r;
}

// The magnitude keys one accumulation would leave at i, writing nothing.
template <class T>
struct accumulated_keys_op {
  momentum_kind kind;
  T m;
  T c;
  const T* g;
  const T* u;
  const T* v;
  GRADCOMP_HD key_pair<key_t<T>> operator()(std::size_t i) const {
    T uu = kind == momentum_kind::none ? T(0) : u[i];
    T vv = v[i];
    accumulate_one(kind, m, c, g[i], uu, vv);
    return key_pair<key_t<T>>{magnitude_key(uu), magnitude_key(vv)};
  }
};

// values[j] = v[idx[j]], v[idx[j]] = 0 and, with masking, u[idx[j]] = 0 (positions distinct).
template <class T>
struct gather_and_zero_op {
  T* v;
  const std::uint32_t* idx;
  T* values;
  T* also_zero;  // null: no masking
  GRADCOMP_HD void operator()(std::size_t j) const {
    const std::uint32_t i = idx[j];
    values[j] = v[i];
    v[i] = T(0);
    if (also_zero != nullptr) also_zero[i] = T(0);
  }
};

template <class T>
struct zero_at_op {
  T* u;
  const std::uint32_t* idx;
  GRADCOMP_HD void operator()(std::size_t j) const { u[idx[j]] = T(0); }
};

template <class T>
struct scale_copy_op {
  T c;
  GRADCOMP_HD T operator()(T g) const { return c * g; }
};

template <class T>
struct magnitude_key_of {
  GRADCOMP_HD key_t<T> operator()(T v) const { return magnitude_key(v); }
};

template <class K>
struct key_max {
  GRADCOMP_HD K operator()(K a, K b) const { return a < b ? b : a; }
};

// The largest magnitude key of g[0, n). Waits.
template <class T, class System>
key_t<T> largest_key(stream_t stream, const T* g, std::size_t n) {
  return returned(thrust::transform_reduce(exec<System>(stream), g, g + n, magnitude_key_of<T>{}, key_t<T>(0),
                                           key_max<key_t<T>>{}));
}

// A quiet NaN, on the host and the device.
GRADCOMP_HD inline double quiet_nan() noexcept { return __builtin_nan(""); }

// Whether a sum of squares in double can overflow for finite values of T (n < 2^32): double
// only; for float a sum that is not finite means a NaN or an infinity in the input.
template <class T>
constexpr bool squares_may_overflow =
    2 * std::numeric_limits<T>::max_exponent + 32 > std::numeric_limits<double>::max_exponent;

// One thread: the norm where the sum of squares is finite; otherwise not finite, pending the
// fallback below.
struct norm_combine {
  const double* sum;
  cpu::norm_result* out;
  GRADCOMP_HD void operator()(std::size_t) const {
    cpu::norm_result r;
    if (*sum - *sum == 0.0) {  // finite
      r.norm = r.root = sqrt(*sum);
    } else {
      r.finite = false;
    }
    *out = r;
  }
};

// The magnitude key of g[i] where the plain sum was not finite (zero otherwise: the pass is
// needed only then).
template <class T>
struct key_if_overflowed {
  const T* g;
  const double* sum;
  GRADCOMP_HD key_t<T> operator()(std::size_t i) const {
    return *sum - *sum == 0.0 ? key_t<T>(0) : magnitude_key(g[i]);
  }
};

// The scaled square of g[i] (the CPU's fallback) where the plain sum was not finite and the input
// is (zero otherwise, without reading g).
template <class T>
struct scaled_square_if_overflowed {
  const T* g;
  const double* sum;
  const key_t<T>* largest;
  GRADCOMP_HD double operator()(std::size_t i) const {
    if (*sum - *sum == 0.0 || !is_finite_key<T>(*largest)) return 0.0;
    return scaled_square_leaf<T>{g, fabs(static_cast<double>(value_of_key<T>(*largest)))}(i);
  }
};

// One thread, where the plain sum was not finite and the input is: the norm as scale * root.
template <class T>
struct norm_fallback {
  const double* sum;
  const key_t<T>* largest;
  const double* scaled;
  cpu::norm_result* out;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (*sum - *sum == 0.0 || !is_finite_key<T>(*largest)) return;
    cpu::norm_result r;
    r.scale = fabs(static_cast<double>(value_of_key<T>(*largest)));
    r.root = sqrt(*scaled);
    r.norm = r.scale * r.root;
    *out = r;
  }
};

// The scratch of issue_l2_norm in System's memory.
template <class T>
struct norm_scratch {
  double sum;
  double scaled;
  key_t<T> largest;
  cpu::norm_result result;
};

// Issues cpu::l2_norm of g[0, n) in the CPU's order into w->result, without the host waiting: the
// sum of squares in the order of detail/ordered_sum.hpp and, for double, the scaled fallback (a
// largest key and a second sum that read g only where the plain sum overflowed).
template <class T, class System>
void issue_l2_norm(stream_t stream, const T* g, std::size_t n, norm_scratch<T>* w) {
  issue_ordered_reduce<double, System>(stream, n, square_leaf<T>{g}, sum_merge{}, &w->sum);
  run_once<System>(stream, norm_combine{&w->sum, &w->result});
  if constexpr (squares_may_overflow<T>) {
    const auto keys = thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0),
                                                      key_if_overflowed<T>{g, &w->sum});
    execution<System>::reduce_into(stream, keys, n, key_t<T>(0), key_max<key_t<T>>{}, &w->largest);
    issue_ordered_reduce<double, System>(stream, n, scaled_square_if_overflowed<T>{g, &w->sum, &w->largest},
                                         sum_merge{}, &w->scaled);
    run_once<System>(stream, norm_fallback<T>{&w->sum, &w->largest, &w->scaled, &w->result});
  }
}

// cpu::l2_norm with the CPU's order. Waits (one copy).
template <class T, class System>
cpu::norm_result l2_norm(stream_t stream, const T* g, std::size_t n) {
  scratch<norm_scratch<T>, System> w(stream, 1);
  // The result is copied back whole: its padding, which the norm does not write, starts zeroed.
  zero_bytes<System>(stream, &w.data()->result, sizeof(cpu::norm_result));
  issue_l2_norm<T, System>(stream, g, n, w.data());
  return read_value<System>(stream, &w.data()->result);
}

// cpu::accumulated_magnitudes: what one accumulation would leave in u and v, writing nothing.
// Waits.
template <class T, class System>
state_magnitudes accumulated_magnitudes(stream_t stream, momentum_kind kind, T m, T c, const T* g, const T* u,
                                        const T* v, std::size_t n) {
  using key_type = key_t<T>;
  const auto keys = returned(
      thrust::transform_reduce(thrust_impl::exec<System>(stream), thrust::counting_iterator<std::size_t>(0),
                               thrust::counting_iterator<std::size_t>(n), accumulated_keys_op<T>{kind, m, c, g, u, v},
                               key_pair<key_type>{0, 0}, key_pair_max<key_type>{}));
  return magnitudes_of<T>(keys);
}

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
