// Bad data above the decoder: every case is refused with a clear error and leaves all state
// bitwise unchanged (duplicate, missing and wrong-form sections; overflowing norms, accumulators
// and sums; counters a snapshot must keep; copies across thread counts; settings a snapshot
// records; enumerators out of range).
#include <gradcomp/dgc/snapshot.hpp>
#include <gradcomp/select/exact_topk.hpp>
#include <gradcomp/select/sampled_threshold.hpp>
#include <gradcomp/wire/crc32c.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/inputs.hpp"
#include "support/step.hpp"

using namespace gradcomp;
using namespace gradcomp_test;

using gradcomp_test::views;

namespace {

// Every sum of an aggregator (readable at any time; the update after finish).
template <class T>
std::vector<std::vector<T>> sums_of(const dgc_aggregator<T>& a) {
  std::vector<std::vector<T>> out;
  for (std::size_t t = 0; t < a.num_tensors(); ++t) out.emplace_back(a.update(t).begin(), a.update(t).end());
  return out;
}

// Every state buffer of a compressor, and its step and epoch.
template <class T>
struct compressor_state {
  std::vector<std::vector<T>> u, v;
  std::size_t step = 0, epoch = 0;
  bool operator==(const compressor_state& o) const {
    if (step != o.step || epoch != o.epoch || u.size() != o.u.size()) return false;
    for (std::size_t t = 0; t < u.size(); ++t)
      if (!bitwise_equal(u[t], o.u[t]) || !bitwise_equal(v[t], o.v[t])) return false;
    return true;
  }
};

template <class T>
compressor_state<T> state_of(dgc_compressor<T>& c) {
  compressor_state<T> s;
  for (std::size_t t = 0; t < c.num_tensors(); ++t) {
    s.u.emplace_back(c.momentum_buffer(t).begin(), c.momentum_buffer(t).end());
    s.v.emplace_back(c.residual(t).begin(), c.residual(t).end());
  }
  s.step = c.step();
  s.epoch = c.epoch();
  return s;
}

template <class T>
bool all_finite(const compressor_state<T>& s) {
  for (const auto* buffers : {&s.u, &s.v})
    for (const auto& b : *buffers)
      for (const T x : b)
        if (!std::isfinite(x)) return false;
  return true;
}

template <class T>
bool same_sums(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t t = 0; t < a.size(); ++t)
    if (!bitwise_equal(a[t], b[t])) return false;
  return true;
}

// Compresses `g` step after step until a step is refused (at most `steps`); every accepted step
// must leave the state finite, the refused one must report state_overflow and change nothing.
// Returns whether a step was refused.
template <class T>
bool run_until_refused(dgc_compressor<T>& c, const std::vector<std::vector<T>>& g, int steps = 100) {
  for (int s = 0; s < steps; ++s) {
    const auto before = state_of(c);
    const auto r = gradcomp_test::compress_step(c, views(g));
    if (!r) {
      CHECK(r.error() == errc::state_overflow);
      CHECK(state_of(c) == before);
      return true;
    }
    CHECK(all_finite(state_of(c)));
  }
  return false;
}

// The layout of the message tests: two compressed 8x8 weights and a dense bias of 8.
dgc_compressor<float> small_layout() {
  dgc_config cfg;
  dgc_compressor<float> c(cfg);
  c.add_tensor("w0", {8, 8});
  c.add_tensor("w1", {8, 8});
  c.add_tensor("bias", {8});
  return c;
}

const std::vector<std::uint32_t> kIdx0 = {1, 5, 60};
const std::vector<float> kVal0 = {0.5f, -1.0f, 2.0f};
const std::vector<std::uint32_t> kIdx1 = {7};
const std::vector<float> kVal1 = {3.0f};
const std::vector<float> kBias = {1, 2, 3, 4, 5, 6, 7, 8};
const std::vector<float> kDense64(64, 0.25f);

