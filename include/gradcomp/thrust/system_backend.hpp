/// @file thrust/system_backend.hpp
/// @brief The portable Thrust backend: gradcomp's backend operations written once over Thrust
/// algorithms, with the Thrust system as a template parameter. Include `<gradcomp/thrust.hpp>`,
/// which adds every method's kernels for it.
///
/// `thrust_backend<System>` runs on the C++ system (`thrust::system::cpp::tag`), the OpenMP
/// system (`thrust::system::omp::tag`) and, compiled by nvcc, the CUDA system
/// (`thrust::system::cuda::tag`, on the stream of `thrust_backend::on`).
/// Its operations are Thrust algorithms (`fill`, `transform`, `for_each_n`, `transform_reduce`)
/// over the backend's own functors, each the element-wise form of the CPU backend's loop with
/// the same arithmetic, and every reduction is of a kind whose result does not depend on the order
/// of evaluation (maxima of magnitude keys, logical or), so the results are bitwise the CPU
/// backend's on every system and every thread count. The decisions of a step (the verdict, each
/// tensor's record, a selection's counts and thresholds) are taken on the system, by single-thread
/// operations over state kept in its memory, and every later operation reads them there: the host
/// issues a step's work without waiting for any of it, and reads the outcome through copies
/// (thrust/system_memory.hpp) only when asked, so the same source runs where the host cannot
/// address the memory.
/// On the CUDA system, the library's arithmetic must not be contracted into fused multiply-adds
/// (compile with `nvcc -fmad=false`), as on the host.
///
/// Its memory space, `thrust_space<System>`, is not host accessible even where the memory is
/// host memory: code written against the backend reaches it only through the backend's copies,
/// as it must for a device.
///
/// This header provides the memory members, the selections (exact top-k and DGC's sampled
/// threshold) and the aggregator's and public operations of the contract (docs/backends.md).
/// Every method's kernels for it are in its own folder (`<method>/thrust_ops.hpp`: DGC,
/// EF-SignSGD, TernGrad, 1-bit SGD, QSGD, AdaComp, ISGQ, SAEF).
///
/// This header includes Thrust (from the CUDA Toolkit's CCCL, `<cuda>/include/cccl`, or any
/// other Thrust installation); the umbrella header `<gradcomp/gradcomp.hpp>` does not include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include <thrust/copy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/memory.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include "../backend.hpp"
#include "../config.hpp"
#include "../detail/dgc_arithmetic.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/state_bounds.hpp"
#include "../momentum_kind.hpp"
#include "../error.hpp"
#include "../selection_types.hpp"
#include "../span.hpp"
#include "dgc_kernels.hpp"
#include "sampled.hpp"
#include "select.hpp"
#include "system_memory.hpp"
#include "threshold.hpp"

