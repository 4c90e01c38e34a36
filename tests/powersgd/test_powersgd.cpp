// powersgd_compressor: PyTorch's own hook reproduced from its inputs (tests/powersgd/data, written
// by make_torch_vectors.py), and the properties the algorithm promises: with r = n <= m the update
// is the workers' mean, error feedback conserves M, every worker holds the same bits, refused
// calls change nothing. Every round travels as its wire message and is averaged by an aggregator
// of the round's layout, which refuses the other round's messages and gradient messages.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/aggregator.hpp>
#include <gradcomp/powersgd/compressor.hpp>
#include <gradcomp/wire/decode.hpp>

#include "powersgd/rounds.hpp"
#include "thrust/data.hpp"

namespace {

using gradcomp::errc;
using gradcomp::span;

std::string source_dir() {
  const std::string f = __FILE__;
  const auto at = f.rfind("tests");
  return at == 0 || at == std::string::npos ? std::string(".") : f.substr(0, at - 1);
}

// One file of test vectors (the format is make_torch_vectors.py's).
struct torch_vectors {
  gradcomp::powersgd_config cfg;
  std::size_t workers = 0;
  std::size_t steps = 0;
  struct tensor {
    std::string name;
    std::size_t rows = 0, cols = 0, rank = 0;
    bool compressed = false;
  };
  std::vector<tensor> tensors;
  std::map<std::size_t, std::map<std::string, std::vector<float>>> q;                 // step -> name
  std::map<std::size_t, std::map<std::size_t, std::map<std::string, std::vector<float>>>> grad;  // step, worker
  std::map<std::size_t, std::map<std::string, std::vector<float>>> out;               // step -> name
};

std::vector<float> read_values(std::istringstream& in) {
  std::vector<float> v;
  std::string word;
  while (in >> word) v.push_back(std::stof(word));
  return v;
}

torch_vectors load(const std::string& stem) {
  const std::string path = source_dir() + "/tests/powersgd/data/torch_powersgd_" + stem + ".txt";
  std::ifstream file(path);
  REQUIRE_MESSAGE(file.good(), "cannot open " << path);
  torch_vectors tv;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string kind;
    in >> kind;
    if (kind == "config") {
      std::string key;
      double value = 0;
      while (in >> key >> value) {
        if (key == "rank") tv.cfg.rank = static_cast<std::size_t>(value);
        if (key == "start_iter") tv.cfg.start_step = static_cast<std::size_t>(value);
        if (key == "min_compression_rate") tv.cfg.min_compression_rate = value;
        if (key == "error_feedback") tv.cfg.error_feedback = value != 0;
        if (key == "warm_start") tv.cfg.warm_start = value != 0;
        if (key == "workers") tv.workers = static_cast<std::size_t>(value);
        if (key == "steps") tv.steps = static_cast<std::size_t>(value);
      }
    } else if (kind == "tensor") {
      torch_vectors::tensor t;
      int compressed = 0;
      in >> t.name >> t.rows >> t.cols >> t.rank >> compressed;
      t.compressed = compressed != 0;
      tv.tensors.push_back(t);
    } else if (kind == "q") {
      std::size_t step = 0;
      std::string name;
      in >> step >> name;
      tv.q[step][name] = read_values(in);
    } else if (kind == "grad") {
      std::size_t step = 0, worker = 0;
      std::string name;
      in >> step >> worker >> name;
      tv.grad[step][worker][name] = read_values(in);
    } else if (kind == "out") {
      std::size_t step = 0;
      std::string name;
      in >> step >> name;
      tv.out[step][name] = read_values(in);
    }
  }
  REQUIRE(tv.steps > tv.cfg.start_step);
  REQUIRE(!tv.tensors.empty());
  return tv;
}

using gradcomp_test::round_message;

// Workers that run a step together (tests/powersgd/rounds.hpp).
template <class T>
struct group {
  std::vector<gradcomp::powersgd_compressor<T>> workers;

  group(const gradcomp::powersgd_config& cfg, std::size_t n) {
    for (std::size_t w = 0; w < n; ++w) workers.emplace_back(cfg);
  }
  void add(const std::string& name, std::vector<std::size_t> shape) {
    for (auto& c : workers) c.add_tensor(name, shape);
  }
  void step(const std::vector<std::vector<std::vector<T>>>& grads) { gradcomp_test::step_together(workers, grads); }
};

