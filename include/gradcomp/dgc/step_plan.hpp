// The DGC step split into what the host plans and what a backend executes (docs/backends.md).
//
// The host knows everything that depends on the configuration, the layout and the step number:
// which tensors are compressed, each tensor's k, the sampling seeds, the clipping threshold. It
// passes these by value. Everything that depends on the data lives in backend memory as the
// records below: each gradient's norm or largest magnitude, the clip coefficients, the overflow
// guard's bounds, the step's verdict (go, or the reason it is refused), the selection results.
// The functions here compute the step's decisions from those records, one tensor after the other
// in tensor order (so the global norm always sums in the same order); a backend runs them where
// its memory is (a CPU backend on the host, a GPU backend in a single-thread kernel), and the
// kernels it runs afterwards obey the verdict. None of them reads host state.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../config.hpp"
#include "../detail/state_bounds.hpp"
#include "../error.hpp"
#include "../selection_types.hpp"
#include "../momentum_kind.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {


// What the read of a gradient before the step computes.
enum class gradient_read : std::uint8_t {
  none = 0,     // no read: no finiteness check, no clipping, no overflow guard
  largest = 1,  // the largest magnitude (NaN for a NaN or an infinity)
  norm = 2,     // the L2 norm as scale * root, which also bounds the largest magnitude
};

// One tensor's record, in backend memory. The host writes `compressed` once at registration and
// the bounds on a restore; everything else is written by the step.
template <class T>
struct dgc_tensor_record {
  double norm_scale = 1.0;  // this step's norm is norm_scale * norm_root
  double norm_root = 0.0;   // NaN: the gradient holds a NaN or an infinity
  double largest = HUGE_VAL;  // largest |g| or a bound (inf: unknown)
  double coef = 1.0;        // this step's clip coefficient
  double u_bound = 0.0;     // upper bound of max |U|
  double v_bound = 0.0;     // upper bound of max |V|
  double next_u_bound = 0.0;  // the bounds the step in progress leaves
  double next_v_bound = 0.0;
  selection_result<T> selection{};  // the last step's selection (compressed tensors)
  std::uint64_t kept = 0;           // entries the last step sent
  std::uint64_t numel = 0;          // the tensor's elements (written at registration)
  std::int32_t status = 0;          // this step's outcome for the tensor (an errc value)
  std::uint8_t compressed = 0;      // sparsified (1) or sent dense (0)
};

// The step's verdict, in backend memory: errc::ok lets the step's kernels run; anything else
// stops them, and is what the host reports when it reads the verdict.
struct dgc_step_record {
  std::int32_t status = 0;
  double global_coef = 1.0;  // the global clip coefficient (1 when clipping per tensor)
};

// The host's plan of a step, passed by value to the backend.
struct dgc_step_plan {
  gradient_read read = gradient_read::none;
  double threshold = 0.0;  // local clipping threshold; 0: no clipping
  bool per_tensor = false;  // clip each tensor by its own norm
  momentum_kind kind = momentum_kind::none;  // the sender's momentum
  double momentum = 0.0;    // m as the state's type holds it
};

// One compressed tensor's plan for a step, passed by value.
template <class T>
struct dgc_tensor_plan {
  momentum_kind kind = momentum_kind::none;
  T momentum = T(0);
  std::size_t k = 0;
  bool exact = false;    // exact top-k instead of the sampled threshold
  bool masking = false;  // momentum factor masking
  std::uint64_t seed = 0;
};

GRADCOMP_HD inline bool step_may_run(const dgc_step_record& s) noexcept {
  return s.status == static_cast<std::int32_t>(errc::ok);
}

// A norm as scale * root, so that a norm beyond the double range still gives its clip
// coefficient.
struct scaled_norm {
  double scale = 1.0;
  double root = 0.0;
};

// clip_coefficient for a scaled norm: threshold / norm when the norm exceeds a positive
// threshold, else exactly 1; with scale 1, bitwise clip_coefficient(root, threshold).
GRADCOMP_HD inline double clip_coefficient(scaled_norm n, double threshold) noexcept {
  if (!(threshold > 0.0)) return 1.0;
  if (n.scale == 1.0) return n.root > threshold ? threshold / n.root : 1.0;
  const double t = threshold / n.scale;
  return n.root > t ? t / n.root : 1.0;
}

// The L2 norm of the tensors' norms (the global norm), summed in tensor order. When a norm is
// scaled or the sum of squares overflows, the norms are recomputed relative to the largest one
// (its scale, or its root when unscaled), so every finite gradient gets its true clip
// coefficient; otherwise the plain sum, so ordinary steps keep their bits.
template <class T>
GRADCOMP_HD scaled_norm global_norm(const dgc_tensor_record<T>* r, std::size_t count) noexcept {
  double sq = 0.0;
  bool plain = true;
  for (std::size_t t = 0; t < count; ++t) {
    plain = plain && r[t].norm_scale == 1.0;
    sq += rounded(r[t].norm_root * r[t].norm_root);
  }
  if (plain && std::isfinite(sq)) return {1.0, std::sqrt(sq)};
  double top = 0.0;
  for (std::size_t t = 0; t < count; ++t) {
    const double x = r[t].norm_scale == 1.0 ? r[t].norm_root : r[t].norm_scale;
    top = x > top ? x : top;
  }
  double scaled = 0.0;
  for (std::size_t t = 0; t < count; ++t) {
    const double x = r[t].norm_scale == 1.0 ? r[t].norm_root / top : (r[t].norm_scale / top) * r[t].norm_root;
    scaled += rounded(x * x);
  }
  return {top, std::sqrt(scaled)};
}