tensor_message<float> sparse(std::size_t t, const std::vector<std::uint32_t>& i, const std::vector<float>& v) {
  return tensor_message<float>{t, 64, false, {i.data(), i.size()}, {v.data(), v.size()}};
}
tensor_message<float> dense(std::size_t t, std::size_t n, const std::vector<float>& v) {
  return tensor_message<float>{t, n, true, {}, {v.data(), v.size()}};
}

std::vector<std::byte> encode_with_crc(const std::vector<tensor_message<float>>& m) {
  wire::encode_options opt;
  opt.checksum = true;
  return wire::encode(span<const tensor_message<float>>(m.data(), m.size()), opt);
}

// Rewrites the CRC-32C trailer after a test changed the message.
void reseal(std::vector<std::byte>& b) {
  const std::uint32_t crc = gradcomp::crc32c(span<const std::byte>(b.data(), b.size() - 4));
  for (int i = 0; i < 4; ++i) b[b.size() - 4 + i] = static_cast<std::byte>((crc >> (8 * i)) & 0xffu);
}

// Offsets of every section of a message.
std::vector<std::uint64_t> section_offsets(const std::vector<std::byte>& b) {
  std::vector<std::uint64_t> out;
  REQUIRE(wire::for_each_section(span<const std::byte>(b.data(), b.size()),
                                 [&](const wire::section_header& s) { out.push_back(s.offset); }));
  return out;
}

void set_u32(std::vector<std::byte>& b, std::uint64_t at, std::uint32_t x) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::byte>((x >> (8 * i)) & 0xffu);
}

result<void> add_bytes(dgc_aggregator<float>& a, const std::vector<std::byte>& b) {
  return a.add(span<const std::byte>(b.data(), b.size()));
}

}  // namespace

// ---- 1. Duplicate and missing sections ------------------------------------------------------

TEST_CASE("case 1: add(bytes) refuses a message carrying a tensor twice or lacking one; nothing is added or counted") {
  auto layout = small_layout();
  dgc_aggregator<float> agg(layout);
  agg.begin();
  const auto good = encode_with_crc({sparse(0, kIdx0, kVal0), sparse(1, kIdx1, kVal1), dense(2, 8, kBias)});
  REQUIRE(add_bytes(agg, good));
  const auto before = sums_of(agg);

  // The second section names tensor 0 again (same numel and form: only the id repeats).
  auto twice = good;
  set_u32(twice, section_offsets(twice)[1] + 8, 0);
  reseal(twice);
  CHECK(add_bytes(agg, twice).error() == errc::duplicate_tensor);
  CHECK(same_sums(sums_of(agg), before));

  // Tensor 1 is missing: the sums of tensors 0 and 2 must not change either.
  const auto missing = encode_with_crc({sparse(0, kIdx0, kVal0), dense(2, 8, kBias)});
  CHECK(add_bytes(agg, missing).error() == errc::missing_tensor);
  CHECK(same_sums(sums_of(agg), before));

  // Neither refused message was counted: one message in all, so finish(1) is the good one alone.
  CHECK(agg.finish(2).error() == errc::invalid_argument);
  REQUIRE(agg.finish(1));
  CHECK(agg.update(0)[5] == -1.0f);
  CHECK(agg.update(1)[7] == 3.0f);
  CHECK(agg.update(2)[7] == 8.0f * 1.0f);

  // The encoder refuses to write such a message in the first place.
  const std::vector<tensor_message<float>> dup = {sparse(1, kIdx1, kVal1), sparse(1, kIdx0, kVal0)};
  std::vector<std::byte> out(4096);
  CHECK(wire::encode(span<const tensor_message<float>>(dup.data(), dup.size()), wire::encode_options{},
                     span<std::byte>(out.data(), out.size()))
            .error() == errc::duplicate_tensor);
}

// ---- 2. Wrong form ----------------------------------------------------------------------------