namespace gradcomp {

/**
 * @brief The memory space of `thrust_backend<System>`: memory allocated through Thrust system
 * `System`. Not host accessible, whatever the system, so that spans of it cannot be indexed on
 * the host.
 */
template <class System>
struct thrust_space {};

/**
 * @brief The portable Thrust backend on Thrust system `System` (a system tag:
 * `thrust::system::cpp::tag`, `thrust::system::omp::tag` or, compiled by nvcc,
 * `thrust::system::cuda::tag`).
 *
 * Its results are deterministic: bitwise the CPU backend's. On the host systems each operation
 * returns when its work is done; on the CUDA system work is queued on the value's stream (`on`),
 * and the host waits only in `synchronize`, in the copies, and in the operations documented to
 * return a value (the public building blocks), never inside a compressor's step. A compressor
 * built with one backend value takes another per call (`compress(backend.on(s), grads)`), so one
 * compressor can follow the trainer's stream from step to step.
 */
template <class System>
struct thrust_backend : stream_backend<thrust_backend<System>> {
  using memory_space = thrust_space<System>;  ///< Memory allocated through `System`.
  using system = System;                      ///< The Thrust system tag.
};

/// Every `thrust_backend<System>` is a backend.
template <class System>
struct is_backend<thrust_backend<System>> : std::true_type {};

namespace detail {
namespace thrust_impl {

// ---------------------------------------------------------------------------------------------
// Functors: each the body of the CPU backend's loop for one element (cpu/dgc_kernels.hpp), with
// the same arithmetic in the same order.
// ---------------------------------------------------------------------------------------------

template <class T>
struct plus_op {
  GRADCOMP_HD T operator()(T acc, T value) const { return acc + value; }
};

template <class T>
struct scale_op {
  T c;
  GRADCOMP_HD T operator()(T x) const { return x * c; }
};

template <class T>
struct scatter_add_op {
  const std::uint32_t* idx;
  const T* values;
  T* acc;
  GRADCOMP_HD void operator()(std::size_t j) const { acc[idx[j]] += values[j]; }
};

// Receiver-side momentum on element i (cpu::momentum_apply).
template <class T>
struct momentum_apply_op {
  momentum_kind kind;
  T m;
  T* u;
  T* a;
  GRADCOMP_HD void operator()(std::size_t i) const { receiver_momentum_one(kind, m, u[i], a[i]); }
};

// The magnitude key of acc[i] + values[j] (i = idx[j], or j where idx is null).
template <class T>
struct sum_key_op {
  const T* acc;
  const std::uint32_t* idx;
  const T* values;
  GRADCOMP_HD key_t<T> operator()(std::size_t j) const {
    const T s = acc[idx != nullptr ? idx[j] : j] + values[j];
    return magnitude_key(s);
  }
};

// The magnitude keys of what momentum_apply would leave in u and a (as the pair's v) for element
// i, after `a` is first multiplied by `inv` where `scaled` (cpu::momentum_apply_magnitudes).
template <class T>
struct momentum_apply_keys_op {
  momentum_kind kind;
  T m;
  T inv;
  bool scaled;
  const T* u;
  const T* a;
  GRADCOMP_HD key_pair<key_t<T>> operator()(std::size_t i) const {
    T av = scaled ? rounded(a[i] * inv) : a[i];
    T uv = kind == momentum_kind::none ? T(0) : u[i];
    receiver_momentum_one(kind, m, uv, av);
    return key_pair<key_t<T>>{magnitude_key(uv), magnitude_key(av)};
  }
};

struct at_or_above_op {
  const std::uint32_t* idx;
  std::size_t n;
  GRADCOMP_HD bool operator()(std::size_t j) const { return idx[j] >= n; }
};

// Position j + 1 not above position j.
struct not_increasing_op {
  const std::uint32_t* idx;
  GRADCOMP_HD bool operator()(std::size_t j) const { return idx[j + 1] <= idx[j]; }
};

struct or_op {
  GRADCOMP_HD bool operator()(bool a, bool b) const { return a || b; }
};

template <class T>
GRADCOMP_HD double value_of_largest_key(key_t<T> key) noexcept {
  if (!is_finite_key<T>(key)) return quiet_nan();
  return static_cast<double>(value_of_key<T>(key));
}

}  // namespace thrust_impl

/// The Thrust backend's operations (docs/backends.md): memory and the aggregator's operations.
template <class System>
struct ops<thrust_backend<System>> : one_tensor_at_a_time {
  using backend = thrust_backend<System>;
  using space = thrust_space<System>;
  template <class T>
  using view = span<T, space>;

  // --- Memory -----------------------------------------------------------------------------
  template <class T>
  using buffer = thrust_impl::system_buffer<T, System>;

  // n elements, every byte zero (T is trivially copyable).
  template <class T>
  static buffer<T> allocate(const backend& on, std::size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "backend buffers hold trivially copyable types");
    buffer<T> b(n);
    thrust_impl::zero_bytes<System>(on.stream, b.view().data(), n * sizeof(T));
    return b;
  }
  // The copies are complete when they return (thrust/system_memory.hpp), after the work queued
  // before them; synchronize waits for the work queued since (on the CUDA system; the host
  // systems finish each operation before it returns).
  template <class T>
  static void copy_to_host(const backend& on, view<const T> from, span<T> to) {
    thrust_impl::copy_bytes_to_host<System>(on.stream, from.data(), static_cast<void*>(to.data()), from.size_bytes());
  }
  template <class T>
  static void copy_to_backend(const backend& on, span<const T> from, view<T> to) {
    thrust_impl::copy_bytes_to_system<System>(on.stream, from.data(), static_cast<void*>(to.data()), from.size_bytes());
  }
  static void synchronize(const backend& on) { thrust_impl::execution<System>::wait(on.stream); }