// The decisions before a step changes any state, from the records the gradient reads left:
// refuses a NaN or an infinity (errc::non_finite_input), sets every tensor's clip coefficient,
// and bounds for every compressed tensor the magnitudes the step can leave in U and V, from the
// last bounds and the gradient's largest magnitude times its coefficient. A tensor whose bound
// comes near the largest finite T is marked errc::state_overflow; the exact pass
// (ops::dgc_exact_bounds) clears the mark where the step's exact magnitudes stay finite, and
// settle_dgc_guard turns what remains into the step's verdict. Without a read there is no bound
// (largest stays infinite) and no guard.
template <class T>
GRADCOMP_HD void plan_dgc_step(dgc_tensor_record<T>* r, std::size_t count, const dgc_step_plan& p,
                               dgc_step_record* step) noexcept {
  step->status = static_cast<std::int32_t>(errc::ok);
  step->global_coef = 1.0;
  for (std::size_t t = 0; t < count; ++t) {
    r[t].status = static_cast<std::int32_t>(errc::ok);
    if (p.read == gradient_read::none) {
      r[t].norm_scale = 1.0;
      r[t].norm_root = 0.0;
      r[t].largest = HUGE_VAL;
    } else if (p.read == gradient_read::largest) {
      r[t].norm_scale = 1.0;
      r[t].norm_root = std::isnan(r[t].largest) ? r[t].largest : 0.0;
    }
  }
  for (std::size_t t = 0; t < count; ++t) {
    if (std::isnan(r[t].norm_root)) {
      step->status = static_cast<std::int32_t>(errc::non_finite_input);
      return;
    }
  }
  const double global = clip_coefficient(global_norm(r, count), p.threshold);
  if (!p.per_tensor) step->global_coef = global;
  const double limit = state_limit<T>();
  const bool guarded = p.read != gradient_read::none;
  for (std::size_t t = 0; t < count; ++t) {
    dgc_tensor_record<T>& x = r[t];
    x.coef = p.per_tensor ? clip_coefficient(scaled_norm{x.norm_scale, x.norm_root}, p.threshold) : global;
    if (x.compressed == 0) continue;
    const double g = rounded(static_cast<double>(static_cast<T>(x.coef)) * x.largest);
    double u = 0.0, v = 0.0;
    switch (p.kind) {
      case momentum_kind::none: v = x.v_bound + g; break;
      case momentum_kind::vanilla: u = rounded(p.momentum * x.u_bound) + g; v = x.v_bound + u; break;
      case momentum_kind::nesterov: u = rounded(p.momentum * (x.u_bound + g)); v = x.v_bound + u + g; break;
    }
    x.next_u_bound = u * bound_slack;
    x.next_v_bound = v * bound_slack;
    if (guarded && !(x.next_u_bound <= limit && x.next_v_bound <= limit))
      x.status = static_cast<std::int32_t>(errc::state_overflow);  // for the exact pass
  }
}

// The exact pass's verdict for one tensor, from the step's exact magnitudes: it clears the mark
// of plan_dgc_step when they stay clear of the largest finite value. The exact pass refuses what
// comes within the margin too, so that a build whose scalar arithmetic rounds differently from
// the vector kernels (a fused multiply-add) cannot let an infinity through.
template <class T>
GRADCOMP_HD void settle_exact_bounds(dgc_tensor_record<T>& x, double u, double v, bool finite) noexcept {
  const double limit = state_limit<T>();
  if (!finite || !(u <= limit && v <= limit)) return;
  x.status = static_cast<std::int32_t>(errc::ok);
  x.next_u_bound = u;
  x.next_v_bound = v;
}

// The step's verdict after the exact pass: the first tensor (in tensor order) still marked.
template <class T>
GRADCOMP_HD void settle_dgc_guard(const dgc_tensor_record<T>* r, std::size_t count, dgc_step_record* step) noexcept {
  if (!step_may_run(*step)) return;
  for (std::size_t t = 0; t < count; ++t) {
    if (r[t].status != static_cast<std::int32_t>(errc::ok)) {
      step->status = r[t].status;
      return;
    }
  }
}

// After the step's kernels: the first tensor that failed (a NaN met by the selection) becomes
// the verdict; otherwise the step's bounds become the state's.
template <class T>
GRADCOMP_HD void commit_dgc_step(dgc_tensor_record<T>* r, std::size_t count, dgc_step_record* step) noexcept {
  if (!step_may_run(*step)) return;
  for (std::size_t t = 0; t < count; ++t) {
    if (r[t].status != static_cast<std::int32_t>(errc::ok)) {
      step->status = r[t].status;
      return;
    }
  }
  for (std::size_t t = 0; t < count; ++t) {
    r[t].u_bound = r[t].next_u_bound;
    r[t].v_bound = r[t].next_v_bound;
  }
}

// A backend's kernels of the DGC step (docs/backends.md, "The DGC step"): every backend that runs
// dgc_compressor specialises it (the CPU's is dgc/cpu_ops.hpp, the Thrust backend's
// dgc/thrust_ops.hpp).
template <class Backend>
struct dgc_ops;

// A tensor's work items in the whole-model launches (model_items, backend.hpp): its elements, in
// space 0 when it is sent dense, in space 1 when compressed.
inline model_items dgc_model_items(std::size_t numel, bool compressed) noexcept {
  model_items items;
  items.count[compressed ? 1 : 0] = numel;
  return items;
}

}  // namespace detail
}  // namespace gradcomp
