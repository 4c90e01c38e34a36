/// @file compressor.hpp
/// @brief EF-SignSGD (docs/algorithms.md, "EF-SignSGD"): scaled signs with error feedback,
/// `ef_signsgd_compressor`, on the common compressor interface.
///
/// Per tensor and step, with `lr` the learning rate, `g` the gradient and `e` the error kept
/// from the last step: `p = e + lr * g`, send `(||p||_1 / n) * sign(p)` (one binary32 scale and one
/// sign bit per element on the wire: value coding `scaled_sign`), keep `e = p - sent`. The
/// messages carry the learning rate: the receiver applies `w -= update(t)`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../backend_memory.hpp"
#include "cpu_ops.hpp"
#include "../common/compressor_base.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "../wire/tensor_message.hpp"
#include "../wire/device_section.hpp"
#include "../wire/encode.hpp"
#include "step_plan.hpp"

namespace gradcomp {

/// Everything that parameterises EF-SignSGD. Gradients are always checked for NaN and infinity:
/// the check shares the step's first read, so it costs nothing measurable.
struct ef_signsgd_config {
  /// The learning rate folded into every message (`p = e + lr * g`); change it per step with
  /// `set_learning_rate`. Must be finite and positive.
  double learning_rate = 0.1;
  /// Threads the CPU backend spreads the tensors over (1: the calling thread only).
  std::size_t threads = 1;
  /// Which tensors are sent as signs; by default every tensor (biases included: one scale each).
  compression_policy policy = compression_policy::every_tensor();
};

/**
 * @brief The sending side of EF-SignSGD (Karimireddy et al., "Error Feedback Fixes SignSGD and
 * other Gradient Compression Schemes", ICML 2019) for a whole model, on one worker.
 *
 * Its interface and what a step guarantees are every compressor's (`<gradcomp/compressor.hpp>`).
 * Every compressed tensor is sent dense as `scaled_sign` values: 1 bit per element plus 4 bytes,
 * about 32x smaller than fp32. Tensors the policy leaves out are sent whole (`lr * g`): unlike
 * the quantisers', its messages are scaled by the learning rate, and its receiver applies no
 * momentum. Refused steps: a NaN or an infinity in a gradient (`errc::non_finite_input`), a `p`
 * or a scale that overflows (`errc::state_overflow`).
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class ef_signsgd_compressor : public detail::compressor_base<ef_signsgd_compressor<T, Backend>, ef_signsgd_config, detail::ef_sign_record,
                                                             detail::ef_sign_step_record, detail::ef_sign_ops<Backend>> {
 public:
  /// Checks the learning rate and the threads of `cfg`; throws `gradcomp::error`
  /// (`errc::invalid_argument`).
  explicit ef_signsgd_compressor(ef_signsgd_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg), wire::value_coding::scaled_sign, true) {
    set_learning_rate(cfg_.learning_rate);
  }

  /**
   * @brief Registers a tensor and allocates its error buffer; returns its id. Throws
   * `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`, `errc::invalid_argument`.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    return this->add(std::move(name), std::move(shape), mode, cfg_.policy);
  }

  /// Sets the learning rate of the next steps (and `config().learning_rate`); throws
  /// `gradcomp::error` unless finite and > 0.
  void set_learning_rate(double lr) {
    if (!(lr > 0.0 && std::isfinite(lr) && std::isfinite(static_cast<T>(lr)) && static_cast<T>(lr) > T(0)))
      throw error(errc::invalid_argument, "learning_rate must be finite and > 0");
    cfg_.learning_rate = lr;
  }

  /// How `save_snapshot` and `restore_snapshot` reach its state (ef_signsgd/snapshot.hpp).
  using snapshot_trait = detail::residual_snapshot_trait<T, wire::snapshot_selection::scaled_sign, false>;

 private:
  using base = typename ef_signsgd_compressor::compressor_base;
  using kernels = detail::ef_sign_ops<Backend>;

  friend base;
  // The step's passes (common/compressor_base.hpp), on the whole model or tensor t.
  void measure(const Backend& on, const typename base::model_type& model) {
    kernels::measure(on, lr(), model, this->records_.view());
  }
  void measure(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    kernels::measure(on, lr(), grads[t], readonly(this->tensors_[t].e.view()), this->records_.view(), t);
  }
  void apply(const Backend& on, const typename base::model_type& model) {
    kernels::apply(on, lr(), model, readonly(this->records_.view()), readonly(this->step_record_.view()));
  }
  void apply(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    auto& st = this->tensors_[t];
    kernels::apply(on, lr(), grads[t], st.e.view(), st.values.view(), readonly(this->records_.view()), t,
                   readonly(this->step_record_.view()));
  }
  T lr() const noexcept { return static_cast<T>(cfg_.learning_rate); }

  using base::cfg_;
};

}  // namespace gradcomp