TEST_CASE("case 2: add(bytes) refuses a dense section for a compressed tensor and a sparse one for a dense tensor") {
  auto layout = small_layout();
  dgc_aggregator<float> agg(layout);
  agg.begin();
  const auto before = sums_of(agg);
  const auto dense_for_compressed =
      encode_with_crc({dense(0, 64, kDense64), sparse(1, kIdx1, kVal1), dense(2, 8, kBias)});
  CHECK(add_bytes(agg, dense_for_compressed).error() == errc::layout_mismatch);
  const std::vector<std::uint32_t> bias_idx = {3};
  const std::vector<float> bias_val = {1.0f};
  const auto sparse_for_dense = encode_with_crc(
      {sparse(0, kIdx0, kVal0), sparse(1, kIdx1, kVal1),
       tensor_message<float>{2, 8, false, {bias_idx.data(), 1}, {bias_val.data(), 1}}});
  CHECK(add_bytes(agg, sparse_for_dense).error() == errc::layout_mismatch);
  CHECK(same_sums(sums_of(agg), before));
  // The same rule for in-process messages.
  CHECK(agg.add(dense(0, 64, kDense64)).error() == errc::layout_mismatch);
  CHECK(same_sums(sums_of(agg), before));
}

// ---- 3. Clipping norm overflow -----------------------------------------------------------------

TEST_CASE("case 3: a finite double gradient whose sum of squares overflows gets its true clip coefficient") {
  dgc_config cfg;
  cfg.clip_norm = 1.0;
  cfg.clipping = clip_scope::global_norm;
  cfg.schedule = warmup_schedule::constant(1.0);
  cfg.momentum_correction = false;
  dgc_compressor<double> c(cfg);
  c.add_tensor("w", {2, 2});
  c.add_tensor("b", {2});
  // Norms 2e155 and 1e155: their squares overflow double, the global norm sqrt(5) * 1e155 does not.
  const std::vector<std::vector<double>> g = {{1e155, -1e155, 1e155, -1e155}, {1e155, 0.0}};
  const auto r = gradcomp_test::compress_step(c, views(g));
  REQUIRE(r);
  const double expected = 1.0 / (std::sqrt(5.0) * 1e155);
  CHECK(r->clip_coefficient > 0.0);
  CHECK(r->clip_coefficient == doctest::Approx(expected).epsilon(1e-12));
  // The sent values are the clipped gradient, not zeros.
  const auto m = c.message(1);
  CHECK(m.values[0] == doctest::Approx(1e155 * expected).epsilon(1e-12));
  CHECK(m.values[0] > 0.4);
}

TEST_CASE("case 3: norms beyond the double range still give their clip coefficient, global and per tensor") {
  const double big = 1.5e308;
  for (const clip_scope scope : {clip_scope::global_norm, clip_scope::per_tensor}) {
    CAPTURE(static_cast<int>(scope));
    dgc_config cfg;
    cfg.clip_norm = 2.0;
    cfg.clipping = scope;
    cfg.schedule = warmup_schedule::constant(1.0);
    cfg.momentum_correction = false;
    // Three one-element tensors (each norm finite, the global norm sqrt(3) * 1.5e308 is not) and
    // a tensor whose own norm, sqrt(3) * 1.5e308, is beyond the double range.
    dgc_compressor<double> c(cfg);
    for (const char* name : {"a", "b", "c"}) c.add_tensor(name, {1, 1});
    c.add_tensor("d", {3, 1});
    const std::vector<std::vector<double>> g = {{big}, {-big}, {big}, {big, -big, big}};
    const auto r = gradcomp_test::compress_step(c, views(g));
    REQUIRE(r);
    const double global = std::sqrt(6.0) * big;  // the exact global norm, as a ratio below
    for (std::size_t t = 0; t < 4; ++t) {
      CAPTURE(t);
      const double norm_t = t < 3 ? big : std::sqrt(3.0) * big;
      const double expected = scope == clip_scope::global_norm ? 2.0 / global : 2.0 / norm_t;
      const double sent = c.message(t).values[0];
      CHECK(std::isfinite(sent));
      CHECK(sent / g[t][0] == doctest::Approx(expected).epsilon(1e-12));
      CHECK(sent != 0.0);
    }
  }
}

