// The backend conformance suite (docs/backends.md): what every backend must show before the
// compressors may run on it. A backend enters the suite with a harness that moves test data in
// and out of its memory through its own explicit copies; the suite then runs DGC, EF-SignSGD,
// their snapshots and the aggregator on it and on the CPU backend, the reference, and requires
// bitwise the same messages, statistics, selections, state and updates, the same refusals with
// nothing modified, and (where the harness can count them) one synchronisation per compress +
// encode_message and none for an aggregation step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/gradcomp.hpp>

namespace gradcomp_test {

// How the suite reaches a backend's memory: upload / download through the backend's copies, and
// the synchronisations it has counted (-1 when it cannot count them).
template <class Backend>
struct backend_harness {
  using ops = gradcomp::detail::ops<Backend>;
  template <class T>
  using buffer = typename ops::template buffer<T>;

  template <class T>
  static buffer<T> upload(const Backend& b, const std::vector<T>& host) {
    auto out = ops::template allocate<T>(b, host.size());
    ops::copy_to_backend(b, gradcomp::span<const T>(host.data(), host.size()), out.view());
    ops::synchronize(b);
    return out;
  }
  template <class T>
  static std::vector<T> download(const Backend& b, gradcomp::backend_span<const T, Backend> s) {
    std::vector<T> out(s.size());
    ops::copy_to_host(b, s, gradcomp::span<T>(out.data(), out.size()));
    ops::synchronize(b);
    return out;
  }
};

// One model layout for the suite: two compressed weights (one large enough for the sampled
// paths of the selections), a small compressed one, a dense bias.
struct conformance_tensor {
  const char* name;
  std::vector<std::size_t> shape;
};
inline std::vector<conformance_tensor> conformance_model() {
  return {{"conv", {64, 9, 80}}, {"fc", {50, 60}}, {"bias", {97}}, {"tiny", {6, 7}}};
}

// Gradients of a step: gaussian with a per-tensor scale, a few large outliers, deterministic.
template <class T>
std::vector<std::vector<T>> conformance_gradients(std::size_t step, std::uint64_t worker = 0) {
  std::vector<std::vector<T>> g;
  std::size_t t = 0;
  for (const auto& x : conformance_model()) {
    std::size_t n = 1;
    for (std::size_t d : x.shape) n *= d;
    std::mt19937_64 rng(1000 * step + 17 * t + 7919 * worker + 1);
    std::normal_distribution<double> normal(0.0, 1.0 / static_cast<double>(t + 1));
    std::vector<T> v(n);
    for (auto& e : v) e = static_cast<T>(normal(rng));
    for (std::size_t i = step % 13; i < n; i += 997) v[i] *= T(40);
    g.push_back(std::move(v));
    ++t;
  }
  return g;
}

// A compressor with its gradients in the backend's memory.
template <class T, class Backend>
struct conformance_worker {
  using harness = backend_harness<Backend>;
  Backend backend;
  gradcomp::dgc_compressor<T, Backend> compressor;
  std::vector<typename harness::template buffer<T>> grads;

  conformance_worker(const gradcomp::dgc_config& cfg, const Backend& b) : backend(b), compressor(cfg, b) {
    for (const auto& x : conformance_model()) compressor.add_tensor(x.name, x.shape);
  }
  void load(const std::vector<std::vector<T>>& host) {
    grads.clear();
    for (const auto& g : host) grads.push_back(harness::upload(backend, g));
  }
  std::vector<gradcomp::backend_span<const T, Backend>> views() const {
    std::vector<gradcomp::backend_span<const T, Backend>> v;
    for (const auto& g : grads) v.push_back(g.view());
    return v;
  }
  // Residual and momentum of every tensor, on the host.
  std::vector<std::vector<T>> state() {
    std::vector<std::vector<T>> s;
    for (std::size_t t = 0; t < compressor.num_tensors(); ++t) {
      s.push_back(harness::template download<T>(backend, compressor.residual(t)));
      s.push_back(harness::template download<T>(backend, compressor.momentum_buffer(t)));
    }
    return s;
  }
  gradcomp::result<std::vector<std::byte>> encode() {
    gradcomp::wire::encode_options opt;
    opt.checksum = true;
    std::vector<std::byte> out(compressor.max_message_bytes(opt));
    const auto n = compressor.encode_message(opt, gradcomp::span<std::byte>(out.data(), out.size()));
    if (!n) return gradcomp::fail(n.error());
    out.resize(*n);
    return out;
  }
};

template <class T>
bool bitwise_equal(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        (!a[i].empty() && std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(T)) != 0))
      return false;
  return true;
}

