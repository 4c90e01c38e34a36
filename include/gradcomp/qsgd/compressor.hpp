/// @file compressor.hpp
/// @brief QSGD (docs/algorithms.md, "QSGD"): stochastic quantisation to s levels per bucket,
/// `qsgd_compressor`, on the common compressor interface.
///
/// Per tensor and step, the gradient is cut into buckets of B consecutive elements (B = 512 by
/// default); bucket k has the norm `n_k` (its Euclidean norm, or its largest magnitude), rounded
/// up to binary32, and element i of it is sent as `n_k * sign(g_i) * l_i / s` with the integer
/// level `l_i` = floor(r) + 1 with probability r - floor(r), else floor(r), where
/// r = |g_i| / n_k * s. The message is an unbiased estimate of g, with
/// E||Q(g) - g||^2 <= min(B / s^2, sqrt(B) / s) * ||g||^2 for the Euclidean norm. On the wire: the
/// value codings `qsgd` (a fixed-width code per element) or `qsgd_gamma` (Elias-gamma codes of the
/// non-zero levels and their gaps), whichever is smaller, plus a binary32 norm per bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../backend_memory.hpp"
#include "cpu_ops.hpp"
#include "../common/compressor_base.hpp"
#include "../detail/rng.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "step_plan.hpp"

