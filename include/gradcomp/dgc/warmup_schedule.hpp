/// @file warmup_schedule.hpp
/// @brief DGC's warm-up sparsity schedule: density falls exponentially to its final value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "../config.hpp"
#include "../error.hpp"

namespace gradcomp {

/// What advances the warm-up schedule by one stage.
enum class schedule_unit : unsigned char {
  epoch = 0,  ///< One stage per epoch (the trainer reports the epoch).
  step = 1,   ///< One stage per `steps_per_stage` compression steps.
};

/**
 * @brief The density (fraction of elements sent) for each warm-up stage, then a final density.
 *
 * A schedule is a list of stage densities whose last entry holds forever after. Factories:
 * - `paper(final, E)`: the paper's schedule, density `0.25^(e+1)` for stages `e < E`, clamped at
 *   the final density; `paper()` gives 25%, 6.25%, 1.5625%, 0.390625%, then 0.1% (sparsity
 *   75%, 93.75%, 98.4375%, 99.6%, 99.9%).
 * - `coefficient(final, E)`: the authors' code default, coefficient `final^(1/(E+1))` and density
 *   `coefficient^(e+1)`: for E = 5, 0.316, 0.1, 0.0316, 0.01, 0.00316, then 0.001.
 * - `exponential(c, final, E)`: any coefficient `c`.
 * - `from_list(densities)`: an explicit list.
 * - `constant(d)`: no warm-up.
 *
 * Stages advance per epoch or per step (`schedule_unit`). Every factory throws `gradcomp::error`
 * (`errc::invalid_argument`) for a density outside (0, 1] or `steps_per_stage == 0`.
 *
 * Learning-rate warm-up is the trainer's job; examples/warmup_schedule.cpp shows both together.
 */
class warmup_schedule {
 public:
  /// The paper's schedule ending at 99.9% sparsity after 4 warm-up epochs.
  warmup_schedule() : warmup_schedule(paper()) {}

  /// `c^(e+1)` for stages `e < warmup_stages`, clamped below at `final_density`, then
  /// `final_density`.
  static warmup_schedule exponential(double c, double final_density, std::size_t warmup_stages,
                                     schedule_unit unit = schedule_unit::epoch,
                                     std::size_t steps_per_stage = 1) {
    if (!(c > 0.0 && c <= 1.0)) throw error(errc::invalid_argument, "coefficient must be in (0, 1]");
    std::vector<double> d;
    for (std::size_t e = 0; e < warmup_stages; ++e)
      d.push_back(std::max(final_density, std::pow(c, static_cast<double>(e + 1))));
    d.push_back(final_density);
    return from_list(std::move(d), unit, steps_per_stage);
  }

  /// The paper's schedule: coefficient 0.25.
  static warmup_schedule paper(double final_density = 0.001, std::size_t warmup_stages = 4,
                               schedule_unit unit = schedule_unit::epoch,
                               std::size_t steps_per_stage = 1) {
    return exponential(0.25, final_density, warmup_stages, unit, steps_per_stage);
  }

  /// The authors' code default: coefficient `final_density^(1/(warmup_stages+1))`.
  static warmup_schedule coefficient(double final_density, std::size_t warmup_stages,
                                     schedule_unit unit = schedule_unit::epoch,
                                     std::size_t steps_per_stage = 1) {
    check_density(final_density);
    const double c = std::pow(final_density, 1.0 / static_cast<double>(warmup_stages + 1));
    return exponential(c, final_density, warmup_stages, unit, steps_per_stage);
  }

  /// An explicit list; its last entry is the final density. The list must not be empty.
  static warmup_schedule from_list(std::vector<double> densities,
                                   schedule_unit unit = schedule_unit::epoch,
                                   std::size_t steps_per_stage = 1) {
    if (densities.empty()) throw error(errc::invalid_argument, "empty density list");
    if (unit != schedule_unit::epoch && unit != schedule_unit::step)
      throw error(errc::invalid_argument, "unit is not a schedule_unit");
    for (double d : densities) check_density(d);
    if (steps_per_stage == 0) throw error(errc::invalid_argument, "steps_per_stage must be > 0");
    return warmup_schedule(std::move(densities), unit, steps_per_stage);
  }

