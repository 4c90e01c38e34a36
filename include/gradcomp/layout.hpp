/// @file layout.hpp
/// @brief The vocabulary every compressor shares: which tensors are compressed, the record of a
/// registered tensor, what a step did, and what the receiving side needs to know of a model
/// (`receiver_layout`), so that one aggregator serves every compressor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "momentum_kind.hpp"
#include "error.hpp"

namespace gradcomp {

/// Per-tensor override of the compression policy.
enum class tensor_mode : unsigned char {
  automatic = 0,   ///< Decided by `compression_policy`.
  compressed = 1,  ///< Always sparsified.
  dense = 2,       ///< Always sent whole.
};

/**
 * @brief Which tensors are sparsified (docs/algorithms.md, "Which tensors are compressed").
 *
 * The default is the DGC authors' rule: tensors of rank <= 1 (biases, normalisation parameters)
 * go dense, every other tensor is compressed. `min_compressed_elements` additionally sends small
 * tensors dense (another framework uses 16384); `predicate`, when set, decides instead of both.
 */
struct compression_policy {
  std::size_t min_compressed_elements = 0;  ///< Tensors with fewer elements go dense.
  bool compress_vectors = false;            ///< Compress rank <= 1 tensors too.
  /// Optional: returns true to compress the tensor of this name and shape.
  std::function<bool(const std::string& name, const std::vector<std::size_t>& shape)> predicate;

  /// The policy that compresses every tensor, vectors (biases) included: the quantisers' default.
  static compression_policy every_tensor() {
    compression_policy p;
    p.compress_vectors = true;
    return p;
  }
  /// Applies the policy to one tensor.
  bool compresses(const std::string& name, const std::vector<std::size_t>& shape) const {
    if (predicate) return predicate(name, shape);
    std::size_t numel = 1;
    for (std::size_t d : shape) numel *= d;
    if (!compress_vectors && shape.size() <= 1) return false;
    return numel >= min_compressed_elements;
  }
};

/// A registered tensor.
struct tensor_info {
  std::string name;                ///< Unique name.
  std::vector<std::size_t> shape;  ///< Dimensions (only their product and rank matter).
  std::size_t numel = 0;           ///< Number of elements.
  bool compressed = false;         ///< Sparsified (true) or sent dense (false).
};

/// What one step of a compressor did (read with `stats()` after `compress`).
struct step_stats {
  std::size_t step = 0;               ///< Step number of this call (0-based).
  std::size_t stage = 0;              ///< Warm-up stage (0 for compressors without one).
  double density = 0.0;               ///< Target density of compressed tensors (1 for quantisers).
  double clip_coefficient = 1.0;      ///< Global clip factor (smallest factor when per tensor).
  std::size_t total_elements = 0;     ///< Elements of all tensors.
  std::size_t dense_elements = 0;     ///< Elements sent dense.
  std::size_t target_elements = 0;    ///< Sum of k over compressed tensors (their elements for quantisers).
  std::size_t kept_elements = 0;      ///< Entries sent for compressed tensors.
};

/// What the receiving side needs to know of one tensor.
struct receiver_tensor {
  tensor_info info;          ///< Name, shape, element count, compressed or not.
  bool dense = false;        ///< Senders send it as a dense section (else as a sparse one).
  bool momentum = false;     ///< The receiver applies its momentum to the tensor's average.
  std::size_t max_kept = 0;  ///< Most positions a sparse section of it carries.
};

/**
 * @brief What an aggregator needs to know of a model: the tensors, the form in which senders send
 * each, and the receiver-side momentum. Every compressor gives its own with `receiver()`; a
 * receiver that has no compressor (a parameter server) builds one.
 */
struct receiver_layout {
  std::vector<receiver_tensor> tensors;       ///< In registration order.
  double momentum = 0.0;                      ///< Receiver-side momentum m in [0, 1).
  momentum_kind kind = momentum_kind::vanilla;  ///< Its form (vanilla or Nesterov).
};

/**
 * @brief The settings every quantiser whose receiver applies momentum has in its configuration
 * (`terngrad_config`, `onebit_sgd_config`, `qsgd_config` and `adacomp_config` derive from it):
 * the receiver's momentum, which its `receiver()` passes on, and the CPU backend's threads.
 */
struct quantiser_settings {
  /// Momentum the receiver applies to the averaged gradient (`receiver()`), in [0, 1).
  double momentum = 0.9;
  /// The receiver's momentum form, vanilla or Nesterov.
  momentum_kind momentum_form = momentum_kind::vanilla;
  /// Threads the CPU backend spreads the tensors over (1: the calling thread only).
  std::size_t threads = 1;
};

namespace detail {
inline std::size_t checked_numel(const std::vector<std::size_t>& shape);

// The record of a tensor a compressor registers (its `tensors` have an `info` each): throws
// errc::invalid_argument for a mode outside tensor_mode, errc::duplicate_tensor for a name
// registered already, errc::size_overflow for 2^32 elements or more.
template <class States>
tensor_info new_tensor_info(const States& tensors, std::string name, std::vector<std::size_t> shape,
                            tensor_mode mode, const compression_policy& policy) {
  if (mode != tensor_mode::automatic && mode != tensor_mode::compressed && mode != tensor_mode::dense)
    throw error(errc::invalid_argument, "mode is not a tensor_mode");
  for (const auto& t : tensors)
    if (t.info.name == name) throw error(errc::duplicate_tensor, name);
  tensor_info info;
  info.numel = checked_numel(shape);
  info.compressed = mode == tensor_mode::automatic ? policy.compresses(name, shape) : mode == tensor_mode::compressed;
  info.name = std::move(name);
  info.shape = std::move(shape);
  return info;
}

// The check of `compress` arguments every compressor makes first: one gradient per tensor, each
// of its tensor's size.
template <class States, class Grads>
errc check_gradients(const States& tensors, const Grads& grads) noexcept {
  if (grads.size() != tensors.size()) return errc::wrong_tensor_count;
  for (std::size_t t = 0; t < tensors.size(); ++t)
    if (grads[t].size() != tensors[t].info.numel) return errc::size_mismatch;
  return errc::ok;
}

inline std::size_t checked_numel(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) {
    if (d != 0 && n > std::numeric_limits<std::uint32_t>::max() / d)
      throw error(errc::size_overflow, "tensor has more than 2^32 - 1 elements");
    n *= d;
  }
  return n;
}
}  // namespace detail

}  // namespace gradcomp