namespace gradcomp {

/// Everything that parameterises QSGD, besides the receiver's momentum and the threads of
/// `quantiser_settings`. Gradients are always checked for NaN and infinity.
struct qsgd_config : quantiser_settings {
  /// Seed of the stochastic decisions; with `rank`, the key of every draw (docs/algorithms.md,
  /// "Reproducible randomness").
  std::uint64_t seed = 0x51d5c0de2f8a6b17ull;
  /// This worker's index among the workers: each worker draws independently of the others.
  std::uint64_t rank = 0;
  /// s: the levels of a bucket's magnitudes (besides 0), in [1, 65535]. 15 takes 5 bits per element
  /// in the fixed-width form (a sign and 4 bits of level), usually fewer in the Elias-gamma form.
  std::uint32_t levels = 15;
  /// B: consecutive elements that share a norm, >= 1 (the paper's 512).
  std::uint32_t bucket = 512;
  /// The norm each bucket is scaled by.
  qsgd_norm norm = qsgd_norm::l2;
  /// Which tensors are quantised; by default every tensor. Send a layer whole (the logits layer,
  /// say) with `tensor_mode::dense` at registration.
  compression_policy policy = compression_policy::every_tensor();
};

/**
 * @brief The sending side of QSGD (Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD:
 * Communication-Efficient SGD via Gradient Quantization and Encoding", NeurIPS 2017) for a whole
 * model, on one worker.
 *
 * Its interface and what a step guarantees are every compressor's (`<gradcomp/compressor.hpp>`);
 * `max_message_bytes` is the fixed-width form's length, an upper bound of the Elias-gamma form's.
 * Tensors the policy leaves out are sent whole. QSGD keeps no error: a step's only state is the
 * step counter, every random decision is a Philox draw keyed by (seed, rank, step, tensor,
 * element), and each bucket's norm is summed in element order. Refused steps: a NaN or an
 * infinity in a gradient (`errc::non_finite_input`), a norm beyond binary32
 * (`errc::state_overflow`).
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class qsgd_compressor : public detail::compressor_base<qsgd_compressor<T, Backend>, qsgd_config, detail::qsgd_record,
                                                      detail::qsgd_step_record, detail::qsgd_ops<Backend>> {
 public:
  /// Checks `cfg` (levels, bucket, norm, the momentum, the threads); throws `gradcomp::error`
  /// (`errc::invalid_argument`) for a value outside its range.
  explicit qsgd_compressor(qsgd_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg), wire::value_coding::qsgd, false) {
    if (cfg_.levels == 0 || cfg_.levels > detail::qsgd_max_levels)
      throw error(errc::invalid_argument, "levels must be in [1, 65535]");
    if (cfg_.bucket == 0) throw error(errc::invalid_argument, "bucket must be >= 1");
    if (cfg_.norm != qsgd_norm::l2 && cfg_.norm != qsgd_norm::maximum)
      throw error(errc::invalid_argument, "norm must be l2 or maximum");
  }

  /**
   * @brief Registers a tensor and allocates its message and norm buffers; returns its id. Throws
   * `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`, `errc::invalid_argument`.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    measured_.reserve(measured_.size() + 1);
    backend_buffer<float, Backend> measured;
    // The norm buffer is allocated once the registration is known to be valid, before it takes
    // effect (strong guarantee).
    const std::size_t id = this->add(
        std::move(name), std::move(shape), mode, cfg_.policy,
        [&](detail::qsgd_record&, const tensor_info& info) {
          measured = base::ops::template allocate<float>(this->backend_, info.compressed ? buckets(info.numel) : 0);
        },
        [&](const tensor_info&) {
          wire::coding_parameters p;
          p.bucket = cfg_.bucket;
          p.levels = cfg_.levels;
          return p;
        });
    measured_.push_back(std::move(measured));
    return id;
  }


  /// The last step's norm of each bucket of tensor `id` (unchecked id), in the backend's memory
  /// (empty for a tensor sent whole).
  backend_span<const float, Backend> norms(std::size_t id) const noexcept {
    return readonly(this->tensors_[id].scales.view());
  }

  /// How `save_snapshot` and `restore_snapshot` reach its state (qsgd/snapshot.hpp).
  using snapshot_trait = detail::residual_snapshot_trait<T, wire::snapshot_selection::qsgd, true>;

 private:
  using base = typename qsgd_compressor::compressor_base;
  using kernels = detail::qsgd_ops<Backend>;

  template <wire::snapshot_selection Method, bool Seeded>
  friend struct detail::residual_snapshot_access;

  std::size_t buckets(std::size_t numel) const noexcept { return (numel + cfg_.bucket - 1) / cfg_.bucket; }

  friend base;
  // The step's passes (common/compressor_base.hpp), on the whole model or tensor t.
  void measure(const Backend& on, const typename base::model_type& model) {
    kernels::measure(on, params(), model, this->records_.view());
  }
  void measure(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    if (this->tensors_[t].info.compressed)
      kernels::measure(on, params(), grads[t], measured_[t].view(), this->records_.view(), t);
  }
  void apply(const Backend& on, const typename base::model_type& model) {
    kernels::apply(on, params(), model, readonly(this->step_record_.view()));
  }
  void apply(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    auto& st = this->tensors_[t];
    kernels::apply(on, params(), grads[t], readonly(measured_[t].view()), st.scales.view(), st.values.view(),
                   readonly(this->records_.view()), t, readonly(this->step_record_.view()));
  }

  // The kernels' work items of a tensor in a whole-model step.
  detail::model_items model_items(std::size_t t, const tensor_info& info) const noexcept {
    if constexpr (base::whole_model) return detail::qsgd_model_items(info.numel, buckets(info.numel), info.compressed);
    else return base::model_items(t, info);
  }
  // Its norms before the verdict, in a whole-model step.
  detail::own_buffers model_buffers(std::size_t t) noexcept {
    detail::own_buffers own;
    own.aux[0] = measured_[t].view().data();
    return own;
  }

  detail::qsgd_step_params params() const noexcept {
    detail::qsgd_step_params p;
    p.key = detail::derive_seed(cfg_.seed, cfg_.rank, 0x71736764ull);
    p.step = this->step_;
    p.bucket = cfg_.bucket;
    p.levels = cfg_.levels;
    p.norm = cfg_.norm;
    return p;
  }

  using base::cfg_;
  std::vector<backend_buffer<float, Backend>> measured_;  // this step's norms, before the verdict
};

}  // namespace gradcomp
