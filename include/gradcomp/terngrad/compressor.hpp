/// @file compressor.hpp
/// @brief TernGrad (docs/algorithms.md, "TernGrad"): stochastic ternary gradients,
/// `terngrad_compressor`, on the common compressor interface.
///
/// Per tensor and step, with `g` the gradient and `s` the tensor's scale: send `s * sign(g_i)`
/// with probability `|g_i| / s`, else 0 (one binary32 scale and two bits per element on the wire:
/// value coding `ternary`). The scale is `max |g|`, or with clipping `min(max |g|, c * sigma)`
/// (sigma the standard deviation of the tensor's elements, c = 2.5 by default), rounded up to
/// binary32; workers may agree on the largest of their scales first (`local_scales`, then
/// `compress` with the shared ones). Without clipping the message is an unbiased estimate of g.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "cpu_ops.hpp"
#include "../common/compressor_base.hpp"
#include "../detail/rng.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "step_plan.hpp"

namespace gradcomp {

/// Everything that parameterises TernGrad, besides the receiver's momentum and the threads of
/// `quantiser_settings`. Gradients are always checked for NaN and infinity.
struct terngrad_config : quantiser_settings {
  /// Seed of the stochastic decisions; with `rank`, the key of every draw (docs/algorithms.md,
  /// "Reproducible randomness").
  std::uint64_t seed = 0x7e2a9d3c5b1f4e60ull;
  /// This worker's index among the workers: each worker draws independently of the others.
  std::uint64_t rank = 0;
  /// c of the c * sigma clipping (the paper's 2.5); 0 turns clipping off, and the message is then
  /// an unbiased estimate of the gradient. Must be finite and >= 0.
  double clip_sigmas = 2.5;
  /// Which tensors are sent as ternary values; by default every tensor. Send a layer whole (the
  /// logits layer, say) with `tensor_mode::dense` at registration.
  compression_policy policy = compression_policy::every_tensor();
};

/**
 * @brief The sending side of TernGrad (Wen et al., "TernGrad: Ternary Gradients to Reduce
 * Communication in Distributed Deep Learning", NeurIPS 2017) for a whole model, on one worker.
 *
 * Its interface and what a step guarantees are every compressor's (`<gradcomp/compressor.hpp>`).
 * Every compressed tensor is sent dense as `ternary` values: 2 bits per element plus 4 bytes,
 * about 16x smaller than fp32; tensors the policy leaves out are sent whole. TernGrad keeps no
 * error: a step's only state is the step counter, and every random decision is a Philox draw keyed
 * by (seed, rank, step, tensor, element). A NaN or an infinity in a gradient refuses a step
 * (`errc::non_finite_input`).
 *
 * Scale sharing (the paper's "scaler sharing"): `local_scales(grads)` returns this worker's scale
 * of every tensor; the workers take the largest of each (an allreduce with max, one float per
 * tensor) and each calls `compress(grads, shared)`. A shared scale below the worker's own refuses
 * the step with `errc::invalid_argument`.
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class terngrad_compressor : public detail::compressor_base<terngrad_compressor<T, Backend>, terngrad_config, detail::terngrad_record,
                                                           detail::terngrad_step_record, detail::terngrad_ops<Backend>> {
  using base = typename terngrad_compressor::compressor_base;
  using kernels = detail::terngrad_ops<Backend>;
  using record = detail::terngrad_record;

 public:
  /// A gradient in the backend's memory.
  using tensor_view = typename base::tensor_view;

  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`).
  explicit terngrad_compressor(terngrad_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg), wire::value_coding::ternary, false) {
    if (!(cfg_.clip_sigmas >= 0.0 && std::isfinite(cfg_.clip_sigmas)))
      throw error(errc::invalid_argument, "clip_sigmas must be finite and >= 0");
  }

  /**
   * @brief Registers a tensor and allocates its message buffer; returns its id. Throws
   * `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`, `errc::invalid_argument`.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    return this->add(std::move(name), std::move(shape), mode, cfg_.policy);
  }


  using base::compress;  // compress(grads): the same on the compressor's own backend value
  /// On the execution context `on`: issues one step over all tensors with this worker's own scales;
  /// its outcome comes from `stats()` (`errc::non_finite_input`, `errc::state_overflow` for a scale
  /// beyond binary32: nothing modified). @return `errc::wrong_tensor_count`, `errc::size_mismatch`,
  /// `errc::resource_unavailable` (a worker thread refused; nothing issued).
  [[nodiscard]] result<void> compress(const Backend& on, span<const tensor_view> grads) {
    return issue(on, grads, nullptr);
  }

  /**
   * @brief Issues one step that sends tensor t with scale `shared[t]` (one per tensor, in
   * registration order; the entries of tensors sent whole are ignored): the largest of the
   * workers' `local_scales`. `stats()` refuses the step with `errc::invalid_argument` if a shared
   * scale is below this worker's own for the same gradients, or not finite.
   * @return `errc::wrong_tensor_count`, `errc::size_mismatch`,
   *         `errc::resource_unavailable` (a worker thread refused; nothing issued).
   */
  [[nodiscard]] result<void> compress(span<const tensor_view> grads, span<const float> shared) {
    return compress(this->backend_, grads, shared);
  }
  /// `compress` with shared scales on the execution context `on`.
  [[nodiscard]] result<void> compress(const Backend& on, span<const tensor_view> grads, span<const float> shared) {
    if (shared.size() != this->tensors_.size()) return fail(errc::wrong_tensor_count);
    return issue(on, grads, &shared);
  }

