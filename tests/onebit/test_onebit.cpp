// 1-bit SGD with error feedback (docs/algorithms.md, "1-bit SGD"): every message and residual
// against an independent reference, bit for bit, over many steps (matrices taller than a block of
// rows, a vector, a 4-d kernel); column sums kept (exactly where the means are exact, within the
// rounding of the two means otherwise); the values in their sets; any thread count; refusals;
// tensors sent whole; the wire message and the aggregator; bad configurations.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include "support/quantiser_helpers.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace gradcomp;
using gradcomp_test::bytes;
using gradcomp_test::same_bits;
using gradcomp_test::tensor_name;
using gradcomp_test::views;

static_assert(is_compressor_v<onebit_sgd_compressor<float>>, "1-bit SGD has the common interface");
static_assert(is_compressor_v<onebit_sgd_compressor<double>>, "1-bit SGD has the common interface");

namespace {

// Rows above one block (256), a vector of four blocks, a 4-d kernel, a small matrix.
const std::vector<std::vector<std::size_t>> kShapes = {{700, 3}, {1000}, {16, 3, 3, 3}, {6, 7}};

std::size_t numel_of(const std::vector<std::size_t>& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

std::size_t columns_of(const std::vector<std::size_t>& s) {
  std::size_t c = 1;
  for (std::size_t d = 1; d < s.size(); ++d) c *= s[d];
  return c;
}

// Gaussian gradients with a per-column offset (so that the columns' means differ) and outliers.
template <class T>
std::vector<std::vector<T>> gradients(std::size_t step, std::uint64_t worker = 0) {
  std::vector<std::vector<T>> g;
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    std::mt19937_64 rng(7919 * step + 31 * t + 104729 * worker + 5);
    std::normal_distribution<double> normal(0.0, 1.0);
    const std::size_t n = numel_of(kShapes[t]), cols = columns_of(kShapes[t]);
    std::vector<T> v(n);
    for (std::size_t j = 0; j < n; ++j)
      v[j] = static_cast<T>(normal(rng) + 0.3 * static_cast<double>(j % cols % 5) - 0.5);
    for (std::size_t j = step % 11; j < n; j += 389) v[j] *= T(30);
    g.push_back(std::move(v));
  }
  return g;
}

template <class T>
onebit_sgd_compressor<T> make(onebit_sgd_config cfg, std::size_t dense = SIZE_MAX) {
  onebit_sgd_compressor<T> c(cfg);
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    c.add_tensor(tensor_name(t), kShapes[t], t == dense ? tensor_mode::dense : tensor_mode::automatic);
  return c;
}

// The reference: v = g + r; per column, the sums of its negative and non-negative elements in
// double over blocks of 256 rows (each in row order, the blocks in order), the means rounded to
// binary32 (-0 / +0 for an empty side); sent = the mean of v's side; r = v - sent.
template <class T>
std::vector<T> reference_step(const std::vector<T>& g, std::vector<T>& r, std::size_t cols) {
  const std::size_t rows = g.size() / cols;
  std::vector<T> sent(g.size());
  for (std::size_t c = 0; c < cols; ++c) {
    double neg = 0.0, pos = 0.0;
    std::size_t negatives = 0;
    for (std::size_t b0 = 0; b0 < rows; b0 += 256) {
      double block_neg = 0.0, block_pos = 0.0;
      for (std::size_t row = b0; row < std::min(rows, b0 + 256); ++row) {
        const T v = static_cast<T>(g[row * cols + c] + r[row * cols + c]);
        if (v < T(0)) {
          block_neg += static_cast<double>(v);
          ++negatives;
        } else {
          block_pos += static_cast<double>(v);
        }
      }
      neg += block_neg;
      pos += block_pos;
    }
    const float mean_neg = negatives != 0 ? static_cast<float>(neg / static_cast<double>(negatives)) : -0.0f;
    const float mean_pos = negatives != rows ? static_cast<float>(pos / static_cast<double>(rows - negatives)) : 0.0f;
    for (std::size_t row = 0; row < rows; ++row) {
      const std::size_t j = row * cols + c;
      const T v = static_cast<T>(g[j] + r[j]);
      sent[j] = v < T(0) ? static_cast<T>(mean_neg) : static_cast<T>(mean_pos);
      r[j] = static_cast<T>(v - sent[j]);
    }
  }
  return sent;
}

}  // namespace

