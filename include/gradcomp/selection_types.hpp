/// @file selection_types.hpp
/// @brief Configuration and result types of the selection components.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp {

/// How the sampled-threshold selector draws its sample.
enum class sampling_mode : std::uint8_t {
  /// Every `stride`-th element from a random offset in `[0, stride)`; the stride has the form
  /// `32a + 1` reduced by 8 until the sample is large enough, as in the DGC authors' code.
  strided = 0,
  /// Uniform positions drawn with replacement.
  uniform = 1,
};

/// What the sampled-threshold selector does when more than k elements pass the threshold.
enum class truncation_mode : std::uint8_t {
  /// Keep the k largest magnitudes (ties to the lower index). The default.
  largest = 0,
  /// Keep the first k passing elements by index, as the DGC authors' code does (biased towards
  /// low indices; offered for parity experiments).
  index_order = 1,
};

/**
 * @brief Parameters of DGC's sampled-threshold selection (docs/algorithms.md).
 *
 * Defaults reproduce the authors' code except for the sample-ratio floor (any ratio in (0, 1] is
 * allowed here) and the truncation, which keeps the k largest instead of the k lowest indices.
 */
struct sampled_threshold_config {
  double sample_ratio = 0.01;  ///< Fraction of elements sampled, in (0, 1].
  sampling_mode sampling = sampling_mode::strided;  ///< How samples are drawn.
  double lower_bound = 0.8;  ///< Accept a count >= lower_bound * k; must be in (0, 1].
  double upper_bound = 1.3;  ///< Above upper_bound * k, re-select exactly; must be >= 1.
  double threshold_decay = 0.8;  ///< Threshold factor when too few pass; in (0, 1).
  int max_rounds = 10;           ///< Most counting rounds of the adaptation loop; >= 1.
  truncation_mode truncation = truncation_mode::largest;  ///< Which k to keep when more pass.
};

/// What a selection call achieved.
template <class T>
struct selection_result {
  std::size_t count = 0;        ///< Indices written (never more than the requested k).
  std::size_t target = 0;       ///< The requested k.
  T threshold = T(0);           ///< Magnitude cut applied: every kept |v| >= threshold.
  std::size_t sample_count = 0; ///< Elements sampled (0 when the exact path ran).
  int rounds = 0;               ///< Counting rounds of the adaptation loop.
  bool exact = false;           ///< True when the result is the exact top-k.
};

}  // namespace gradcomp
