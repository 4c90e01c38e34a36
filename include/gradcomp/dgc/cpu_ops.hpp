// detail::dgc_ops<cpu_backend>: the CPU kernels of the DGC step (dgc/step_plan.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "../backend.hpp"
#include "../cpu/dgc_kernels.hpp"
#include "../cpu/fused_kernels.hpp"
#include "../cpu/select_kernels.hpp"
#include "../cpu/step_guide.hpp"
#include "../momentum_kind.hpp"
#include "../selection_types.hpp"
#include "../span.hpp"
#include "step_plan.hpp"

namespace gradcomp {
namespace detail {

template <>
struct dgc_ops<cpu_backend> {
  // Per-tensor state a backend keeps for the sampled selection: the CPU's guide of the fused pass.
  template <class T>
  using selection_state = cpu::step_guide<T>;

  // The workspace of one compressed tensor's step with the sampled threshold (the fused pass).
  template <class T>
  static std::size_t workspace_bytes(const cpu_backend&, const sampled_threshold_config& cfg, std::size_t n,
                                     std::size_t k) {
    return cpu::accumulate_and_select_workspace_bytes<T>(cfg, n, k);
  }

  // Reads gradient t before the step: its norm (with its largest magnitude, or a bound of it)
  // or its largest magnitude into record t.
  template <class T>
  static void read_gradient(const cpu_backend&, gradient_read read, span<const T> g, span<dgc_tensor_record<T>> records,
                            std::size_t t) {
    dgc_tensor_record<T>& r = records[t];
    if (read == gradient_read::norm) {
      const auto n = cpu::l2_norm(g);
      r.norm_scale = n.finite ? n.scale : 1.0;
      r.norm_root = n.finite ? n.root : std::numeric_limits<double>::quiet_NaN();
      // The norm bounds the largest magnitude; a scaled norm's scale is the largest magnitude.
      r.largest = n.scale == 1.0 ? r.norm_root : n.scale;
    } else if (read == gradient_read::largest) {
      r.largest = cpu::largest_magnitude(g);
    }
  }
  template <class T>
  static void plan(const cpu_backend&, span<dgc_tensor_record<T>> records, const dgc_step_plan& plan,
                   span<dgc_step_record> step) {
    plan_dgc_step(records.data(), records.size(), plan, step.data());
  }
  // The overflow guard's exact pass for tensor t, where plan_dgc_step marked it: the step's
  // exact magnitudes, computed with its own arithmetic and nothing written but the record.
  template <class T>
  static void exact_bounds(const cpu_backend&, momentum_kind kind, T m, span<const T> g, span<const T> u,
                           span<const T> v, span<dgc_tensor_record<T>> records, std::size_t t) {
    dgc_tensor_record<T>& r = records[t];
    if (r.status != static_cast<std::int32_t>(errc::state_overflow)) return;
    const auto e = cpu::accumulated_magnitudes(kind, m, static_cast<T>(r.coef), g, u, v);
    settle_exact_bounds(r, e.u, e.v, e.finite);
  }
  template <class T>
  static void settle_guard(const cpu_backend&, span<const dgc_tensor_record<T>> records, span<dgc_step_record> step) {
    settle_dgc_guard(records.data(), records.size(), step.data());
  }
  // A dense tensor's step: the clipped gradient, whole.
  template <class T>
  static void dense_step(const cpu_backend&, span<const T> g, span<T> values, span<dgc_tensor_record<T>> records,
                         std::size_t t, span<const dgc_step_record> step) {
    if (!step_may_run(step[0])) return;
    cpu::scale_copy(static_cast<T>(records[t].coef), g, values);
    records[t].kept = g.size();
  }
  // A compressed tensor's step: momentum correction into the residual accumulator, selection,
  // the selected entries moved out (exact conservation) and momentum factor masking; the
  // sampled threshold does all four in one fused pass.
  template <class T>
  static void compressed_step(const cpu_backend&, const dgc_tensor_plan<T>& p, const sampled_threshold_config& cfg,
                              span<const T> g, span<T> u, span<T> v, span<std::uint32_t> idx, span<T> values,
                              span<std::byte> workspace, selection_state<T>& guide, span<dgc_tensor_record<T>> records,
                              std::size_t t, span<const dgc_step_record> step) {
    if (!step_may_run(step[0])) return;
    dgc_tensor_record<T>& r = records[t];
    const T c = static_cast<T>(r.coef);
    const span<std::uint32_t> out(idx.data(), p.k);
    const span<T> out_values(values.data(), p.k);
    if (!p.exact) {
      const auto s = cpu::accumulate_and_select<T>(p.kind, p.momentum, c, g, u, v, p.k, cfg, p.seed, out, out_values,
                                                   p.masking, workspace, &guide);
      if (!s) {
        r.status = static_cast<std::int32_t>(s.error());
        return;
      }
      r.selection = *s;
      r.kept = s->count;
      return;
    }
    cpu::momentum_accumulate(p.kind, p.momentum, c, g, u, v);
    selection_result<T> sel;
    const auto s = cpu::exact_topk<T>(span<const T>(v), p.k, out, workspace, &sel.threshold);
    if (!s) {
      r.status = static_cast<std::int32_t>(s.error());
      return;
    }
    sel.count = *s;
    sel.target = p.k;
    sel.exact = true;
    r.selection = sel;
    r.kept = sel.count;
    cpu::gather_and_zero(v, span<const std::uint32_t>(idx.data(), sel.count), span<T>(values.data(), sel.count),
                         p.masking ? u : span<T>());
  }
  template <class T>
  static void commit(const cpu_backend&, span<dgc_tensor_record<T>> records, span<dgc_step_record> step) {
    commit_dgc_step(records.data(), records.size(), step.data());
  }
};

}  // namespace detail
}  // namespace gradcomp