double largest_relative_difference(span<const float> ours, const std::vector<float>& theirs) {
  REQUIRE(ours.size() == theirs.size());
  double scale = 1.0, worst = 0.0;
  for (const float x : theirs) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (std::size_t i = 0; i < ours.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(ours[i]) - static_cast<double>(theirs[i])) / scale);
  return worst;
}

// Reproduces one file: the same tensors, the hook's draws of Q, every step's gradients; every
// output within `tolerance` of the hook's (relative to the tensor's largest magnitude), the dense
// steps bitwise.
void reproduce(const std::string& stem, double tolerance) {
  const torch_vectors tv = load(stem);
  group<float> g(tv.cfg, tv.workers);
  for (const auto& t : tv.tensors) g.add(t.name, {t.rows, t.cols});
  for (std::size_t id = 0; id < tv.tensors.size(); ++id) {
    CAPTURE(tv.tensors[id].name);
    CHECK(g.workers[0].info(id).compressed == tv.tensors[id].compressed);
    if (tv.tensors[id].compressed) CHECK(g.workers[0].rank(id) == tv.tensors[id].rank);
  }
  double worst = 0.0;
  for (std::size_t step = 0; step < tv.steps; ++step) {
    CAPTURE(step);
    if (tv.q.count(step) != 0)
      for (std::size_t id = 0; id < tv.tensors.size(); ++id) {
        if (!tv.tensors[id].compressed) continue;
        const auto& q = tv.q.at(step).at(tv.tensors[id].name);
        for (auto& c : g.workers) REQUIRE(c.set_q(id, span<const float>(q.data(), q.size())));
      }
    std::vector<std::vector<std::vector<float>>> grads(tv.workers);
    for (std::size_t w = 0; w < tv.workers; ++w)
      for (const auto& t : tv.tensors) grads[w].push_back(tv.grad.at(step).at(w).at(t.name));
    g.step(grads);
    for (std::size_t id = 0; id < tv.tensors.size(); ++id) {
      CAPTURE(tv.tensors[id].name);
      const auto ours = g.workers[0].update(id);
      const auto& theirs = tv.out.at(step).at(tv.tensors[id].name);
      for (std::size_t w = 1; w < g.workers.size(); ++w) {
        const auto other = g.workers[w].update(id);
        CHECK(std::equal(ours.begin(), ours.end(), other.begin()));  // every worker, the same bits
      }
      if (step < tv.cfg.start_step) {
        CHECK(std::equal(ours.begin(), ours.end(), theirs.begin()));  // a dense step: a sum and a division
      } else {
        const double d = largest_relative_difference(ours, theirs);
        worst = std::max(worst, d);
        CHECK(d <= tolerance);
      }
    }
  }
  MESSAGE(stem << ": largest difference from PyTorch's hook " << worst << " (relative)");
}

}  // namespace

TEST_CASE("powersgd: PyTorch's powerSGD_hook reproduced from its own inputs and draws") {
  // Not bitwise: PyTorch multiplies in float32 with its own order of products (and orthogonalises
  // rank 4 by Householder QR, whose columns may differ in sign from Gram-Schmidt's: P P^T, and so
  // the update, does not depend on them); gradcomp sums in double and rounds once.
  reproduce("rank1", 1e-5);
  reproduce("rank2", 1e-5);
  reproduce("rank4", 1e-5);
  reproduce("rank2_no_feedback_cold", 1e-5);
  // The hook with batch_tensors_with_same_shape: fc1 and fc4 (12 x 40) go through one batched
  // product there; gradcomp, which has no such option, reproduces it as it is (batching changes
  // how the hook launches its products, not what they compute).
  reproduce("rank2_batched", 1e-5);
}

using gradcomp_test::gaussian;

TEST_CASE("powersgd: with r = n <= m the update is the workers' mean") {
  // P (n x n, orthogonal after the sum) spans every row: P P^T M is M.
  gradcomp::powersgd_config cfg;
  cfg.rank = 6;
  cfg.min_compression_rate = 0.1;  // compress the 6 x 40 matrix at full rank
  group<double> g(cfg, 3);
  g.add("w", {6, 40});
  REQUIRE(g.workers[0].info(0).compressed);
  REQUIRE(g.workers[0].rank(0) == 6);
  std::vector<std::vector<std::vector<double>>> grads(3);
  std::vector<double> mean(240, 0.0);
  for (std::size_t w = 0; w < 3; ++w) {
    const auto f = gaussian<float>(240, 40 + w);
    grads[w].push_back(std::vector<double>(f.begin(), f.end()));
    for (std::size_t i = 0; i < 240; ++i) mean[i] += grads[w][0][i] / 3.0;
  }
  g.step(grads);
  const auto u = g.workers[0].update(0);
  for (std::size_t i = 0; i < 240; ++i) CHECK(u[i] == doctest::Approx(mean[i]).epsilon(1e-9));
  // With rank 1 it is not: a guard that the check above can fail.
  cfg.rank = 1;
  group<double> low(cfg, 3);
  low.add("w", {6, 40});
  low.step(grads);
  double off = 0.0;
  for (std::size_t i = 0; i < 240; ++i) off = std::max(off, std::fabs(low.workers[0].update(0)[i] - mean[i]));
  CHECK(off > 0.1);
}