// ---- 4. Accumulator overflow -------------------------------------------------------------------

TEST_CASE("case 4: a step that would overflow momentum or residual is refused with state_overflow and no state change") {
  for (const momentum_kind kind : {momentum_kind::vanilla, momentum_kind::nesterov, momentum_kind::none}) {
    CAPTURE(static_cast<int>(kind));
    for (const bool clip : {false, true}) {
      CAPTURE(clip);
      dgc_config cfg;
      cfg.momentum_correction = kind != momentum_kind::none;
      cfg.nesterov = kind == momentum_kind::nesterov;
      cfg.clip_norm = clip ? 1e39 : 0.0;  // a threshold that does not bite: only the norm read
      cfg.schedule = warmup_schedule::constant(0.01);
      dgc_compressor<float> c(cfg);
      c.add_tensor("w", {64, 64});
      c.add_tensor("b", {64});
      std::vector<std::vector<float>> g = {std::vector<float>(4096, 1e37f), std::vector<float>(64, 1.0f)};
      // Steps of 1e37 everywhere: the accumulators grow by 1e37 (or more with momentum) per step
      // and overflow within a few dozen steps; no step may leave an infinity behind.
      CHECK(run_until_refused(c, g));
      // The refused step is not encoded (its message would repeat the last accepted step's),
      // and the compressor is not bricked: the state can be saved (the trainer can lower its
      // loss scale, skip the step or restart).
      std::vector<std::byte> out(c.max_message_bytes());
      CHECK(c.encode_message(wire::encode_options{}, span<std::byte>(out.data(), out.size())).error() ==
            errc::state_overflow);
      CHECK(save_snapshot(c).size() > 0);
    }
  }
}

TEST_CASE("case 4: the guard's exact pass lets a step through when the bound is loose but the state fits") {
  // One huge entry per step is always selected (density 1/64 keeps the 64 largest) and moved out,
  // and masking zeroes its momentum: the bounds grow past the largest float but the state stays
  // small, so every step must succeed with a finite state.
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(1.0 / 64.0);
  cfg.selection = selection_method::exact_topk;
  dgc_compressor<float> c(cfg);
  c.add_tensor("w", {64, 64});
  std::vector<std::vector<float>> g = {random_vector<float>(4096, dist::gaussian, 7)};
  for (int s = 0; s < 20; ++s) {
    g[0][100] = 3e38f;
    const auto r = gradcomp_test::compress_step(c, views(g));
    REQUIRE(r);
    CHECK(c.message(0).values.size() == 64);
    CHECK(all_finite(state_of(c)));
  }
}

TEST_CASE("case 4: double compressors refuse an overflowing step too") {
  dgc_config cfg;
  cfg.schedule = warmup_schedule::constant(1.0 / 16.0);
  dgc_compressor<double> c(cfg);
  c.add_tensor("w", {4, 4});
  const std::vector<std::vector<double>> g = {std::vector<double>(16, 1e307)};
  CHECK(run_until_refused(c, g));
}

// ---- 5. Aggregator sum overflow -------------------------------------------------------------