inline bool same_stats(const gradcomp::dgc_step_stats& a, const gradcomp::dgc_step_stats& b) {
  return a.step == b.step && a.stage == b.stage && a.density == b.density &&
         std::memcmp(&a.clip_coefficient, &b.clip_coefficient, sizeof(double)) == 0 &&
         a.total_elements == b.total_elements && a.dense_elements == b.dense_elements &&
         a.target_elements == b.target_elements && a.kept_elements == b.kept_elements;
}

template <class T>
bool same_selection(const gradcomp::selection_result<T>& a, const gradcomp::selection_result<T>& b) {
  return a.count == b.count && a.target == b.target && std::memcmp(&a.threshold, &b.threshold, sizeof(T)) == 0 &&
         a.sample_count == b.sample_count && a.rounds == b.rounds && a.exact == b.exact;
}

// The configurations the suite covers: both selections, the three momentum forms, no clipping,
// global and per-tensor clipping, with a warm-up schedule so k changes from step to step; and the
// small-tensor rule, "tiny" (42 elements: 11, 5, 1 kept) raised to 8 in the later stages by each
// selection, or sent dense.
inline std::vector<gradcomp::dgc_config> conformance_configs() {
  std::vector<gradcomp::dgc_config> out;
  for (const auto selection : {gradcomp::selection_method::sampled_threshold, gradcomp::selection_method::exact_topk})
    for (int momentum = 0; momentum < 3; ++momentum)
      for (int clip = 0; clip < 3; ++clip) {
        gradcomp::dgc_config cfg;
        cfg.selection = selection;
        cfg.momentum_correction = momentum != 0;
        cfg.nesterov = momentum == 2;
        cfg.clip_norm = clip == 0 ? 0.0 : 3.0;
        cfg.clipping = clip == 2 ? gradcomp::clip_scope::per_tensor : gradcomp::clip_scope::global_norm;
        cfg.num_workers = 4;
        cfg.schedule = gradcomp::warmup_schedule::from_list({0.25, 0.1, 0.01}, gradcomp::schedule_unit::step, 2);
        cfg.seed = 42;
        out.push_back(cfg);
      }
  for (const auto selection : {gradcomp::selection_method::sampled_threshold, gradcomp::selection_method::exact_topk})
    for (const auto action : {gradcomp::small_tensor_action::floor, gradcomp::small_tensor_action::dense}) {
      gradcomp::dgc_config cfg = out[selection == gradcomp::selection_method::exact_topk ? 13 : 4];
      cfg.small_tensors.min_kept = 8;
      cfg.small_tensors.action = action;
      out.push_back(cfg);
    }
  return out;
}