TEST_CASE("powersgd: error feedback keeps M = e + P Q^T, for every worker's own M") {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  group<float> g(cfg, 2);
  g.add("conv", {8, 3, 3, 3});
  g.add("bias", {8});
  REQUIRE(g.workers[0].info(0).compressed);
  REQUIRE(!g.workers[0].info(1).compressed);
  std::vector<std::vector<float>> e_old(2, std::vector<float>(216, 0.0f));
  for (std::uint64_t step = 0; step < 4; ++step) {
    std::vector<std::vector<std::vector<float>>> grads(2);
    for (std::size_t w = 0; w < 2; ++w)
      grads[w] = {gaussian<float>(216, 100 * step + w), gaussian<float>(8, 7 + step + w)};
    g.step(grads);
    for (std::size_t w = 0; w < 2; ++w) {
      const auto e = g.workers[w].error_feedback(0);
      const auto u = g.workers[w].update(0);
      for (std::size_t i = 0; i < 216; ++i) {
        const float m = grads[w][0][i] + e_old[w][i];
        // e is M - u rounded once: within half an ulp of M's magnitude.
        CHECK(std::fabs(static_cast<double>(e[i]) + u[i] - m) <= std::ldexp(std::fabs(m) + std::fabs(u[i]), -24));
      }
      e_old[w].assign(e.begin(), e.end());
    }
    // The bias is summed dense: its average, exactly.
    for (std::size_t i = 0; i < 8; ++i) CHECK(g.workers[0].update(1)[i] == (grads[0][1][i] + grads[1][1][i]) / 2.0f);
  }
}

TEST_CASE("powersgd: refused calls change nothing") {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  group<float> a(cfg, 2), b(cfg, 2);
  a.add("w", {12, 40});
  b.add("w", {12, 40});
  std::vector<std::vector<std::vector<float>>> grads{{gaussian<float>(480, 1)}, {gaussian<float>(480, 2)}};
  auto bad = grads[0][0];
  bad[17] = std::nanf("");
  auto& c = a.workers[0];
  const span<const float> bad_view(bad.data(), bad.size());
  CHECK(c.begin_step(span<const span<const float>>(&bad_view, 1)).error() == errc::non_finite_input);
  CHECK(c.end_round(span<const float>()).error() == errc::invalid_argument);  // no step open
  CHECK(c.begin_step(span<const span<const float>>()).error() == errc::wrong_tensor_count);
  const span<const float> short_view(bad.data(), 10);
  CHECK(c.begin_step(span<const span<const float>>(&short_view, 1)).error() == errc::size_mismatch);
  // An average with a NaN (a peer's garbage) closes the step; the workers begin it again.
  const span<const float> good(grads[0][0].data(), 480);
  auto p = c.begin_step(span<const span<const float>>(&good, 1));
  REQUIRE(p);
  CHECK(c.begin_step(span<const span<const float>>(&good, 1)).error() == errc::invalid_argument);  // open
  std::vector<float> garbage(p->size(), 1.0f);
  garbage[3] = std::numeric_limits<float>::infinity();
  CHECK(c.end_round(span<const float>(garbage.data(), garbage.size())).error() == errc::non_finite_input);
  CHECK(c.end_round(span<const float>(garbage.data(), 3)).error() == errc::invalid_argument);  // closed
  CHECK(c.step() == 0);
  // After all that, two steps give the bits of workers that never saw a refusal.
  for (int k = 0; k < 2; ++k) {
    a.step(grads);
    b.step(grads);
    const auto ua = a.workers[0].update(0), ub = b.workers[0].update(0);
    CHECK(std::equal(ua.begin(), ua.end(), ub.begin()));
    const auto ea = a.workers[1].error_feedback(0), eb = b.workers[1].error_feedback(0);
    CHECK(std::equal(ea.begin(), ea.end(), eb.begin()));
  }
  CHECK(a.workers[0].step() == 2);
  CHECK_THROWS_AS(gradcomp::powersgd_compressor<float>(gradcomp::powersgd_config{0}), gradcomp::error);
}