TEST_CASE_TEMPLATE("1-bit SGD: every message and residual is the documented one, bit for bit, over 25 steps", T, float,
                   double) {
  auto c = make<T>(onebit_sgd_config{});
  std::vector<std::vector<T>> r(kShapes.size());
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    r[t].assign(numel_of(kShapes[t]), T(0));
    CHECK(c.columns(t) == columns_of(kShapes[t]));
  }
  for (std::size_t s = 0; s < 25; ++s) {
    CAPTURE(s);
    const auto g = gradients<T>(s);
    REQUIRE(c.compress(views(g)));
    REQUIRE(c.stats());
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      CAPTURE(t);
      const auto want = reference_step(g[t], r[t], columns_of(kShapes[t]));
      CHECK(same_bits(c.message(t).values, want));
      CHECK(same_bits(c.error_feedback(t), r[t]));
    }
  }
  CHECK(c.step() == 25);
}

TEST_CASE("1-bit SGD: each column sends two values, its negative and non-negative means, and keeps its sum") {
  auto c = make<float>(onebit_sgd_config{});
  std::vector<std::vector<float>> before(kShapes.size());
  for (std::size_t t = 0; t < kShapes.size(); ++t) before[t].assign(numel_of(kShapes[t]), 0.0f);
  for (std::size_t s = 0; s < 6; ++s) {
    const auto g = gradients<float>(s);
    REQUIRE(c.compress(views(g)));
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      const std::size_t cols = columns_of(kShapes[t]), n = g[t].size();
      const auto sent = c.message(t).values;
      for (std::size_t col = 0; col < cols; ++col) {
        // The column's values: one below 0 for every negative v, one >= 0 for the others.
        long double exact = 0.0L, sent_sum = 0.0L, bound = 0.0L, magnitude = 0.0L;
        float neg = 0.0f, pos = 0.0f;
        bool seen_neg = false, seen_pos = false;
        for (std::size_t j = col; j < n; j += cols) {
          const float v = g[t][j] + before[t][j];
          exact += v;
          magnitude += std::fabs(v);
          sent_sum += sent[j];
          if (v < 0.0f) {
            CHECK(std::signbit(sent[j]));
            if (seen_neg) CHECK(sent[j] == neg);
            neg = sent[j];
            seen_neg = true;
          } else {
            CHECK(!std::signbit(sent[j]));
            if (seen_pos) CHECK(sent[j] == pos);
            pos = sent[j];
            seen_pos = true;
          }
          // The rounding of a mean to binary32, repeated for each element that sends it.
          bound += std::ldexp(static_cast<long double>(std::fabs(sent[j])), -24);
        }
        // Plus the sums' own rounding in double (at most 1000 terms).
        CHECK(std::fabs(sent_sum - exact) <= bound + 1e-12L * magnitude);
      }
      before[t].assign(c.error_feedback(t).begin(), c.error_feedback(t).end());
    }
  }
}

TEST_CASE_TEMPLATE("1-bit SGD: where the means are exact, every column sum is kept exactly", T, float, double) {
  // Integer columns whose negative and non-negative sides each sum to a multiple of their count.
  onebit_sgd_compressor<T> c(onebit_sgd_config{});
  const std::size_t rows = 600, cols = 5;
  c.add_tensor("w", {rows, cols});
  std::mt19937_64 rng(3);
  std::vector<T> g(rows * cols);
  for (std::size_t col = 0; col < cols; ++col) {
    long long neg = 0, pos = 0, negatives = 0, others = 0;
    std::size_t last_neg = 0, last_pos = 0;
    for (std::size_t row = 0; row < rows; ++row) {
      const long long x = static_cast<long long>(rng() % 41) - 20;
      g[row * cols + col] = static_cast<T>(x);
      if (x < 0) {
        neg += x;
        ++negatives;
        last_neg = row;
      } else {
        pos += x;
        ++others;
        last_pos = row;
      }
    }
    // Move the remainders onto the last element of each side (which keeps its side).
    g[last_neg * cols + col] -= static_cast<T>(((neg % negatives) + negatives) % negatives);
    g[last_pos * cols + col] += static_cast<T>((others - pos % others) % others);
  }
  REQUIRE(c.compress({span<const T>(g.data(), g.size())}));
  const auto sent = c.message(0).values;
  for (std::size_t col = 0; col < cols; ++col) {
    double want = 0.0, got = 0.0;
    for (std::size_t row = 0; row < rows; ++row) {
      want += static_cast<double>(g[row * cols + col]);
      got += static_cast<double>(sent[row * cols + col]);
    }
    CHECK(got == want);
  }
  // And the residual is then 0 on average in every column.
  for (std::size_t col = 0; col < cols; ++col) {
    double sum = 0.0;
    for (std::size_t row = 0; row < rows; ++row) sum += static_cast<double>(c.error_feedback(0)[row * cols + col]);
    CHECK(sum == 0.0);
  }
}