// Runs `steps` steps of `cfg` on `backend` and on the CPU backend and checks every observable
// result bitwise; `bad_step` gets a NaN in one gradient (the step must be refused on both,
// nothing modified).
template <class T, class Backend>
void check_dgc_against_cpu(const gradcomp::dgc_config& cfg, std::size_t steps, const Backend& backend,
                           std::size_t bad_step = SIZE_MAX) {
  conformance_worker<T, Backend> tested(cfg, backend);
  conformance_worker<T, gradcomp::cpu_backend> reference(cfg, gradcomp::cpu_backend{});
  for (std::size_t s = 0; s < steps; ++s) {
    CAPTURE(s);
    auto g = conformance_gradients<T>(s);
    if (s == bad_step) g[1][g[1].size() / 3] = std::numeric_limits<T>::quiet_NaN();
    tested.load(g);
    reference.load(g);
    const auto before = tested.state();
    REQUIRE(tested.compressor.compress(tested.views()));
    REQUIRE(reference.compressor.compress(reference.views()));
    const auto a = tested.encode();
    const auto b = reference.encode();
    if (s == bad_step) {
      CHECK(a.error() == gradcomp::errc::non_finite_input);
      CHECK(b.error() == gradcomp::errc::non_finite_input);
      CHECK(tested.compressor.stats().error() == gradcomp::errc::non_finite_input);
      CHECK(bitwise_equal(tested.state(), before));
      CHECK(tested.compressor.step() == reference.compressor.step());
      continue;
    }
    REQUIRE(a);
    REQUIRE(b);
    CHECK(*a == *b);  // the messages, byte for byte (checksum included)
    const auto sa = tested.compressor.stats();
    const auto sb = reference.compressor.stats();
    REQUIRE(sa);
    REQUIRE(sb);
    CHECK(same_stats(*sa, *sb));
    for (std::size_t t = 0; t < tested.compressor.num_tensors(); ++t)
      if (tested.compressor.info(t).compressed)
        CHECK(same_selection(tested.compressor.selection(t), reference.compressor.selection(t)));
    CHECK(bitwise_equal(tested.state(), reference.state()));
  }
}

// The EF-SignSGD compressor of the snapshot cases: the conformance model on `backend`.
template <class Backend>
gradcomp::ef_signsgd_compressor<float, Backend> conformance_ef_signsgd(const Backend& backend) {
  gradcomp::ef_signsgd_config cfg;
  cfg.learning_rate = 0.02;
  gradcomp::ef_signsgd_compressor<float, Backend> c(cfg, backend);
  for (const auto& x : conformance_model()) c.add_tensor(x.name, x.shape);
  return c;
}

template <class C, class = void>
struct keeps_error : std::false_type {};
template <class C>
struct keeps_error<C, std::void_t<decltype(std::declval<const C&>().error_feedback(0))>> : std::true_type {};

// Six steps of the quantiser `make(b)` builds (rank-1 tensors sent whole) on `backend` and on the
// CPU backend (an infinity in step 3): messages (and error buffers, where the method keeps them)
// bitwise equal, the same refusal, and `waits` synchronisations per encoded step where counted
// (one; two for a sparse method, whose counts come before its payload).
template <class Backend, class Make>
void check_quantiser_against_cpu(const Backend& backend, Make make, const std::size_t* synchronizations,
                                 std::size_t waits = 1) {
  using harness = backend_harness<Backend>;
  auto tested = make(backend);
  auto reference = make(gradcomp::cpu_backend{});
  for (const auto& x : conformance_model()) {
    tested.add_tensor(x.name, x.shape, x.shape.size() == 1 ? gradcomp::tensor_mode::dense : gradcomp::tensor_mode::automatic);
    reference.add_tensor(x.name, x.shape, x.shape.size() == 1 ? gradcomp::tensor_mode::dense : gradcomp::tensor_mode::automatic);
  }
  for (std::size_t s = 0; s < 6; ++s) {
    CAPTURE(s);
    auto g = conformance_gradients<float>(s);
    if (s == 3) g[0][5] = std::numeric_limits<float>::infinity();
    std::vector<typename harness::template buffer<float>> device;
    std::vector<gradcomp::backend_span<const float, Backend>> dv;
    std::vector<gradcomp::span<const float>> hv;
    for (const auto& x : g) {
      device.push_back(harness::upload(backend, x));
      hv.emplace_back(x.data(), x.size());
    }
    for (const auto& d : device) dv.push_back(d.view());
    const std::size_t before = synchronizations != nullptr ? *synchronizations : 0;
    REQUIRE(tested.compress(dv));
    REQUIRE(reference.compress(hv));
    std::vector<std::byte> a(tested.max_message_bytes()), b(reference.max_message_bytes());
    const auto na = tested.encode_message({}, gradcomp::span<std::byte>(a.data(), a.size()));
    const auto nb = reference.encode_message({}, gradcomp::span<std::byte>(b.data(), b.size()));
    if (synchronizations != nullptr) CHECK(*synchronizations == before + (s == 3 ? 1 : waits));
    if (s == 3) {
      CHECK(na.error() == gradcomp::errc::non_finite_input);
      CHECK(nb.error() == gradcomp::errc::non_finite_input);
      continue;
    }
    REQUIRE(na);
    REQUIRE(nb);
    CHECK(a == b);
    if constexpr (keeps_error<decltype(tested)>::value)
      for (std::size_t t = 0; t < tested.num_tensors(); ++t)
        CHECK(harness::template download<float>(backend, tested.error_feedback(t)) ==
              std::vector<float>(reference.error_feedback(t).begin(), reference.error_feedback(t).end()));
  }
}