TEST_CASE("powersgd: each round is a message of its own kind, refused by any other receiver") {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  group<float> g(cfg, 2);
  g.add("w", {12, 40});
  g.add("bias", {12});
  auto& c = g.workers[0];
  CHECK(c.rounds() == 2);
  const std::vector<std::vector<float>> grads{gaussian<float>(480, 5), gaussian<float>(12, 6)};
  const span<const float> views[2] = {{grads[0].data(), 480}, {grads[1].data(), 12}};
  for (auto& w : g.workers) REQUIRE(w.begin_step(span<const span<const float>>(views, 2)));
  // Round 1: the bias, then w's P (12 x 2), as two dense sections of a first_round message.
  const auto layout1 = c.round_layout(1);
  REQUIRE(layout1.tensors.size() == 2);
  CHECK(layout1.tensors[0].info.name == "bias");
  CHECK(layout1.tensors[1].info.name == "w/P");
  CHECK(layout1.tensors[1].info.numel == 24);
  const auto m1 = round_message(c);
  const span<const std::byte> msg1(m1.data(), m1.size());
  const auto h = gradcomp::wire::validate(msg1);
  REQUIRE(h);
  CHECK(h->kind == gradcomp::wire::message_kind::first_round);
  const auto decoded = gradcomp::wire::decode<float>(msg1);
  REQUIRE(decoded.size() == 2);
  const auto payload = c.payload();
  CHECK(std::equal(decoded[0].values.begin(), decoded[0].values.end(), payload.begin()));
  CHECK(std::equal(decoded[1].values.begin(), decoded[1].values.end(), payload.begin() + 12));
  // The second round's receiver, and a receiver of gradient messages with the same sizes, refuse it;
  // the first round's refuses a gradient message of the same vectors.
  using gradcomp::wire::message_kind;
  gradcomp::aggregator<float> second(message_kind::second_round, layout1), plain(layout1),
      first(message_kind::first_round, layout1);
  for (auto* a : {&second, &plain}) {
    a->begin();
    CHECK(a->add(msg1).error() == errc::layout_mismatch);
  }
  const std::vector<gradcomp::tensor_message<float>> same = {{0, 12, true, {}, payload.first(12)},
                                                            {1, 24, true, {}, payload.subspan(12, 24)}};
  const auto gradient = gradcomp::wire::encode(span<const gradcomp::tensor_message<float>>(same.data(), 2));
  first.begin();
  CHECK(first.add(span<const std::byte>(gradient.data(), gradient.size())).error() == errc::layout_mismatch);
  CHECK(first.add(msg1));
  // A round's receiver takes dense tensors only, and gradients or rounds.
  auto sparse = layout1;
  sparse.tensors[0].dense = false;
  sparse.tensors[0].max_kept = 12;
  CHECK_THROWS_AS(gradcomp::aggregator<float>(message_kind::first_round, sparse), gradcomp::error);
  CHECK_THROWS_AS(gradcomp::aggregator<float>(message_kind::snapshot, layout1), gradcomp::error);
  // A step closed after round 1 (its exchange failed) changes nothing: the group then runs it whole.
  for (auto& w : g.workers) {
    w.cancel_step();
    CHECK(w.round() == 0);
    CHECK(w.step() == 0);
  }
  group<float> fresh(cfg, 2);
  fresh.add("w", {12, 40});
  fresh.add("bias", {12});
  const std::vector<std::vector<std::vector<float>>> both{grads, grads};
  g.step(both);
  fresh.step(both);
  for (std::size_t t = 0; t < 2; ++t) {
    const auto a = g.workers[1].update(t), b = fresh.workers[1].update(t);
    CHECK(std::equal(a.begin(), a.end(), b.begin()));
  }
  // Round 2's layout: w's Q, 40 x 2; a step before start_step has one round of every tensor.
  CHECK(c.round_layout(2).tensors.at(0).info.name == "w/Q");
  CHECK(c.round_size(2) == 80);
  cfg.start_step = 5;
  gradcomp::powersgd_compressor<float> dense_first(cfg);
  dense_first.add_tensor("w", {12, 40});
  CHECK(dense_first.rounds() == 1);
  CHECK(dense_first.round_layout(1).tensors.at(0).info.numel == 480);
  CHECK(dense_first.round_layout(2).tensors.empty());
}