TEST_CASE("1-bit SGD: the same bits for any thread count") {
  onebit_sgd_config one, three;
  three.threads = 3;
  auto a = make<float>(one), b = make<float>(three);
  for (std::size_t s = 0; s < 5; ++s) {
    const auto g = gradients<float>(s);
    REQUIRE(a.compress(views(g)));
    REQUIRE(b.compress(views(g)));
    for (std::size_t t = 0; t < kShapes.size(); ++t) {
      CHECK(same_bits(a.message(t).values, std::vector<float>(b.message(t).values.begin(), b.message(t).values.end())));
      CHECK(same_bits(a.error_feedback(t),
                      std::vector<float>(b.error_feedback(t).begin(), b.error_feedback(t).end())));
    }
  }
}

TEST_CASE("1-bit SGD: a NaN, an infinity or an overflow refuses the step and changes nothing") {
  auto c = make<float>(onebit_sgd_config{});
  const auto g = gradients<float>(0);
  REQUIRE(c.compress(views(g)));
  const std::vector<float> sent(c.message(0).values.begin(), c.message(0).values.end());
  const std::vector<float> residual(c.error_feedback(0).begin(), c.error_feedback(0).end());
  auto unchanged = [&] {
    CHECK(same_bits(c.message(0).values, sent));
    CHECK(same_bits(c.error_feedback(0), residual));
  };
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto b = gradients<float>(1);
    b[2][5] = bad;
    REQUIRE(c.compress(views(b)));
    CHECK(c.stats().error() == errc::non_finite_input);
    CHECK(c.encode_message({}, span<std::byte>()).error() == errc::non_finite_input);
    unchanged();
  }
  CHECK(c.step() == 1);
  // g + r beyond binary32: the largest float, sent as a quarter of itself, leaves three quarters
  // behind; the same gradient again overflows v.
  onebit_sgd_compressor<float> o(onebit_sgd_config{});
  o.add_tensor("w", {4});
  const std::vector<float> big = {std::numeric_limits<float>::max(), 1, 1, 1};
  REQUIRE(o.compress({span<const float>(big.data(), big.size())}));
  REQUIRE(o.stats());
  const std::vector<float> kept(o.error_feedback(0).begin(), o.error_feedback(0).end());
  REQUIRE(o.compress({span<const float>(big.data(), big.size())}));
  CHECK(o.stats().error() == errc::state_overflow);
  CHECK(same_bits(o.error_feedback(0), kept));
  CHECK(o.step() == 1);
  // A mean beyond binary32 (double gradients only).
  onebit_sgd_compressor<double> d(onebit_sgd_config{});
  d.add_tensor("w", {4});
  const std::vector<double> huge = {1e300, 1, -1, 0};
  REQUIRE(d.compress({span<const double>(huge.data(), huge.size())}));
  CHECK(d.stats().error() == errc::state_overflow);
  CHECK(d.compress({span<const double>(huge.data(), 3)}).error() == errc::size_mismatch);
  CHECK(d.compress(std::vector<span<const double>>{}).error() == errc::wrong_tensor_count);
}

TEST_CASE("1-bit SGD: the wire message is one bit per element plus two values per column; tensors sent whole carry g") {
  onebit_sgd_config cfg;
  cfg.momentum = 0.5;
  auto a = make<float>(cfg, 1), b = make<float>(cfg, 1);
  const auto ga = gradients<float>(4), gb = gradients<float>(5, 1);
  REQUIRE(a.compress(views(ga)));
  REQUIRE(b.compress(views(gb)));
  CHECK(a.message(1).coding == wire::value_coding::unspecified);
  CHECK(same_bits(a.message(1).values, ga[1]));
  CHECK(a.error_feedback(1).empty());
  CHECK(a.columns(1) == 1);
  CHECK(a.message(0).coding == wire::value_coding::one_bit);
  CHECK(a.message(0).parameters.columns == 3);
  const auto r = a.receiver();
  CHECK(r.momentum == 0.5);
  for (const auto& t : r.tensors) CHECK((t.dense && t.momentum));
  wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> ma(a.max_message_bytes(opt)), mb(b.max_message_bytes(opt));
  const auto na = a.encode_message(opt, span<std::byte>(ma.data(), ma.size()));
  const auto nb = b.encode_message(opt, span<std::byte>(mb.data(), mb.size()));
  REQUIRE(na);
  REQUIRE(nb);
  std::size_t expected = wire::message_header_bytes + wire::checksum_bytes;
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    const std::size_t n = numel_of(kShapes[t]);
    expected += wire::section_header_bytes + (t == 1 ? 4 * n : 4 + 8 * columns_of(kShapes[t]) + (n + 7) / 8);
  }
  CHECK(*na == expected);
  CHECK(*na == ma.size());
  const auto decoded = wire::decode<float>(span<const std::byte>(ma.data(), *na));
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    CHECK(same_bits(a.message(t).values, decoded[t].values));
    if (t != 1) CHECK(decoded[t].header.parameters.columns == columns_of(kShapes[t]));
  }
  // The aggregator (no momentum here, to read the average itself) sums what was sent.
  auto layout = a.receiver();
  layout.momentum = 0.0;
  aggregator<float> agg(layout);
  agg.begin();
  REQUIRE(agg.add(span<const std::byte>(ma.data(), *na)));
  REQUIRE(agg.add(span<const std::byte>(mb.data(), *nb)));
  REQUIRE(agg.finish(2));
  for (std::size_t t = 0; t < kShapes.size(); ++t) {
    const auto x = a.message(t).values, y = b.message(t).values, u = agg.update(t);
    for (std::size_t i = 0; i < u.size(); ++i) REQUIRE(u[i] == (x[i] + y[i]) * 0.5f);
  }
}