// check_quantiser_against_cpu for EF-SignSGD (learning rate 0.02).
template <class Backend>
void check_ef_signsgd_against_cpu(const Backend& backend, const std::size_t* synchronizations) {
  auto make = [](auto b) {
    gradcomp::ef_signsgd_config cfg;
    cfg.learning_rate = 0.02;
    return gradcomp::ef_signsgd_compressor<float, decltype(b)>(cfg, b);
  };
  check_quantiser_against_cpu(backend, make, synchronizations);
}

// check_quantiser_against_cpu for TernGrad, with clipping (the default) and without.
template <class Backend>
void check_terngrad_against_cpu(const Backend& backend, const std::size_t* synchronizations) {
  for (const double clip : {2.5, 0.0}) {
    CAPTURE(clip);
    auto make = [clip](auto b) {
      gradcomp::terngrad_config cfg;
      cfg.clip_sigmas = clip;
      cfg.rank = 2;
      return gradcomp::terngrad_compressor<float, decltype(b)>(cfg, b);
    };
    check_quantiser_against_cpu(backend, make, synchronizations);
  }
}

// check_quantiser_against_cpu for 1-bit SGD.
template <class Backend>
void check_onebit_against_cpu(const Backend& backend, const std::size_t* synchronizations) {
  auto make = [](auto b) { return gradcomp::onebit_sgd_compressor<float, decltype(b)>(gradcomp::onebit_sgd_config{}, b); };
  check_quantiser_against_cpu(backend, make, synchronizations);
}

// check_quantiser_against_cpu for QSGD: both norms, buckets of 100 (the tensors end in a part
// bucket), 5 levels and 300 (each message takes the shorter of the two forms).
template <class Backend>
void check_qsgd_against_cpu(const Backend& backend, const std::size_t* synchronizations) {
  for (const auto norm : {gradcomp::qsgd_norm::l2, gradcomp::qsgd_norm::maximum}) {
    for (const std::uint32_t levels : {5u, 300u}) {
      CAPTURE(static_cast<int>(norm));
      CAPTURE(levels);
      auto make = [=](auto b) {
        gradcomp::qsgd_config cfg;
        cfg.norm = norm;
        cfg.levels = levels;
        cfg.bucket = 100;
        cfg.rank = 3;
        return gradcomp::qsgd_compressor<float, decltype(b)>(cfg, b);
      };
      check_quantiser_against_cpu(backend, make, synchronizations);
    }
  }
}

