// The snapshot access of the dense quantisers (docs/wire_format.md, "Snapshots"): with error
// feedback (EF-SignSGD, 1-bit SGD), their state is the step counter and each compressed tensor's
// error buffer; the stochastic ones without it (TernGrad, QSGD: Seeded), the step counter and the
// seed, which key every draw. Either is recorded under the compressor's method. The compressors'
// base befriends residual_snapshot_access (the seeded ones do too, for the seed of their
// configuration); their snapshot headers name it with their method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../backend.hpp"
#include "../snapshot.hpp"
#include "../wire/format.hpp"

namespace gradcomp {
namespace detail {

template <wire::snapshot_selection Method, bool Seeded = false>
struct residual_snapshot_access {
  template <class C>
  static void wait(C& c) {
    c.wait();
  }
  template <class C>
  static const auto& backend(const C& c) noexcept {
    return c.backend_;
  }
  // The error buffer of every compressed tensor (none when Seeded).
  template <class C>
  static auto items(C& c) {
    using item = decltype(make_snapshot_item(wire::section_role::residual, 0, c.tensors_[0].e.view()));
    std::vector<item> out;
    for (std::size_t t = 0; t < c.tensors_.size() && !Seeded; ++t)
      if (c.tensors_[t].info.compressed)
        out.push_back(make_snapshot_item(wire::section_role::residual, t, c.tensors_[t].e.view()));
    return out;
  }
  // The step counter, the seed when Seeded, and the method; the other words are 0.
  template <class C>
  static void counters(const C& c, double* words) {
    for (std::size_t i = 0; i < snapshot_state_words; ++i) words[i] = 0.0;
    const auto step = static_cast<std::uint64_t>(c.step_);
    words[word::step_low] = static_cast<double>(step & 0xffffffffu);
    words[word::step_high] = static_cast<double>(step >> 32);
    if constexpr (Seeded) {
      words[word::seed_low] = static_cast<double>(c.cfg_.seed & 0xffffffffu);
      words[word::seed_high] = static_cast<double>(c.cfg_.seed >> 32);
    }
    words[word::selection] = static_cast<double>(static_cast<std::uint32_t>(Method));
  }
  // A snapshot of another method (DGC's, another quantiser's, or of the first release, which
  // records none) is refused.
  template <class C>
  static const char* config_difference(const C&, const double* words) {
    if (words[word::selection] != static_cast<double>(static_cast<std::uint32_t>(Method))) return "selection";
    if (words[word::momentum_correction] != 0.0) return "momentum_correction";
    return nullptr;
  }
  template <class C>
  static void set_counters(C& c, const double* words) {
    c.step_ = static_cast<std::size_t>(static_cast<std::uint64_t>(words[word::step_low]) |
                                       (static_cast<std::uint64_t>(words[word::step_high]) << 32));
    if constexpr (Seeded)
      c.cfg_.seed = static_cast<std::uint64_t>(words[word::seed_low]) |
                    (static_cast<std::uint64_t>(words[word::seed_high]) << 32);
  }
  // These compressors keep no bounds between steps: their overflow checks read e in every step.
  template <class C>
  static void set_bounds(C&, const std::vector<double>&) noexcept {}
};

// The snapshot trait of a quantiser on T (detail::snapshot_access): its residual snapshot under
// Method. A quantiser names it as its member `snapshot_trait`.
template <class T, wire::snapshot_selection Method, bool Seeded>
struct residual_snapshot_trait {
  using type = residual_snapshot_access<Method, Seeded>;
  using value_type = T;
};

}  // namespace detail
}  // namespace gradcomp