TEST_CASE("1-bit SGD: a tensor's shape decides its columns") {
  onebit_sgd_compressor<float> c(onebit_sgd_config{});
  CHECK(c.columns(c.add_tensor("vector", {10})) == 1);
  CHECK(c.columns(c.add_tensor("matrix", {10, 4})) == 4);
  CHECK(c.columns(c.add_tensor("kernel", {8, 2, 3, 3})) == 18);
  CHECK(c.columns(c.add_tensor("scalar", {})) == 1);
  CHECK(c.columns(c.add_tensor("empty", {0, 5})) == 5);
  CHECK(c.columns(c.add_tensor("nothing", {5, 0})) == 1);
  // The same elements as one column: the whole tensor shares two values.
  CHECK(c.columns(c.add_tensor("flat", {40})) == 1);
  CHECK_THROWS_AS(c.add_tensor("matrix", {2, 2}), error);
  CHECK(c.num_tensors() == 7);
  std::vector<std::vector<float>> g = {std::vector<float>(10, 1.0f), std::vector<float>(40, -2.0f),
                                       std::vector<float>(144, 0.5f), std::vector<float>(1, 3.0f),
                                       std::vector<float>(), std::vector<float>(), std::vector<float>(40, 1.0f)};
  g[1][3] = 6.0f;
  REQUIRE(c.compress(views(g)));
  REQUIRE(c.stats());
  // Column 3 of the matrix holds -2 (9 times) and 6 (once); the others only -2.
  const auto m = c.message(1).values;
  CHECK(m[3] == 6.0f);
  CHECK(m[7] == -2.0f);
  std::vector<std::byte> out(c.max_message_bytes());
  REQUIRE(c.encode_message({}, span<std::byte>(out.data(), out.size())));
}

TEST_CASE("1-bit SGD: bad configurations are refused") {
  auto refused = [](const onebit_sgd_config& cfg) { return gradcomp_test::refuses<onebit_sgd_compressor<float>>(cfg); };
  onebit_sgd_config cfg;
  cfg.momentum = 1.0;
  CHECK(refused(cfg));
  cfg.momentum = -0.1;
  CHECK(refused(cfg));
  cfg = onebit_sgd_config{};
  cfg.threads = 0;
  CHECK(refused(cfg));
  cfg = onebit_sgd_config{};
  cfg.momentum_form = momentum_kind::none;
  CHECK(refused(cfg));
  CHECK(!refused(onebit_sgd_config{}));
}

// ---- snapshots ----

TEST_CASE_TEMPLATE("1-bit SGD snapshot: restore and continue bitwise; an EF-SignSGD snapshot or damage change nothing",
                   T, float, double) {
  // EF-SignSGD has the same sections (one error buffer per compressed tensor), but another
  // quantity in them: the recorded method tells them apart, both ways.
  ef_signsgd_compressor<T> ef(ef_signsgd_config{});
  for (std::size_t t = 0; t < kShapes.size(); ++t)
    ef.add_tensor(tensor_name(t), kShapes[t], t == 1 ? tensor_mode::dense : tensor_mode::automatic);
  // The state section and the residuals of the quantised tensors (tensor 1 goes whole).
  gradcomp_test::check_residual_snapshot(
      [] { return make<T>(onebit_sgd_config{}, 1); },
      [](auto& c, std::size_t s) { return gradcomp_test::encoded_step(c, gradients<T>(s)); }, 3, ef);
}

TEST_CASE("1-bit SGD snapshot: a compressor with another split of the tensors refuses it") {
  auto c = make<float>(onebit_sgd_config{}, 1);
  (void)gradcomp_test::encoded_step(c, gradients<float>(0));
  auto all = make<float>(onebit_sgd_config{});
  CHECK(restore_snapshot(all, bytes(save_snapshot(c))).error() == errc::layout_mismatch);
}