TEST_CASE("case 5: an add that would make a sum infinite is refused with nothing added") {
  auto layout = small_layout();
  dgc_aggregator<float> agg(layout);
  const std::vector<std::uint32_t> at = {5};
  const std::vector<float> big = {3e38f};
  const std::vector<float> small = {1.0f};
  agg.begin();
  const auto first = encode_with_crc({sparse(0, at, big), sparse(1, kIdx1, kVal1), dense(2, 8, kBias)});
  REQUIRE(add_bytes(agg, first));
  const auto before = sums_of(agg);
  CHECK(add_bytes(agg, first).error() == errc::state_overflow);
  CHECK(same_sums(sums_of(agg), before));
  CHECK(agg.add(sparse(0, at, big)).error() == errc::state_overflow);
  CHECK(same_sums(sums_of(agg), before));
  // Opposite signs cancel: the exact check lets it through.
  const std::vector<float> minus = {-3e38f};
  REQUIRE(agg.add(sparse(0, at, minus)));
  CHECK(agg.update(0)[5] == 0.0f);
  // Values elsewhere are fine after a refusal.
  REQUIRE(agg.add(sparse(1, at, small)));
  // In-process messages with a NaN or an infinity are refused too.
  const std::vector<float> inf = {std::numeric_limits<float>::infinity()};
  CHECK(agg.add(sparse(1, at, inf)).error() == errc::non_finite_input);
  const std::vector<std::uint32_t> unsorted = {5, 2};
  const std::vector<float> two = {1.0f, 1.0f};
  CHECK(agg.add(sparse(1, unsorted, two)).error() == errc::indices_not_increasing);
}

TEST_CASE("case 5: finish refuses receiver-side momentum that would overflow, modifying nothing") {
  dgc_config cfg;
  dgc_compressor<float> layout(cfg);
  layout.add_tensor("bias", {4});  // dense: the aggregator applies momentum 0.9
  dgc_aggregator<float> agg(layout);
  const std::vector<float> big = {3e38f, 0.0f, 1.0f, -3e38f};
  bool refused = false;
  for (int s = 0; s < 10 && !refused; ++s) {
    agg.begin();
    REQUIRE(agg.add(dense(0, 4, big)));
    const auto sums = sums_of(agg);
    const auto momentum = save_snapshot(agg, false);
    const auto r = agg.finish(1);
    if (!r) {
      CHECK(r.error() == errc::state_overflow);
      CHECK(same_sums(sums_of(agg), sums));
      CHECK(save_snapshot(agg, false) == momentum);
      refused = true;
    } else {
      for (const float x : agg.update(0)) CHECK(std::isfinite(x));
    }
  }
  CHECK(refused);
}

TEST_CASE("case 5: the bounds follow the update after finish, so an add before the next begin stays guarded") {
  dgc_config cfg;
  dgc_compressor<float> layout(cfg);
  layout.add_tensor("bias", {2});
  dgc_aggregator<float> agg(layout);
  agg.begin();
  const std::vector<float> big = {1e38f, 0.0f};
  REQUIRE(agg.add(dense(0, 2, big)));
  REQUIRE(agg.finish(1));  // the update is 1e38 (momentum 0.9 on a zero buffer)
  // Adding to the update without begin() is a misuse, but it must not make an infinity.
  const std::vector<float> more = {3e38f, 0.0f};
  const auto before = sums_of(agg);
  CHECK(agg.add(dense(0, 2, more)).error() == errc::state_overflow);
  CHECK(same_sums(sums_of(agg), before));
}

TEST_CASE("case 2: add(bytes) reports a section of another element count as layout_mismatch") {
  auto layout = small_layout();
  dgc_aggregator<float> agg(layout);
  agg.begin();
  const std::vector<float> nine(9, 1.0f);
  const auto wrong_numel = encode_with_crc({sparse(0, kIdx0, kVal0), sparse(1, kIdx1, kVal1), dense(2, 9, nine)});
  CHECK(add_bytes(agg, wrong_numel).error() == errc::layout_mismatch);
  const std::vector<float> seven(7, 1.0f);
  const auto fewer = encode_with_crc({sparse(0, kIdx0, kVal0), sparse(1, kIdx1, kVal1), dense(2, 7, seven)});
  CHECK(add_bytes(agg, fewer).error() == errc::layout_mismatch);
}

