/// @file snapshot.hpp
/// @brief Save and restore the whole state of a `dgc_compressor` through the wire format, so a
/// trainer that checkpoints and restarts loses no accumulated gradient (the aggregator's are in
/// gradcomp/snapshot.hpp).
///
/// A compressor snapshot holds the residuals, the momentum buffers, the step counter, the epoch
/// and the sampling seed (the whole random state: samples depend only on seed, tensor and step).
/// Restoring it into a compressor with the same tensors and settings continues bit for bit as if
/// training had never stopped, on any backend (a snapshot saved on one restores on another).
/// Layout: docs/wire_format.md, "Compressor snapshots". The functions are `snapshot_bytes`,
/// `save_snapshot` and `restore_snapshot` of gradcomp/snapshot.hpp; this header gives them the
/// DGC compressor's state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../backend.hpp"
#include "../error.hpp"
#include "../snapshot.hpp"
#include "../span.hpp"
#include "compressor.hpp"

namespace gradcomp {
namespace detail {

struct dgc_snapshot_access {
  // Takes the outcome of a step in progress, so that the counters are the compressor's.
  template <class T, class B>
  static void wait(dgc_compressor<T, B>& c) {
    c.wait();
  }
  template <class T, class B>
  static const B& backend(const dgc_compressor<T, B>& c) noexcept {
    return c.backend_;
  }
  // Residual, then momentum (with momentum correction), of every compressed tensor: an empty
  // tensor's too, so that every residual section is followed by its momentum section.
  template <class T, class B>
  static std::vector<snapshot_item<T, memory_space_t<B>>> items(dgc_compressor<T, B>& c) {
    std::vector<snapshot_item<T, memory_space_t<B>>> out;
    for (std::size_t t = 0; t < c.tensors_.size(); ++t) {
      auto& st = c.tensors_[t];
      if (!st.info.compressed) continue;
      out.push_back(make_snapshot_item(wire::section_role::residual, t, st.e.view()));
      if (c.cfg_.sender_momentum() != momentum_kind::none)
        out.push_back(make_snapshot_item(wire::section_role::momentum, t, c.momenta_[t].view()));
    }
    return out;
  }
  template <class T, class B>
  static void counters(const dgc_compressor<T, B>& c, double* words) {
    const auto low = [](std::uint64_t x) { return static_cast<double>(x & 0xffffffffu); };
    const auto high = [](std::uint64_t x) { return static_cast<double>(x >> 32); };
    words[word::step_low] = low(c.step_);
    words[word::step_high] = high(c.step_);
    words[word::epoch_low] = low(c.epoch_);
    words[word::epoch_high] = high(c.epoch_);
    words[word::seed_low] = low(c.cfg_.seed);
    words[word::seed_high] = high(c.cfg_.seed);
    words[word::momentum_correction] = c.cfg_.momentum_correction ? 1.0 : 0.0;
    words[word::nesterov] = c.cfg_.nesterov ? 1.0 : 0.0;
    words[word::selection] = static_cast<double>(static_cast<std::uint32_t>(
        c.cfg_.selection == selection_method::exact_topk ? wire::snapshot_selection::exact_topk
                                                         : wire::snapshot_selection::sampled_threshold));
  }
  // The settings a snapshot's state depends on must match the compressor's; returns the name of
  // the first field that differs, or nullptr. Snapshots of the first release record none (-1).
  template <class T, class B>
  static const char* config_difference(const dgc_compressor<T, B>& c, const double* words) {
    if (words[word::selection] < 0.0) return nullptr;
    double own[snapshot_state_words];
    counters(c, own);
    if (words[word::momentum_correction] != own[word::momentum_correction]) return "momentum_correction";
    // Without momentum correction the state does not depend on the Nesterov setting (only the
    // receiver's momentum does).
    if (own[word::momentum_correction] != 0.0 && words[word::nesterov] != own[word::nesterov]) return "nesterov";
    if (words[word::selection] != own[word::selection]) return "selection";
    return nullptr;
  }
  template <class T, class B>
  static void set_counters(dgc_compressor<T, B>& c, const double* words) {
    const auto join = [](double low, double high) {
      return static_cast<std::uint64_t>(low) | (static_cast<std::uint64_t>(high) << 32);
    };
    c.step_ = static_cast<std::size_t>(join(words[word::step_low], words[word::step_high]));
    c.epoch_ = static_cast<std::size_t>(join(words[word::epoch_low], words[word::epoch_high]));
    c.cfg_.seed = join(words[word::seed_low], words[word::seed_high]);
  }
  // After a restore: the overflow guard's bounds (in the records, in backend memory) become the
  // restored buffers' largest magnitudes, in the order of items().
  template <class T, class B>
  static void set_bounds(dgc_compressor<T, B>& c, const std::vector<double>& largest) {
    using record = typename dgc_compressor<T, B>::record;
    std::vector<record> host(c.tensors_.size());
    const span<record> h(host.data(), host.size());
    ops<B>::copy_to_host(c.backend_, readonly(c.records_.view()), h);
    ops<B>::synchronize(c.backend_);
    std::size_t i = 0;
    for (std::size_t t = 0; t < c.tensors_.size(); ++t) {
      host[t].u_bound = host[t].v_bound = 0.0;
      if (!c.tensors_[t].info.compressed) continue;
      host[t].v_bound = largest[i++];
      if (c.cfg_.sender_momentum() != momentum_kind::none) host[t].u_bound = largest[i++];
    }
    ops<B>::copy_to_backend(c.backend_, readonly(h), c.records_.view());
    ops<B>::synchronize(c.backend_);
  }
};

template <class T, class B>
struct snapshot_access<dgc_compressor<T, B>> {
  using type = dgc_snapshot_access;
  using value_type = T;
};

}  // namespace detail
}  // namespace gradcomp
