// detail::ops<cpu_backend>: the CPU implementation of every kernel the public API dispatches to.
// A CUDA backend provides the same static members in its own specialisation.
#pragma once

#include <vector>

#include "../backend.hpp"
#include "dgc_kernels.hpp"
#include "fused_kernels.hpp"
#include "select_kernels.hpp"

namespace gradcomp {
namespace detail {

template <>
struct ops<cpu_backend> {
  // Owning storage in this backend's memory space.
  template <class T>
  using buffer = std::vector<T>;

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
  // momentum_accumulate, sampled_threshold_select on v, then gather_and_zero of the selection
  // (masking u with `masking`): the same result, in one pass; `guide` carries the tensor's
  // thresholds from one step to the next.
  template <class T>
  static std::size_t accumulate_and_select_workspace_bytes(const cpu_backend&,
                                                           const sampled_threshold_config& cfg,
                                                           std::size_t n, std::size_t k) {
    return cpu::accumulate_and_select_workspace_bytes<T>(cfg, n, k);
  }
  template <class T>
  static result<selection_result<T>> accumulate_and_select(
      const cpu_backend&, momentum_kind kind, T m, T c, span<const T> g, span<T> u, span<T> v,
      std::size_t k, const sampled_threshold_config& cfg, std::uint64_t seed,
      span<std::uint32_t> out, span<T> values, bool masking, span<std::byte> workspace,
      step_guide<T>* guide) {
    return cpu::accumulate_and_select<T>(kind, m, c, g, u, v, k, cfg, seed, out, values, masking, workspace,
                                         guide);
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
  static cpu::state_magnitudes accumulated_magnitudes(const cpu_backend&, momentum_kind kind, T m, T c,
                                                      span<const T> g, span<const T> u, span<const T> v) {
    return cpu::accumulated_magnitudes(kind, m, c, g, u, v);
  }
  template <class T>
  static double largest_magnitude_of_sum(const cpu_backend&, span<const T> acc,
                                         span<const std::uint32_t> idx, span<const T> values) {
    return cpu::largest_magnitude_of_sum(acc, idx, values);
  }
  template <class T>
  static cpu::state_magnitudes momentum_apply_magnitudes(const cpu_backend&, momentum_kind kind, T m, T inv,
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
};

}  // namespace detail
}  // namespace gradcomp
