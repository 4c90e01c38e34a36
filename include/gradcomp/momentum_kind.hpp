/// @file momentum_kind.hpp
/// @brief The momentum-correction variants of DGC.
#pragma once

#include <cstdint>

namespace gradcomp {

/**
 * @brief Which velocity the DGC accumulator receives (docs/algorithms.md, "Momentum correction").
 *
 * With `U` the worker's momentum buffer, `V` its residual accumulator, `g` the (clipped) local
 * gradient and `m` the momentum:
 * - `none`: `V += g` (plain error feedback; momentum, if any, is applied by the receiver);
 * - `vanilla`: `U = m*U + g; V += U`;
 * - `nesterov`: `U = m*(U + g); V += U + g`.
 */
enum class momentum_kind : std::uint8_t {
  none = 0,      ///< Error feedback on the raw gradient.
  vanilla = 1,   ///< Heavy-ball momentum correction.
  nesterov = 2,  ///< Nesterov momentum correction.
};

/// Returns `"none"`, `"vanilla"` or `"nesterov"`.
constexpr const char* to_string(momentum_kind k) noexcept {
  switch (k) {
    case momentum_kind::none: return "none";
    case momentum_kind::vanilla: return "vanilla";
    case momentum_kind::nesterov: return "nesterov";
  }
  return "unknown";
}

}  // namespace gradcomp