  /// A fixed density with no warm-up.
  static warmup_schedule constant(double density) { return from_list({density}); }

  /// The stage index at a position of training.
  std::size_t stage(std::size_t epoch, std::size_t step) const noexcept {
    const std::size_t s = unit_ == schedule_unit::epoch ? epoch : step / steps_per_stage_;
    return std::min(s, densities_.size() - 1);
  }
  /// The density of a stage; stages past the list use the final density.
  double density_at_stage(std::size_t stage) const noexcept {
    return densities_[std::min(stage, densities_.size() - 1)];
  }
  /// The density at a position of training (`epoch` counts from 0, `step` from 0).
  double density(std::size_t epoch, std::size_t step) const noexcept {
    return densities_[stage(epoch, step)];
  }
  /// The density after warm-up.
  double final_density() const noexcept { return densities_.back(); }
  /// The largest density of any stage (sizes buffers).
  double max_density() const noexcept {
    return *std::max_element(densities_.begin(), densities_.end());
  }
  /// The smallest density of any stage.
  double min_density() const noexcept {
    return *std::min_element(densities_.begin(), densities_.end());
  }
  /// All stage densities; the last is the final density.
  const std::vector<double>& stages() const noexcept { return densities_; }
  /// What advances the stage.
  schedule_unit unit() const noexcept { return unit_; }
  /// Steps per stage when `unit() == schedule_unit::step`.
  std::size_t steps_per_stage() const noexcept { return steps_per_stage_; }

 private:
  warmup_schedule(std::vector<double> d, schedule_unit unit, std::size_t steps)
      : densities_(std::move(d)), unit_(unit), steps_per_stage_(steps) {}

  static void check_density(double d) {
    if (!(d > 0.0 && d <= 1.0)) throw error(errc::invalid_argument, "density must be in (0, 1]");
  }

  std::vector<double> densities_;
  schedule_unit unit_ = schedule_unit::epoch;
  std::size_t steps_per_stage_ = 1;
};

/// Number of elements kept from `n` at `density`: `ceil(n * density)`, computed so that a product
/// that is an integer up to rounding (1000 * 0.001) is not rounded up to the next integer. The same
/// on the host and in device code.
GRADCOMP_HD inline std::size_t kept_count(std::size_t n, double density) noexcept {
  if (n == 0 || !(density > 0.0)) return 0;
  if (density >= 1.0) return n;
  const double x = static_cast<double>(n) * density;
  const std::size_t k = static_cast<std::size_t>(ceil(x * (1.0 - 1e-12)));
  return k < 1 ? 1 : k > n ? n : k;
}

/// What a compressed tensor that a density leaves with few elements does
/// (docs/algorithms.md, "Tensors too small to sparsify").
enum class small_tensor_action : unsigned char {
  floor = 0,  ///< It keeps `min_kept` elements (all of them where it has fewer) each step.
  dense = 1,  ///< It is sent dense, every step (decided at registration).
};

/**
 * @brief The rule for compressed tensors too small for their density: a tensor is small where
 * `kept_count(numel, d)` is below `min_kept` at the schedule's smallest density d. `min_kept` 0
 * (the default) has no small tensors: every tensor keeps `kept_count(numel, density)`.
 */
struct small_tensor_policy {
  std::size_t min_kept = 0;                                ///< Fewest elements a tensor keeps.
  small_tensor_action action = small_tensor_action::floor;  ///< What a small tensor does.
};

/// The elements a compressed tensor of n keeps at `density`: `kept_count(n, density)`, raised to
/// `floor` (or to n, where n is smaller) where that is fewer. The same on the host and in device
/// code.
struct kept_rule {
  double density = 1.0;   ///< The step's density.
  std::size_t floor = 0;  ///< The fewest elements kept (`small_tensor_policy::min_kept`).
  /// The kept count of a tensor of `n` elements.
  GRADCOMP_HD std::size_t operator()(std::size_t n) const noexcept {
    const std::size_t k = kept_count(n, density);
    if (k >= floor) return k;
    return floor < n ? floor : n;
  }
};

}  // namespace gradcomp