  /**
   * @brief This worker's scale of every tensor for `grads` (0 for tensors sent whole), to be
   * shared with the other workers before `compress(grads, shared)`. Reads the gradients and waits
   * for the result; changes nothing.
   * @return the scales, or `errc::wrong_tensor_count`, `errc::size_mismatch`,
   *         `errc::non_finite_input`, `errc::state_overflow`.
   */
  [[nodiscard]] result<std::vector<float>> local_scales(span<const tensor_view> grads) {
    if (auto started = this->begin_step(this->backend_, grads); !started) return fail(started.error());
    const auto records = this->records_.view();
    measure_all(this->backend_, grads);
    detail::terngrad_step_params p = params(false);
    auto verdict = base::ops::template allocate<detail::terngrad_step_record>(this->backend_, 1);
    kernels::plan(this->backend_, records, p, verdict.view());
    std::vector<record> host(this->tensors_.size());
    detail::terngrad_step_record status;
    base::ops::copy_to_host(this->backend_, readonly(records), span<record>(host.data(), host.size()));
    base::ops::copy_to_host(this->backend_, readonly(verdict.view()), span<detail::terngrad_step_record>(&status, 1));
    base::ops::synchronize(this->backend_);
    if (status.status != static_cast<std::int32_t>(errc::ok)) return fail(static_cast<errc>(status.status));
    std::vector<float> out(host.size());
    for (std::size_t t = 0; t < host.size(); ++t) out[t] = host[t].compressed != 0 ? host[t].local : 0.0f;
    return out;
  }

  /// How `save_snapshot` and `restore_snapshot` reach its state (terngrad/snapshot.hpp).
  using snapshot_trait = detail::residual_snapshot_trait<T, wire::snapshot_selection::ternary, true>;

 private:
  template <wire::snapshot_selection Method, bool Seeded>
  friend struct detail::residual_snapshot_access;

  detail::terngrad_step_params params(bool shared) const noexcept {
    detail::terngrad_step_params p;
    p.key = detail::derive_seed(cfg_.seed, cfg_.rank, 0x7465726eull);
    p.step = this->step_;
    p.clip_sigmas = cfg_.clip_sigmas;
    p.shared = shared ? 1 : 0;
    return p;
  }

  void measure_all(const Backend& on, span<const tensor_view> grads) {
    const auto records = this->records_.view();
    if constexpr (base::whole_model) {
      kernels::measure(on, this->bind_model(on, grads), records);
    } else {
      auto measure = [&](std::size_t t, std::size_t) { kernels::measure(on, grads[t], records, t); };
      base::ops::for_each(on, this->exec_, this->largest_first(), measure);
    }
  }

  friend base;
  // The kernels' work items of a tensor in a whole-model step.
  detail::model_items model_items(std::size_t t, const tensor_info& info) const noexcept {
    if constexpr (base::whole_model) return detail::terngrad_model_items(info.numel);
    else return base::model_items(t, info);
  }

  // A step with this worker's scales (shared null) or the shared ones.
  result<void> issue(const Backend& on, span<const tensor_view> grads, const span<const float>* shared) {
    if (auto started = this->begin_step(on, grads); !started) return started;
    const auto records = this->records_.view();
    const auto step = this->step_record_.view();
    if (shared != nullptr) write_shared(on, *shared);
    measure_all(on, grads);
    const detail::terngrad_step_params p = params(shared != nullptr);
    kernels::plan(on, records, p, step);
    if constexpr (base::whole_model) {
      kernels::apply(on, p, this->model_, readonly(records), readonly(step));  // bound by measure_all
    } else {
      auto apply = [&](std::size_t t, std::size_t) {
        kernels::apply(on, p, grads[t], this->tensors_[t].values.view(), readonly(records), t, readonly(step));
      };
      base::ops::for_each(on, this->exec_, this->largest_first(), apply);
    }
    this->issued(on);
    return {};
  }

  // The shared scales into the records: the records are read back, changed and written again
  // (the host holds the only other copy of what registration wrote).
  void write_shared(const Backend& on, span<const float> shared) {
    std::vector<record> host(this->tensors_.size());
    base::ops::copy_to_host(on, readonly(this->records_.view()), span<record>(host.data(), host.size()));
    base::ops::synchronize(on);
    for (std::size_t t = 0; t < host.size(); ++t) host[t].shared = shared[t];
    base::ops::copy_to_backend(on, span<const record>(host.data(), host.size()), this->records_.view());
    base::ops::synchronize(on);
  }

  using base::cfg_;
};

}  // namespace gradcomp