// ---- 6. Size arithmetic ----------------------------------------------------------------------

TEST_CASE("case 6: size queries report size_overflow instead of wrapping around") {
  const cpu_backend cpu;
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 8 + 3;  // n * 8 wraps
  CHECK(exact_topk_workspace_bytes<float>(cpu, huge, 10).error() == errc::size_overflow);
  CHECK(exact_topk_workspace_bytes<double>(cpu, std::size_t(1) << 32, 10).error() == errc::size_overflow);
  CHECK(sampled_threshold_workspace_bytes<float>(cpu, sampled_threshold_config{}, huge, 10).error() ==
        errc::size_overflow);
  CHECK(exact_topk_workspace_bytes<float>(cpu, 100, 101).error() == errc::k_exceeds_n);
  // The largest tensor a selection takes still has a size.
  CHECK(exact_topk_workspace_bytes<float>(cpu, 0xffffffffu, 1000).has_value());
  CHECK(wire::max_section_bytes(huge, 0, true, wire::encode_options{}).error() == errc::size_overflow);
  CHECK(wire::max_section_bytes(10, 11, false, wire::encode_options{}).error() == errc::kept_exceeds_numel);
  const std::vector<float> none;
  const tensor_message<float> m{0, huge, true, {}, {none.data(), 0}};
  CHECK(wire::max_encoded_bytes(span<const tensor_message<float>>(&m, 1), wire::encode_options{}).error() ==
        errc::size_overflow);
  // A compressor whose workspace for all threads would not fit size_t registers nothing.
  dgc_config cfg;
  cfg.threads = std::numeric_limits<std::size_t>::max() / 1024;
  cfg.schedule = warmup_schedule::constant(0.01);
  dgc_compressor<float> c(cfg);
  try {
    c.add_tensor("w", {4096, 4096});
    FAIL("add_tensor accepted a workspace beyond size_t");
  } catch (const gradcomp::error& e) {
    CHECK(e.code() == errc::size_overflow);
  }
  CHECK(c.num_tensors() == 0);
  CHECK(c.workspace_bytes() == 0);
}

// ---- 7. Counters a snapshot must keep ----------------------------------------------------------

TEST_CASE("case 7: step and epoch counters beyond 2^53 survive a snapshot exactly") {
  dgc_config cfg;
  cfg.seed = 0xfedcba9876543210ull;
  dgc_compressor<float> c(cfg);
  c.add_tensor("w", {16, 16});
  const std::size_t huge = (std::size_t(1) << 53) + 1;  // not representable as a double
  c.set_epoch(huge);
  const auto snap = save_snapshot(c);
  dgc_compressor<float> d(dgc_config{});
  d.add_tensor("w", {16, 16});
  REQUIRE(restore_snapshot(d, span<const std::byte>(snap.data(), snap.size())));
  CHECK(d.epoch() == huge);
  CHECK(d.config().seed == cfg.seed);

  // A step counter above 2^32 (its high word in the state section) comes back exactly too.
  auto forged = save_snapshot(c, false);
  const auto at = section_offsets(forged)[0] + wire::section_header_bytes + 8;  // word 1: step high
  const double high = 3.0;
  std::memcpy(forged.data() + at, &high, sizeof high);  // little-endian machines only
  REQUIRE(restore_snapshot(d, span<const std::byte>(forged.data(), forged.size())));
  CHECK(d.step() == (std::size_t(3) << 32));
}