  // --- Work over tensors: one tensor at a time (one_tensor_at_a_time), each tensor's operations
  // already parallel inside the system.

  // --- Selection ----------------------------------------------------------------------------
  // The exact top-k (thrust/select.hpp): the CPU's indices, count and threshold, bitwise.
  template <class T>
  static std::size_t exact_topk_workspace_bytes(const backend&, std::size_t n, std::size_t k) {
    return thrust_impl::exact_topk_workspace_bytes<T, System>(n, k);
  }
  template <class T>
  static result<std::size_t> exact_topk(const backend& on, view<const T> values, std::size_t k,
                                        view<std::uint32_t> out, view<std::byte> workspace, T* threshold) {
    return thrust_impl::exact_topk<T, System>(on.stream, values.data(), values.size(), k, out.data(), workspace.data(),
                                              workspace.size(), threshold);
  }

  // DGC's sampled threshold (thrust/sampled.hpp): the CPU's selection_result and indices, bitwise.
  template <class T>
  static std::size_t sampled_threshold_workspace_bytes(const backend&, const sampled_threshold_config& cfg,
                                                       std::size_t n, std::size_t k) {
    return thrust_impl::sampled_threshold_workspace_bytes<T, System>(cfg, n, k);
  }
  template <class T>
  static result<selection_result<T>> sampled_threshold_select(const backend& on, view<const T> values, std::size_t k,
                                                              const sampled_threshold_config& cfg, std::uint64_t seed,
                                                              view<std::uint32_t> out, view<std::byte> workspace) {
    return thrust_impl::sampled_threshold_select<T, System>(on.stream, values.data(), values.size(), k, cfg, seed,
                                                            out.data(), workspace.data(), workspace.size());
  }