// check_quantiser_against_cpu for AdaComp: the default bins (the conv tensor has more bins than a
// chunk of the scale's sum) and bins of 13 for the others.
template <class Backend>
void check_adacomp_against_cpu(const Backend& backend, const std::size_t* synchronizations) {
  for (const std::size_t fc_bin : {std::size_t(500), std::size_t(13)}) {
    CAPTURE(fc_bin);
    auto make = [=](auto b) {
      gradcomp::adacomp_config cfg;
      cfg.fc_bin = fc_bin;
      return gradcomp::adacomp_compressor<float, decltype(b)>(cfg, b);
    };
    check_quantiser_against_cpu(backend, make, synchronizations, 2);
  }
}

// Saves `c` into a new vector through the snapshot functions of its compressor.
template <class C>
std::vector<std::byte> snapshot_of(const C& c) {
  return gradcomp::save_snapshot(c);
}

// Snapshots of a compressor on `backend`: the bytes equal the CPU backend's after the same steps,
// a snapshot restores across backends in both directions, and every copy then continues bitwise
// as the uninterrupted reference. `make(backend)` builds a compressor, `step(c, s)` runs and
// encodes step s and returns its message; `synchronizations`, where counted, must grow by one
// for a save.
template <class Backend, class Make, class Step>
void check_snapshots_across_backends(const Backend& backend, Make make, Step step,
                                     const std::size_t* synchronizations = nullptr) {
  auto tested = make(backend);
  auto reference = make(gradcomp::cpu_backend{});
  for (std::size_t s = 0; s < 3; ++s) REQUIRE(step(tested, s) == step(reference, s));
  const std::size_t before = synchronizations != nullptr ? *synchronizations : 0;
  const auto saved_tested = snapshot_of(tested);
  if (synchronizations != nullptr) CHECK(*synchronizations == before + 1);
  const auto saved_reference = snapshot_of(reference);
  CHECK(saved_tested == saved_reference);
  CHECK(saved_tested.size() == gradcomp::snapshot_bytes(tested));
  auto restored_tested = make(backend);          // a fresh process on Backend, from the CPU's snapshot
  auto restored_reference = make(gradcomp::cpu_backend{});  // and on the CPU, from Backend's
  REQUIRE(gradcomp::restore_snapshot(restored_tested, gradcomp::span<const std::byte>(saved_reference.data(), saved_reference.size())));
  REQUIRE(gradcomp::restore_snapshot(restored_reference, gradcomp::span<const std::byte>(saved_tested.data(), saved_tested.size())));
  for (std::size_t s = 3; s < 7; ++s) {
    CAPTURE(s);
    const auto expected = step(reference, s);
    CHECK(step(tested, s) == expected);
    CHECK(step(restored_tested, s) == expected);
    CHECK(step(restored_reference, s) == expected);
  }
  // A damaged snapshot changes nothing on Backend either.
  auto damaged = saved_reference;
  damaged[damaged.size() / 2] ^= std::byte{1};
  const auto state_before = snapshot_of(restored_tested);
  CHECK(gradcomp::restore_snapshot(restored_tested, gradcomp::span<const std::byte>(damaged.data(), damaged.size())).error() ==
        gradcomp::errc::checksum_mismatch);
  CHECK(snapshot_of(restored_tested) == state_before);
}

// Uploads a step's gradients to the compressor's backend, compresses, encodes.
template <class C, class Backend>
std::vector<std::byte> compress_and_encode(C& c, const Backend& backend, std::size_t s) {
  using harness = backend_harness<Backend>;
  std::vector<typename harness::template buffer<float>> device;
  std::vector<gradcomp::backend_span<const float, Backend>> views;
  for (const auto& x : conformance_gradients<float>(s)) device.push_back(harness::upload(backend, x));
  for (const auto& d : device) views.push_back(d.view());
  REQUIRE(c.compress(views));
  std::vector<std::byte> out(c.max_message_bytes());
  const auto n = c.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size()));
  REQUIRE(n);
  out.resize(*n);
  return out;
}

}  // namespace gradcomp_test