TEST_CASE("case 7: snapshots of earlier releases (four state words) still restore") {
  dgc_config cfg;
  dgc_compressor<float> c(cfg);
  c.add_tensor("w", {16, 16});
  const auto g = random_vector<float>(256, dist::gaussian, 3);
  for (int s = 0; s < 3; ++s) REQUIRE(c.compress(std::vector<span<const float>>{{g.data(), g.size()}}));
  // Rebuild the snapshot with the legacy state section: step, epoch, seed low, seed high.
  const auto now = save_snapshot(c, false);
  const auto offsets = section_offsets(now);
  std::vector<std::byte> legacy(now.begin(), now.begin() + offsets[0]);
  const std::uint64_t state_bytes = wire::section_header_bytes + 4 * 8;
  legacy.resize(legacy.size() + state_bytes);
  std::memcpy(legacy.data() + offsets[0], now.data() + offsets[0], wire::section_header_bytes);
  const std::uint64_t sb = state_bytes;
  std::memcpy(legacy.data() + offsets[0], &sb, 8);
  set_u32(legacy, offsets[0] + 12, 4);  // numel
  set_u32(legacy, offsets[0] + 16, 4);  // kept
  const double words[4] = {3.0, 0.0, 0.0, 0.0};
  std::memcpy(legacy.data() + offsets[0] + wire::section_header_bytes, words, sizeof words);
  legacy.insert(legacy.end(), now.begin() + offsets[1], now.end());
  const std::uint64_t total = legacy.size();
  std::memcpy(legacy.data() + 16, &total, 8);
  dgc_compressor<float> d(cfg);
  d.add_tensor("w", {16, 16});
  REQUIRE(restore_snapshot(d, span<const std::byte>(legacy.data(), legacy.size())));
  CHECK(d.step() == 3);
  CHECK(state_of(d) == state_of(c));
}

// ---- 8. Copy and move across thread counts -----------------------------------------------------

TEST_CASE("case 8: copies and moves keep configuration, thread pool and workspace consistent") {
  auto make = [](std::size_t threads, std::size_t tensors, std::size_t side) {
    dgc_config cfg;
    cfg.threads = threads;
    dgc_compressor<float> c(cfg);
    for (std::size_t t = 0; t < tensors; ++t) c.add_tensor(std::string(1, static_cast<char>('a' + t)), {side, side});
    return c;
  };
  auto grads = [](const dgc_compressor<float>& c, std::uint64_t seed) {
    std::vector<std::vector<float>> g;
    for (std::size_t t = 0; t < c.num_tensors(); ++t)
      g.push_back(random_vector<float>(c.info(t).numel, dist::gaussian, seed + t));
    return g;
  };
  // The reference: the source's own next step.
  for (const std::size_t ta : {1, 2, 3, 4}) {
    for (const std::size_t tb : {1, 2, 3, 4}) {
      CAPTURE(ta);
      CAPTURE(tb);
      auto a = make(ta, 8, 128);
      REQUIRE(a.compress(views(grads(a, 1))));
      const auto next = grads(a, 2);
      auto expected = a;  // copy construction
      REQUIRE(expected.compress(views(next)));
      const auto want = state_of(expected);

      {  // copy assignment over a compressor that already ran with another thread count
        auto b = make(tb, 2, 16);
        REQUIRE(b.compress(views(grads(b, 9))));
        b = a;
        CHECK(b.config().threads == ta);
        REQUIRE(b.compress(views(next)));
        CHECK(state_of(b) == want);
      }
      {  // move assignment
        auto b = make(tb, 2, 16);
        REQUIRE(b.compress(views(grads(b, 9))));
        auto source = a;
        b = std::move(source);
        REQUIRE(b.compress(views(next)));
        CHECK(state_of(b) == want);
      }
      {  // move construction
        auto source = a;
        auto b(std::move(source));
        REQUIRE(b.compress(views(next)));
        CHECK(state_of(b) == want);
      }
    }
  }
}

// ---- 9. Configuration, settings recorded in snapshots -------------------------------------------

