// Random-k with error feedback: a compressor that lives outside the library, as a user's own
// method would, built from the library's generic layers without editing any of its headers. It
// shows what a new method provides (docs/backends.md, "What a new method provides"): its records
// and kernels' template (this file), the kernels of each backend it runs on (the CPU's here, the
// Thrust backend's in randk_thrust_ops.hpp, the strict test backend's from its generic wrapper),
// its compressor on the quantisers' common base, and its snapshot trait under a method code of its
// own (wire::snapshot_selection_external and above).
//
// Per compressed tensor and step: p = e + g; the tensor sends p at the positions o, o + s, o + 2s,
// ... below n (s = max(1, n / k), k = ceil(density * n), the offset o < s drawn from the seed, the
// tensor and the step) and keeps e = p elsewhere, 0 where sent: sent + e is p, exactly. Tensors
// the policy leaves out are sent whole. A NaN or an infinity in g refuses the step
// (errc::non_finite_input), a p that overflows refuses it (errc::state_overflow); nothing changes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <gradcomp/backend.hpp>
#include <gradcomp/common/compressor_base.hpp>
#include <gradcomp/common/residual_snapshot.hpp>
#include <gradcomp/config.hpp>
#include <gradcomp/detail/rng.hpp>
#include <gradcomp/snapshot.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gradcomp_test {

// The method's code in a snapshot's state section.
inline constexpr auto randk_snapshot_code =
    static_cast<gradcomp::wire::snapshot_selection>(gradcomp::wire::snapshot_selection_external + 17);

// One tensor's record, in backend memory.
struct randk_record {
  std::uint64_t numel = 0;
  std::uint64_t kept = 0;       // positions sent in the last step
  std::uint8_t g_finite = 1;    // every element of g is finite
  std::uint8_t p_finite = 1;    // every element of p = e + g is finite
  std::uint8_t compressed = 0;  // sparsified (1) or sent whole (0)
};
struct randk_step_record {
  std::int32_t status = 0;
};

// The positions one step sends: first, first + stride, ... below n.
struct randk_positions {
  std::uint64_t first = 0;
  std::uint64_t stride = 1;
  GRADCOMP_HD std::uint64_t count(std::uint64_t n) const noexcept {
    return first >= n ? 0 : (n - first - 1) / stride + 1;
  }
};

// The verdict, in tensor order: a non-finite g first, then a p that overflows.
GRADCOMP_HD inline void randk_plan(const randk_record* r, std::size_t count, randk_step_record* step) noexcept {
  step->status = static_cast<std::int32_t>(gradcomp::errc::ok);
  for (std::size_t t = 0; t < count; ++t)
    if (r[t].g_finite == 0) {
      step->status = static_cast<std::int32_t>(gradcomp::errc::non_finite_input);
      return;
    }
  for (std::size_t t = 0; t < count; ++t)
    if (r[t].p_finite == 0) {
      step->status = static_cast<std::int32_t>(gradcomp::errc::state_overflow);
      return;
    }
}

// The kernels of a backend (measure, plan, apply); each backend that runs the method specialises it.
template <class Backend>
struct randk_ops;

