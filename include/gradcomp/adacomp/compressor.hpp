/// @file compressor.hpp
/// @brief AdaComp, adaptive residual gradient compression (docs/algorithms.md, "AdaComp"),
/// `adacomp_compressor`, on the common compressor interface.
///
/// Per tensor and step, with `g` the gradient and `r` the residual kept from the last step:
/// `G = r + g`, `H = G + g`; the tensor is cut into bins of `L` consecutive elements, and element
/// `i` is sent iff `G_i != 0` and `|H_i| >= max |G|` over its bin, as `sign(G_i) * scale`, with one
/// scale per tensor, the mean of the bins' maxima of `|G|`; `r = G - sent`. The message is sparse:
/// the sent positions and their values (value coding `scaled_sign`: one scale, a sign bit each).
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

/// Everything that parameterises AdaComp, besides the receiver's momentum and the threads of
/// `quantiser_settings`. Gradients are always checked for NaN and infinity.
struct adacomp_config : quantiser_settings {
  /// Bin size `L` of convolution kernels (tensors of rank 3 or more), the paper's 50.
  std::size_t conv_bin = 50;
  /// Bin size `L` of the other compressed tensors (fully connected and recurrent weights), the
  /// paper's 500.
  std::size_t fc_bin = 500;
  /// Which tensors are compressed; by default every tensor of rank 2 or more (biases and
  /// normalisation parameters go whole).
  compression_policy policy{};
};

/**
 * @brief The sending side of AdaComp (Chen et al., "AdaComp: Adaptive Residual Gradient
 * Compression for Data-Parallel Distributed Training", AAAI 2018) for a whole model, on one
 * worker.
 *
 * Its interface and what a step guarantees are every compressor's (`<gradcomp/compressor.hpp>`).
 * There is no target density: each bin sends the elements whose residual
 * plus twice the new gradient reach the bin's largest residual plus gradient, so a bin where the
 * gradient keeps its direction sends more, a quiet one nothing; `stats().kept_elements` tells how
 * many were sent. A sent element costs its position and one sign bit on the wire (the scale is
 * one binary32 per tensor). The bin size is the one hyperparameter: `adacomp_config::conv_bin`
 * for tensors of rank 3 or more, `fc_bin` for the others, or per tensor at registration.
 *
 * What is not sent stays in the residual: `r + sent == G` element by element (for an element that
 * was sent, up to the one rounding of `G - sent` to `T`; exactly for the others); the scale's sum
 * is in double. Refused steps: a NaN or an infinity in a gradient (`errc::non_finite_input`), a
 * `G` or a scale beyond the range of `T` or binary32 (`errc::state_overflow`).
 *
 * @tparam T       float or double.
 * @tparam Backend where state lives and work runs (docs/backends.md).
 */
