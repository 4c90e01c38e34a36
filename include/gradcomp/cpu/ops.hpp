// detail::ops<cpu_backend>: the CPU implementation of every operation the public API, the
// aggregator and the compressors' common code dispatch to (docs/backends.md is the contract);
// each method's own kernels are in its folder (<method>/cpu_ops.hpp). Another backend provides the
// same members in its own specialisation.
#pragma once

#include <cstring>
#include <system_error>
#include <type_traits>

#include "../backend.hpp"
#include "buffer.hpp"
#include "dgc_kernels.hpp"
#include "fused_kernels.hpp"
#include "select_kernels.hpp"
#include "task_pool.hpp"

namespace gradcomp {
namespace detail {

template <>
struct ops<cpu_backend> {
  // --- Memory -----------------------------------------------------------------------------
  // Owning storage in this backend's memory space.
  template <class T>
  using buffer = cpu::host_buffer<T>;

  // n elements, every byte zero (T is trivially copyable).
  template <class T>
  static buffer<T> allocate(const cpu_backend&, std::size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "backend buffers hold trivially copyable types");
    buffer<T> b(n);
    if (n != 0) std::memset(static_cast<void*>(b.data()), 0, n * sizeof(T));
    return b;
  }
  // Copies between host memory and this backend's memory; the CPU's are plain copies, finished
  // when they return.
  template <class T>
  static void copy_to_host(const cpu_backend&, span<const T> from, span<T> to) {
    if (!from.empty()) std::memcpy(static_cast<void*>(to.data()), from.data(), from.size_bytes());
  }
  template <class T>
  static void copy_to_backend(const cpu_backend&, span<const T> from, span<T> to) {
    if (!from.empty()) std::memcpy(static_cast<void*>(to.data()), from.data(), from.size_bytes());
  }
  // The host waits for every operation issued on the backend value: nothing to wait for here.
  static void synchronize(const cpu_backend&) noexcept {}

  // --- Work over tensors --------------------------------------------------------------------
  // Runs independent per-tensor work: on `threads` host threads (the calling one included),
  // created on first use and kept; a copy creates its own.
  struct executor {
    std::size_t threads = 1;
    cpu::lazy_task_pool pool;
  };
  static executor make_executor(std::size_t threads) { return executor{threads, {}}; }
  // Starts the executor's threads for `items` tensors, before a step modifies anything:
  // errc::resource_unavailable when the system refuses a thread (no thread is left running).
  static result<void> start_executor(const cpu_backend&, executor& e, std::size_t items) {
    if (e.threads <= 1 || items <= 1) return {};
    try {
      (void)e.pool.get(e.threads);
    } catch (const std::system_error&) {
      return fail(errc::resource_unavailable);
    }
    return {};
  }
  // Workspace slots the executor uses at once (the `slot` argument of for_each's calls).
  static std::size_t executor_slots(const executor& e) noexcept { return e.threads; }
  // Calls f(t, slot) for every t in `order` (any order, any thread; `order` lists the largest
  // tensors first, so that a parallel run balances).
  template <class F>
  static void for_each(const cpu_backend&, executor& e, span<const std::size_t> order, F& f) {
    if (e.threads <= 1 || order.size() <= 1) {
      for (std::size_t t : order) f(t, std::size_t(0));
      return;
    }
    auto item = [&](std::size_t i, std::size_t thread) { f(order[i], thread); };
    e.pool.get(e.threads).run(order.size(), item);
  }

  // --- Kernels ------------------------------------------------------------------------------

