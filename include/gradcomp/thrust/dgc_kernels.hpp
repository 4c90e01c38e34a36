// The DGC step's kernels of the portable Thrust backend: each applies the per-element arithmetic
// the CPU kernels use (detail/dgc_arithmetic.hpp), and the L2 norm keeps the CPU's summation
// order (32 interleaved partial sums in double, combined pairwise in a fixed tree), so every
// result is bitwise the CPU's.
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
#include "../dgc/momentum_kind.hpp"
#include "../dgc/step_plan.hpp"
#include "../error.hpp"
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

// Partial sum `lane` of the L2 norm: the squares of elements lane, lane + lanes, ... in order.
template <class T>
struct norm_lane_op {
  const T* g;
  std::size_t n;
  double* part;
  GRADCOMP_HD void operator()(std::size_t lane) const {
    double s = 0.0;
    for (std::size_t i = lane; i < n; i += cpu::norm_lanes) {
      const double x = static_cast<double>(g[i]);
      s += x * x;
    }
    part[lane] = s;
  }
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

// One thread: the lanes' partial sums combined in the CPU's tree (part[0] receives the sum), the
// norm where the sum is finite; otherwise not finite, pending the fallback below.
struct norm_combine {
  double* part;
  cpu::norm_result* out;
  GRADCOMP_HD void operator()(std::size_t) const {
    for (std::size_t width = cpu::norm_lanes / 2; width > 0; width /= 2)
      for (std::size_t j = 0; j < width; ++j) part[j] += part[j + width];
    cpu::norm_result r;
    const double sum = part[0];
    if (sum - sum == 0.0) {  // finite
      r.norm = r.root = sqrt(sum);
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

// One thread, where the plain sum was not finite: a finite input's scaled sum of squares in the
// CPU's order (one sum, element by element), the norm as scale * root.
template <class T>
struct norm_fallback {
  const T* g;
  std::size_t n;
  const double* sum;
  const key_t<T>* largest;
  cpu::norm_result* out;
  GRADCOMP_HD void operator()(std::size_t) const {
    if (*sum - *sum == 0.0 || !is_finite_key<T>(*largest)) return;
    const double top = fabs(static_cast<double>(value_of_key<T>(*largest)));
    double s = 0.0;
    for (std::size_t k = 0; k < n; ++k) {
      const double x = static_cast<double>(g[k]) / top;
      s += x * x;
    }
    cpu::norm_result r;
    r.scale = top;
    r.root = sqrt(s);
    r.norm = top * r.root;
    *out = r;
  }
};

// The scratch of issue_l2_norm in System's memory.
template <class T>
struct norm_scratch {
  double part[cpu::norm_lanes];
  key_t<T> largest;
  cpu::norm_result result;
};

// Issues cpu::l2_norm of g[0, n) in the CPU's order into w->result, without the host waiting: the
// 32 lanes' partial sums, their tree on one thread and, for double, the scaled fallback (a
// reduction that reads g only where the plain sum overflowed).
template <class T, class System>
void issue_l2_norm(stream_t stream, const T* g, std::size_t n, norm_scratch<T>* w) {
  thrust::for_each_n(exec<System>(stream), thrust::counting_iterator<std::size_t>(0), cpu::norm_lanes,
                     norm_lane_op<T>{g, n, w->part});
  run_once<System>(stream, norm_combine{w->part, &w->result});
  if constexpr (squares_may_overflow<T>) {
    const auto keys = thrust::make_transform_iterator(thrust::counting_iterator<std::size_t>(0),
                                                      key_if_overflowed<T>{g, w->part});
    execution<System>::reduce_into(stream, keys, n, key_t<T>(0), key_max<key_t<T>>{}, &w->largest);
    run_once<System>(stream, norm_fallback<T>{g, n, w->part, &w->largest, &w->result});
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

// The magnitude keys one accumulation would leave at i, writing nothing; zero keys where the
// tensor's record does not ask for them (dgc_exact_bounds: only a tensor marked by the overflow
// guard).
template <class T>
struct marked_accumulated_keys {
  accumulated_keys_op<T> op;
  const dgc_tensor_record<T>* r;
  GRADCOMP_HD key_pair<key_t<T>> operator()(std::size_t i) const {
    if (r->status != static_cast<std::int32_t>(errc::state_overflow)) return key_pair<key_t<T>>{0, 0};
    accumulated_keys_op<T> o = op;
    o.c = static_cast<T>(r->coef);
    return o(i);
  }
};

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
