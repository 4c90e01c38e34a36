/// @file compressor.hpp
/// @brief 1-bit SGD with error feedback (docs/algorithms.md, "1-bit SGD"),
/// `onebit_sgd_compressor`, on the common compressor interface.
///
/// Per tensor and step, with `g` the gradient and `r` the residual kept from the last step:
/// `v = g + r`; the tensor is a row-major matrix (its first dimension the rows, the product of the
/// others the columns; a vector is one column), and each column sends one bit per element (v < 0
/// or not) and two values, the means of its negative and of its non-negative elements rounded to
/// binary32 (value coding `one_bit`); `r = v - sent`. The two means keep each column's sum of v.
#pragma once

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
#include "step_plan.hpp"

namespace gradcomp {

/// Everything that parameterises 1-bit SGD, besides the receiver's momentum and the threads of
/// `quantiser_settings`. Gradients are always checked for NaN and infinity.
struct onebit_sgd_config : quantiser_settings {
  /// Which tensors are quantised; by default every tensor (a bias is one column). Send a layer
  /// whole with `tensor_mode::dense` at registration.
  compression_policy policy = compression_policy::every_tensor();
};

/**
 * @brief The sending side of 1-bit SGD with error feedback (Seide et al., "1-Bit Stochastic
 * Gradient Descent and its Application to Data-Parallel Distributed Training of Speech DNNs",
 * Interspeech 2014) for a whole model, on one worker.
 *
 * Its interface and what a step guarantees are every compressor's (`<gradcomp/compressor.hpp>`). A
 * quantised tensor of `rows x columns` elements is sent as `one_bit` values: one bit per element
 * plus 8 bytes per column and 4 bytes, about 32x smaller than fp32 when the columns hold many
 * rows. The shape given to `add_tensor` decides the columns: `{rows, columns}`, or for more
 * dimensions `{d0, d1, ...}` with `d1 * d2 * ...` columns of `d0` elements (a convolution
 * kernel `{out, in, kh, kw}` has a column per input position); register another shape of the
 * same element count to quantise otherwise (`{numel}`: one column for the whole tensor). Tensors
 * the policy leaves out are sent whole.
 *
 * What stays behind, `r = v - sent`, goes into the next step: nothing is lost, only delayed
 * (the residual is `error_feedback(t)`); the column sums are in double. Refused steps: a NaN or an
 * infinity in a gradient (`errc::non_finite_input`), a `v` or a column value beyond the range of
 * `T` or binary32 (`errc::state_overflow`).
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class onebit_sgd_compressor : public detail::compressor_base<onebit_sgd_compressor<T, Backend>, onebit_sgd_config, detail::onebit_record,
                                                             detail::onebit_step_record, detail::onebit_ops<Backend>> {
 public:
  /// Checks the momentum and the threads of `cfg`; throws `gradcomp::error` (`errc::invalid_argument`).
  explicit onebit_sgd_compressor(onebit_sgd_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg), wire::value_coding::one_bit, true) {}

  /**
   * @brief Registers a tensor of shape `shape` (which decides its columns, see the class) and
   * allocates its residual and column buffers; returns its id. Throws `gradcomp::error`:
   * `errc::duplicate_tensor`, `errc::size_overflow`, `errc::invalid_argument`.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    const std::size_t columns = columns_of(shape);
    columns_state st;
    columns_.reserve(columns_.size() + 1);
    // The column buffers are allocated once the registration is known to be valid, before it
    // takes effect (strong guarantee).
    const std::size_t id = this->add(
        std::move(name), std::move(shape), mode, cfg_.policy,
        [&](detail::onebit_record& r, const tensor_info& info) {
          const std::size_t kept = info.compressed ? columns : 1;
          r.columns = kept;
          st.cols = base::ops::template allocate<detail::onebit_column>(this->backend_, kept);
          st.partials = base::ops::template allocate<detail::onebit_partial<T>>(
              this->backend_, detail::onebit_blocks(info.numel, kept) * kept);
        },
        [&](const tensor_info&) {
          wire::coding_parameters p;
          p.columns = static_cast<std::uint32_t>(columns);
          return p;
        });
    columns_.push_back(std::move(st));
    return id;
  }


  /// The columns tensor `id` (unchecked) is quantised in (1 for a tensor sent whole).
  std::size_t columns(std::size_t id) const noexcept { return columns_[id].cols.view().size(); }

  /// How `save_snapshot` and `restore_snapshot` reach its state (onebit/snapshot.hpp).
  using snapshot_trait = detail::residual_snapshot_trait<T, wire::snapshot_selection::one_bit, false>;

 private:
  using base = typename onebit_sgd_compressor::compressor_base;
  using kernels = detail::onebit_ops<Backend>;

  // The columns of a tensor of shape `shape` when compressed. A tensor without elements has one
  // column; beyond 2^32 - 1 columns registration refuses the tensor anyway (size_overflow), unless
  // its first dimension is 0.
  static std::size_t columns_of(const std::vector<std::size_t>& shape) noexcept {
    std::size_t columns = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) columns = shape[d] == 0 ? 0 : columns * shape[d];
    return columns == 0 || columns > std::numeric_limits<std::uint32_t>::max() ? 1 : columns;
  }

  friend base;
  // The step's passes (common/compressor_base.hpp), on the whole model or tensor t.
  void measure(const Backend& on, const typename base::model_type& model) {
    kernels::measure(on, model, this->records_.view());
  }
  void measure(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    kernels::measure(on, grads[t], readonly(this->tensors_[t].e.view()), columns_[t].partials.view(),
                     columns_[t].cols.view(), this->records_.view(), t);
  }
  void apply(const Backend& on, const typename base::model_type& model) {
    kernels::apply(on, model, readonly(this->records_.view()), readonly(this->step_record_.view()));
  }
  void apply(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    auto& st = this->tensors_[t];
    kernels::apply(on, grads[t], st.e.view(), st.values.view(), readonly(columns_[t].cols.view()),
                   readonly(this->records_.view()), t, readonly(this->step_record_.view()));
  }

  // The kernels' work items of a tensor in a whole-model step.
  detail::model_items model_items(std::size_t t, const tensor_info& info) const noexcept {
    if constexpr (base::whole_model)
      return detail::onebit_model_items(info.numel, info.compressed ? columns_of(info.shape) : 1);
    else return base::model_items(t, info);
  }
  // Its block sums and column values, in a whole-model step.
  detail::own_buffers model_buffers(std::size_t t) noexcept {
    detail::own_buffers own;
    own.aux[0] = columns_[t].partials.view().data();
    own.aux[1] = columns_[t].cols.view().data();
    return own;
  }

  struct columns_state {
    backend_buffer<detail::onebit_column, Backend> cols;             // each column's two values
    backend_buffer<detail::onebit_partial<T>, Backend> partials;     // the column sums of each block of rows
  };

  using base::cfg_;
  std::vector<columns_state> columns_;
};

}  // namespace gradcomp