  template <class T>
  static void fill_zero(const cpu_backend&, span<T> x) {
    cpu::fill_zero(x);
  }
  template <class T>
  static std::size_t exact_topk_workspace_bytes(const cpu_backend&, std::size_t n, std::size_t k) {
    return cpu::exact_topk_workspace_bytes<T>(n, k);
  }
  template <class T>
  static result<std::size_t> exact_topk(const cpu_backend&, span<const T> values, std::size_t k,
                                        span<std::uint32_t> out, span<std::byte> workspace,
                                        T* threshold) {
    return cpu::exact_topk<T>(values, k, out, workspace, threshold);
  }
  template <class T>
  static result<std::size_t> threshold_select(const cpu_backend&, span<const T> values,
                                              key_t<T> threshold_key, span<std::uint32_t> out,
                                              std::size_t* total) {
    bool nan = false;
    *total = cpu::threshold_scan(values, threshold_key, out.data(), out.size(), &nan);
    if (nan) return fail(errc::nan_input);
    if (*total > out.size()) return fail(errc::output_too_small);
    return *total;
  }
  template <class T>
  static std::size_t sampled_threshold_workspace_bytes(const cpu_backend&,
                                                       const sampled_threshold_config& cfg,
                                                       std::size_t n, std::size_t k) {
    return cpu::sampled_threshold_workspace_bytes<T>(cfg, n, k);
  }
  template <class T>
  static result<selection_result<T>> sampled_threshold_select(
      const cpu_backend&, span<const T> values, std::size_t k, const sampled_threshold_config& cfg,
      std::uint64_t seed, span<std::uint32_t> out, span<std::byte> workspace) {
    return cpu::sampled_threshold_select<T>(values, k, cfg, seed, out, workspace);
  }
  template <class T>
  static cpu::norm_result l2_norm(const cpu_backend&, span<const T> g) {
    return cpu::l2_norm(g);
  }
  template <class T>
  static bool all_finite(const cpu_backend&, span<const T> g) {
    return cpu::all_finite(g);
  }
  template <class T>
  static double largest_magnitude(const cpu_backend&, span<const T> g) {
    return cpu::largest_magnitude(g);
  }
  template <class T>
  static state_magnitudes accumulated_magnitudes(const cpu_backend&, momentum_kind kind, T m, T c,
                                                      span<const T> g, span<const T> u, span<const T> v) {
    return cpu::accumulated_magnitudes(kind, m, c, g, u, v);
  }
  template <class T>
  static double largest_magnitude_of_sum(const cpu_backend&, span<const T> acc,
                                         span<const std::uint32_t> idx, span<const T> values) {
    return cpu::largest_magnitude_of_sum(acc, idx, values);
  }
  template <class T>
  static state_magnitudes momentum_apply_magnitudes(const cpu_backend&, momentum_kind kind, T m, T inv,
                                                         bool scaled, span<const T> u, span<const T> a) {
    return cpu::momentum_apply_magnitudes(kind, m, inv, scaled, u, a);
  }
  template <class T>
  static void momentum_accumulate(const cpu_backend&, momentum_kind kind, T m, T c,
                                  span<const T> g, span<T> u, span<T> v) {
    cpu::momentum_accumulate(kind, m, c, g, u, v);
  }
  template <class T>
  static void momentum_apply(const cpu_backend&, momentum_kind kind, T m, span<T> u, span<T> a) {
    cpu::momentum_apply(kind, m, u, a);
  }
  template <class T>
  static void gather_and_zero(const cpu_backend&, span<T> v, span<const std::uint32_t> idx,
                              span<T> values, span<T> also_zero = {}) {
    cpu::gather_and_zero(v, idx, values, also_zero);
  }
  template <class T>
  static void zero_at(const cpu_backend&, span<T> u, span<const std::uint32_t> idx) {
    cpu::zero_at(u, idx);
  }
  template <class T>
  static void scale_copy(const cpu_backend&, T c, span<const T> g, span<T> out) {
    cpu::scale_copy(c, g, out);
  }
  template <class T>
  static void scatter_add(const cpu_backend&, span<const std::uint32_t> idx, span<const T> values,
                          span<T> acc) {
    cpu::scatter_add(idx, values, acc);
  }
  template <class T>
  static void add(const cpu_backend&, span<const T> values, span<T> acc) {
    cpu::add(values, acc);
  }
  template <class T>
  static void scale(const cpu_backend&, T c, span<T> x) {
    cpu::scale(c, x);
  }
  static bool all_below(const cpu_backend&, span<const std::uint32_t> idx, std::size_t n) {
    return cpu::all_below(idx, n);
  }
  static errc check_positions(const cpu_backend&, span<const std::uint32_t> idx, std::size_t n) {
    return cpu::check_positions(idx, n);
  }
};

}  // namespace detail
}  // namespace gradcomp