template <class T, class Backend = cpu_backend>
class adacomp_compressor : public detail::compressor_base<adacomp_compressor<T, Backend>, adacomp_config, detail::adacomp_record,
                                                          detail::adacomp_step_record, detail::adacomp_ops<Backend>> {
 public:
  /// Checks `cfg` (bin sizes in [1, 2^32), the momentum, the threads); throws `gradcomp::error`
  /// (`errc::invalid_argument`) for a value outside its range.
  explicit adacomp_compressor(adacomp_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg), wire::value_coding::scaled_sign, true, true) {
    check_bin(cfg_.conv_bin, "conv_bin");
    check_bin(cfg_.fc_bin, "fc_bin");
  }

  /**
   * @brief Registers a tensor and allocates its residual and bin buffers; returns its id. Its bin
   * size is `config().conv_bin` for a shape of rank 3 or more (a convolution kernel), else
   * `config().fc_bin`. Throws `gradcomp::error`: `errc::duplicate_tensor`, `errc::size_overflow`,
   * `errc::invalid_argument`.
   */
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         tensor_mode mode = tensor_mode::automatic) {
    const std::size_t bin = shape.size() >= 3 ? cfg_.conv_bin : cfg_.fc_bin;
    return add_tensor(std::move(name), std::move(shape), bin, mode);
  }

  /// `add_tensor` with the bin size `bin` (at least 1, below 2^32) for this tensor.
  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape, std::size_t bin, tensor_mode mode) {
    check_bin(bin, "bin");
    bins_state st;
    bins_.reserve(bins_.size() + 1);
    backend_buffer<std::uint32_t, Backend> model_offsets;
    adding_bin_ = bin;
    // The bin buffers are allocated once the registration is known to be valid, before it takes
    // effect (strong guarantee). A whole-model step keeps every bin's offset in one buffer.
    const std::size_t id = this->add(
        std::move(name), std::move(shape), mode, cfg_.policy,
        [&](detail::adacomp_record&, const tensor_info& info) {
          st.bin = info.compressed ? bin : detail::adacomp_dense_bin;
          const std::size_t nb = detail::adacomp_bins(info.numel, st.bin);
          st.bins = base::ops::template allocate<detail::adacomp_bin<T>>(this->backend_, nb);
          st.chunks = base::ops::template allocate<detail::adacomp_chunk<T>>(this->backend_, detail::adacomp_chunks(nb));
          if constexpr (base::whole_model)
            model_offsets = base::ops::template allocate<std::uint32_t>(this->backend_, model_offsets_.size() + nb);
          else st.offsets = base::ops::template allocate<std::uint32_t>(this->backend_, info.compressed ? nb : 0);
        },
        [](const tensor_info&) { return wire::coding_parameters{}; });
    bins_.push_back(std::move(st));
    if constexpr (base::whole_model) model_offsets_ = std::move(model_offsets);
    return id;
  }


  /// The bin size of tensor `id` (unchecked; meaningful for compressed tensors).
  std::size_t bin(std::size_t id) const noexcept { return bins_[id].bin; }

  /// How `save_snapshot` and `restore_snapshot` reach its state (adacomp/snapshot.hpp).
  using snapshot_trait = detail::residual_snapshot_trait<T, wire::snapshot_selection::adacomp, false>;

 private:
  using base = typename adacomp_compressor::compressor_base;
  using kernels = detail::adacomp_ops<Backend>;

  struct bins_state {
    std::size_t bin = 1;
    backend_buffer<detail::adacomp_bin<T>, Backend> bins;      // each bin's measurements
    backend_buffer<detail::adacomp_chunk<T>, Backend> chunks;  // each chunk's sums
    backend_buffer<std::uint32_t, Backend> offsets;            // where each bin's selection goes (tensor by tensor)
  };

  friend base;
  // The step's passes (common/compressor_base.hpp), on the whole model or tensor t.
  void measure(const Backend& on, const typename base::model_type& model) {
    kernels::measure(on, model, model_offsets_.view(), this->records_.view());
  }
  void measure(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    bins_state& b = bins_[t];
    kernels::measure(on, grads[t], readonly(this->tensors_[t].e.view()), b.bin, b.bins.view(), b.chunks.view(),
                     b.offsets.view(), this->records_.view(), t);
  }
  void apply(const Backend& on, const typename base::model_type& model) {
    kernels::apply(on, model, readonly(model_offsets_.view()), this->records_.view(),
                   readonly(this->step_record_.view()));
  }
  void apply(const Backend& on, span<const typename base::tensor_view> grads, std::size_t t) {
    auto& st = this->tensors_[t];
    const bins_state& b = bins_[t];
    kernels::apply(on, grads[t], st.e.view(), b.bin, st.indices.view(), st.values.view(), readonly(b.bins.view()),
                   readonly(b.offsets.view()), this->records_.view(), t, readonly(this->step_record_.view()));
  }

  // The kernels' work items of tensor t in a whole-model step.
  detail::model_items model_items(std::size_t t, const tensor_info& info) const noexcept {
    if constexpr (base::whole_model) {
      const std::size_t bin = t < bins_.size() ? bins_[t].bin
                              : info.compressed ? adding_bin_
                                                : detail::adacomp_dense_bin;
      return detail::adacomp_model_items(info.numel, bin, info.compressed);
    } else {
      return base::model_items(t, info);
    }
  }
  // Its bins, chunks and bin size, in a whole-model step.
  detail::own_buffers model_buffers(std::size_t t) noexcept {
    detail::own_buffers own;
    own.aux[0] = bins_[t].bins.view().data();
    own.aux[1] = bins_[t].chunks.view().data();
    own.param = bins_[t].bin;
    return own;
  }

  static void check_bin(std::size_t bin, const char* what) {
    if (bin == 0 || bin > std::numeric_limits<std::uint32_t>::max()) {
      std::string message(what);
      message.append(" must be in [1, 2^32)");
      throw error(errc::invalid_argument, message);
    }
  }

  using base::cfg_;
  std::vector<bins_state> bins_;
  backend_buffer<std::uint32_t, Backend> model_offsets_;  // every bin's, a whole-model step's
  std::size_t adding_bin_ = 1;           // the bin size of the tensor being registered
};

}  // namespace gradcomp