  // --- The aggregator's kernels -------------------------------------------------------------
  template <class T>
  static void fill_zero(const backend& on, view<T> x) {
    thrust::fill_n(thrust_impl::exec<System>(on.stream), x.data(), x.size(), T(0));
  }
  // acc += values
  template <class T>
  static void add(const backend& on, view<const T> values, view<T> acc) {
    thrust::transform(thrust_impl::exec<System>(on.stream), acc.data(), acc.data() + acc.size(), values.data(),
                      acc.data(), thrust_impl::plus_op<T>{});
  }
  // acc[idx[j]] += values[j]; the positions are distinct, so the updates are independent.
  template <class T>
  static void scatter_add(const backend& on, view<const std::uint32_t> idx, view<const T> values, view<T> acc) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), idx.size(),
                       thrust_impl::scatter_add_op<T>{idx.data(), values.data(), acc.data()});
  }
  // x *= c
  template <class T>
  static void scale(const backend& on, T c, view<T> x) {
    thrust::transform(thrust_impl::exec<System>(on.stream), x.data(), x.data() + x.size(), x.data(),
                      thrust_impl::scale_op<T>{c});
  }
  template <class T>
  static void momentum_apply(const backend& on, momentum_kind kind, T m, view<T> u, view<T> a) {
    if (kind == momentum_kind::none) return;
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), a.size(),
                       thrust_impl::momentum_apply_op<T>{kind, m, u.data(), a.data()});
  }
  // The largest magnitude of `values`, NaN where one is not finite. Waits (returns to the host).
  template <class T>
  static double largest_magnitude(const backend& on, view<const T> values) {
    return thrust_impl::value_of_largest_key<T>(
        thrust_impl::largest_key<T, System>(on.stream, values.data(), values.size()));
  }
  // The largest magnitude the add of `values` (at `idx`, or densely where idx is empty) would
  // leave in acc, NaN where a sum would not be finite; writes nothing. Waits.
  template <class T>
  static double largest_magnitude_of_sum(const backend& on, view<const T> acc, view<const std::uint32_t> idx,
                                         view<const T> values) {
    const thrust::counting_iterator<std::size_t> first(0);
    const key_t<T> key = thrust_impl::returned(thrust::transform_reduce(
        thrust_impl::exec<System>(on.stream), first, first + static_cast<std::ptrdiff_t>(values.size()),
        thrust_impl::sum_key_op<T>{acc.data(), idx.empty() ? nullptr : idx.data(), values.data()}, key_t<T>(0),
        thrust_impl::key_max<key_t<T>>{}));
    return thrust_impl::value_of_largest_key<T>(key);
  }
  // What momentum_apply (after scaling by `inv` where `scaled`) would leave; writes nothing.
  // Waits.
  template <class T>
  static state_magnitudes momentum_apply_magnitudes(const backend& on, momentum_kind kind, T m, T inv, bool scaled,
                                                    view<const T> u, view<const T> a) {
    const thrust::counting_iterator<std::size_t> first(0);
    const auto keys = thrust_impl::returned(thrust::transform_reduce(
        thrust_impl::exec<System>(on.stream), first, first + static_cast<std::ptrdiff_t>(a.size()),
        thrust_impl::momentum_apply_keys_op<T>{kind, m, inv, scaled, u.data(), a.data()},
        thrust_impl::key_pair<key_t<T>>{0, 0}, thrust_impl::key_pair_max<key_t<T>>{}));
    return thrust_impl::magnitudes_of<T>(keys);
  }
  // --- The building blocks of the public API (select/threshold.hpp, dgc/momentum.hpp,
  // dgc/residual_accumulator.hpp, dgc/clipping.hpp), bitwise the CPU backend's ------------------
  // cpu::threshold_scan and the CPU backend's verdicts (thrust/threshold.hpp). Waits.
  template <class T>
  static result<std::size_t> threshold_select(const backend& on, view<const T> values, key_t<T> key,
                                              view<std::uint32_t> out, std::size_t* total) {
    return thrust_impl::threshold_select<T, System>(on.stream, values.data(), values.size(), key, out.data(),
                                                    out.size(), total);
  }
  // The L2 norm in the CPU's order (thrust/dgc_kernels.hpp). Waits.
  template <class T>
  static cpu::norm_result l2_norm(const backend& on, view<const T> g) {
    return thrust_impl::l2_norm<T, System>(on.stream, g.data(), g.size());
  }
  // v += momentum-corrected c * g, u updated (u empty for momentum_kind::none).
  template <class T>
  static void momentum_accumulate(const backend& on, momentum_kind kind, T m, T c, view<const T> g, view<T> u,
                                  view<T> v) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), g.size(),
                       thrust_impl::momentum_accumulate_op<T>{kind, m, c, g.data(), u.data(), v.data()});
  }
  // values[j] = v[idx[j]], then v[idx[j]] = 0; the positions are distinct.
  template <class T>
  static void gather_and_zero(const backend& on, view<T> v, view<const std::uint32_t> idx, view<T> values) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), idx.size(),
                       thrust_impl::gather_and_zero_op<T>{v.data(), idx.data(), values.data(), nullptr});
  }
  // u[idx[j]] = 0.
  template <class T>
  static void zero_at(const backend& on, view<T> u, view<const std::uint32_t> idx) {
    thrust::for_each_n(thrust_impl::exec<System>(on.stream), thrust::counting_iterator<std::size_t>(0), idx.size(),
                       thrust_impl::zero_at_op<T>{u.data(), idx.data()});
  }
  // Whether every position is below n. Waits.
  static bool all_below(const backend& on, view<const std::uint32_t> idx, std::size_t n) {
    const thrust::counting_iterator<std::size_t> first(0);
    const auto last = first + static_cast<std::ptrdiff_t>(idx.size());
    return !thrust_impl::returned(thrust::transform_reduce(thrust_impl::exec<System>(on.stream), first, last,
                                                           thrust_impl::at_or_above_op{idx.data(), n}, false,
                                                           thrust_impl::or_op{}));
  }

  // errc::ok when every position is below n and above the one before it; else
  // errc::index_out_of_range (checked first) or errc::indices_not_increasing. Waits.
  static errc check_positions(const backend& on, view<const std::uint32_t> idx, std::size_t n) {
    const std::size_t k = idx.size();
    if (k == 0) return errc::ok;
    const thrust::counting_iterator<std::size_t> first(0);
    if (!all_below(on, idx, n)) return errc::index_out_of_range;
    if (thrust_impl::returned(thrust::transform_reduce(thrust_impl::exec<System>(on.stream), first,
                                                       first + static_cast<std::ptrdiff_t>(k - 1),
                                                       thrust_impl::not_increasing_op{idx.data()}, false,
                                                       thrust_impl::or_op{})))
      return errc::indices_not_increasing;
    return errc::ok;
  }
};

}  // namespace detail
}  // namespace gradcomp