template <>
struct randk_ops<gradcomp::cpu_backend> {
  template <class T>
  static void measure(const gradcomp::cpu_backend&, gradcomp::span<const T> g, gradcomp::span<const T> e,
                      gradcomp::span<randk_record> records, std::size_t t) {
    bool gf = true, pf = true;
    for (std::size_t i = 0; i < g.size(); ++i) {
      gf = gf && std::isfinite(g[i]);
      pf = pf && std::isfinite(e.empty() ? g[i] : static_cast<T>(e[i] + g[i]));
    }
    records[t].g_finite = gf ? 1 : 0;
    records[t].p_finite = pf ? 1 : 0;
  }
  static void plan(const gradcomp::cpu_backend&, gradcomp::span<const randk_record> records,
                   gradcomp::span<randk_step_record> step) {
    randk_plan(records.data(), records.size(), step.data());
  }
  template <class T>
  static void apply(const gradcomp::cpu_backend&, randk_positions at, gradcomp::span<const T> g, gradcomp::span<T> e,
                    gradcomp::span<std::uint32_t> idx, gradcomp::span<T> values, gradcomp::span<randk_record> records,
                    std::size_t t, gradcomp::span<const randk_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(gradcomp::errc::ok)) return;
    if (records[t].compressed == 0) {
      for (std::size_t i = 0; i < g.size(); ++i) values[i] = g[i];
      return;
    }
    std::size_t j = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const T p = static_cast<T>(e[i] + g[i]);
      const bool sent = i >= at.first && (i - at.first) % at.stride == 0;
      if (sent) {
        idx[j] = static_cast<std::uint32_t>(i);
        values[j++] = p;
      }
      e[i] = sent ? T(0) : p;
    }
    records[t].kept = j;
  }
};

struct randk_config {
  double density = 0.1;    // the share of each compressed tensor's elements sent, in (0, 1]
  std::uint64_t seed = 7;  // keys every offset
  std::size_t threads = 1;
  gradcomp::compression_policy policy = gradcomp::compression_policy::every_tensor();
};

template <class T, class Backend = gradcomp::cpu_backend>
class randk_compressor : public gradcomp::detail::compressor_base<randk_compressor<T, Backend>, randk_config, randk_record,
                                                                 randk_step_record, randk_ops<Backend>> {
  using base = typename randk_compressor::compressor_base;
  using kernels = randk_ops<Backend>;

 public:
  using tensor_view = typename base::tensor_view;

  explicit randk_compressor(randk_config cfg, Backend backend = Backend{})
      : base(backend, std::move(cfg),
             sizeof(T) == 4 ? gradcomp::wire::value_coding::fp32 : gradcomp::wire::value_coding::fp64, true, true) {
    if (!(cfg_.density > 0.0 && cfg_.density <= 1.0))
      throw gradcomp::error(gradcomp::errc::invalid_argument, "density must be in (0, 1]");
  }

  std::size_t add_tensor(std::string name, std::vector<std::size_t> shape,
                         gradcomp::tensor_mode mode = gradcomp::tensor_mode::automatic) {
    return this->add(std::move(name), std::move(shape), mode, cfg_.policy);
  }

  // The positions tensor t sends at step `step` (its record says whether it is compressed).
  randk_positions positions(std::size_t t, std::size_t step) const noexcept {
    const std::uint64_t n = this->tensors_[t].info.numel;
    const auto k = static_cast<std::uint64_t>(std::ceil(cfg_.density * static_cast<double>(n)));
    randk_positions at;
    at.stride = k == 0 || n / k == 0 ? 1 : n / k;
    at.first = gradcomp::detail::derive_seed(cfg_.seed, t, step) % at.stride;
    return at;
  }

  // The snapshot trait: the quantisers' residual snapshot under the method's own code.
  using snapshot_trait = gradcomp::detail::residual_snapshot_trait<T, randk_snapshot_code, false>;

 private:
  template <gradcomp::wire::snapshot_selection Method, bool Seeded>
  friend struct gradcomp::detail::residual_snapshot_access;

  // The step's passes (the base's compress): measure tensor t, apply its plan.
  friend base;
  void measure(const Backend& on, gradcomp::span<const tensor_view> grads, std::size_t t) {
    kernels::measure(on, grads[t], gradcomp::readonly(this->tensors_[t].e.view()), this->records_.view(), t);
  }
  void apply(const Backend& on, gradcomp::span<const tensor_view> grads, std::size_t t) {
    auto& st = this->tensors_[t];
    kernels::apply(on, positions(t, this->step_), grads[t], st.e.view(), st.indices.view(), st.values.view(),
                   this->records_.view(), t, gradcomp::readonly(this->step_record_.view()));
  }

  using base::cfg_;
};

}  // namespace gradcomp_test

