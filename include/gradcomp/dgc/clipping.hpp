/// @file clipping.hpp
/// @brief Local gradient clipping with the N^(-1/2) rule (docs/algorithms.md).
#pragma once

#include <cmath>
#include <cstddef>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../span.hpp"

namespace gradcomp {

/// Whether clipping looks at each tensor's own norm or at the norm of the whole model's gradient.
enum class clip_scope : unsigned char {
  global_norm = 0,  ///< One coefficient from the L2 norm over all tensors (as `clip_grad_norm_`).
  per_tensor = 1,   ///< One coefficient per tensor from that tensor's L2 norm.
};

/**
 * @brief L2 norm of `g`, accumulated in double (no overflow for any finite float input).
 * @return the norm, or `errc::non_finite_input` if `g` holds a NaN or an infinity.
 */
template <class Backend, class T>
[[nodiscard]] result<double> l2_norm(const Backend& backend, backend_span<const T, Backend> g) {
  const auto r = detail::ops<Backend>::l2_norm(backend, g);
  if (!r.finite) return fail(errc::non_finite_input);
  return r.norm;
}

/**
 * @brief The per-worker clipping threshold for a global threshold `clip_norm` and `num_workers`
 * workers: `clip_norm / sqrt(num_workers)`. If the workers' gradients are i.i.d., their sum has
 * about sqrt(N) times the norm of one, so clipping each at this threshold clips the sum at about
 * `clip_norm`.
 */
inline double local_clip_threshold(double clip_norm, std::size_t num_workers) noexcept {
  return clip_norm / std::sqrt(static_cast<double>(num_workers == 0 ? 1 : num_workers));
}

/// The factor to multiply a gradient of norm `norm` by: `threshold / norm` when the norm exceeds a
/// positive threshold, else exactly 1 (so unclipped gradients stay bitwise unchanged).
inline double clip_coefficient(double norm, double threshold) noexcept {
  return (threshold > 0.0 && norm > threshold) ? threshold / norm : 1.0;
}

}  // namespace gradcomp