TEST_CASE("case 9: the configuration refuses enumerators outside their enums") {
  auto refuses = [](dgc_config cfg) {
    try {
      dgc_compressor<float> c(cfg);
    } catch (const gradcomp::error& e) {
      return e.code() == errc::invalid_argument;
    }
    return false;
  };
  dgc_config bad;
  bad.selection = static_cast<selection_method>(7);
  CHECK(refuses(bad));
  bad = dgc_config{};
  bad.clipping = static_cast<clip_scope>(2);
  CHECK(refuses(bad));
  bad = dgc_config{};
  bad.sampling.sampling = static_cast<sampling_mode>(9);
  CHECK(refuses(bad));
  CHECK_THROWS_AS(warmup_schedule::from_list({0.01}, static_cast<schedule_unit>(5)), gradcomp::error);
  dgc_compressor<float> c(dgc_config{});
  try {
    c.add_tensor("w", {4, 4}, static_cast<tensor_mode>(3));
    FAIL("add_tensor accepted a mode outside tensor_mode");
  } catch (const gradcomp::error& e) {
    CHECK(e.code() == errc::invalid_argument);
  }
  CHECK(c.num_tensors() == 0);
}

TEST_CASE("case 9: restore refuses a snapshot taken with other momentum, Nesterov or selection settings, naming the field") {
  auto trained = [](dgc_config cfg) {
    dgc_compressor<float> c(cfg);
    c.add_tensor("w", {16, 16});
    const auto g = random_vector<float>(256, dist::gaussian, 5);
    REQUIRE(c.compress(std::vector<span<const float>>{{g.data(), g.size()}}));
    return c;
  };
  struct variant {
    const char* field;
    void (*change)(dgc_config&);
  };
  const variant variants[] = {
      {"momentum_correction", [](dgc_config& c) { c.momentum_correction = false; }},
      {"nesterov", [](dgc_config& c) { c.nesterov = true; }},
      {"selection", [](dgc_config& c) { c.selection = selection_method::exact_topk; }},
  };
  for (const auto& v : variants) {
    CAPTURE(v.field);
    dgc_config other;
    v.change(other);
    const auto source = trained(dgc_config{});
    const auto snap = save_snapshot(source);
    auto target = trained(other);
    const auto before = state_of(target);
    const auto r = restore_snapshot(target, span<const std::byte>(snap.data(), snap.size()));
    CHECK(r.error() == errc::config_mismatch);
    CHECK(std::string(r.detail()) == v.field);
    CHECK_THROWS_WITH_AS(r.value(), doctest::Contains(v.field), gradcomp::error);
    CHECK(state_of(target) == before);
  }
  // Settings that the state does not depend on may change.
  dgc_config other;
  other.momentum = 0.5;
  other.clip_norm = 3.0;
  auto target = trained(other);
  const auto snap = save_snapshot(trained(dgc_config{}));
  CHECK(restore_snapshot(target, span<const std::byte>(snap.data(), snap.size())));
  // Without momentum correction the sender's state does not depend on the Nesterov setting.
  dgc_config plain;
  plain.momentum_correction = false;
  dgc_config plain_nesterov = plain;
  plain_nesterov.nesterov = true;
  const auto ef = save_snapshot(trained(plain));
  auto ef_target = trained(plain_nesterov);
  CHECK(restore_snapshot(ef_target, span<const std::byte>(ef.data(), ef.size())));
}

TEST_CASE("a momentum is checked in the value type that uses it: one that rounds to 1 as a float is refused") {
  // 0.99999999 is below 1 as a double and 1 as a float: a float compressor or receiver would have
  // run with momentum 1 (never forgetting), while a double one keeps it.
  dgc_config cfg;
  cfg.momentum = 0.99999999;
  REQUIRE(static_cast<float>(cfg.momentum) == 1.0f);
  CHECK_THROWS_AS(dgc_compressor<float>{cfg}, gradcomp::error);
  CHECK_NOTHROW(dgc_compressor<double>{cfg});
  receiver_layout r;
  r.momentum = 0.99999999;
  CHECK_THROWS_AS(aggregator<float>{r}, gradcomp::error);
  CHECK_NOTHROW(aggregator<double>{r});
}
