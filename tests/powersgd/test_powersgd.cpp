// powersgd_compressor: PyTorch's own hook reproduced from its inputs (tests/powersgd/data, written
// by make_torch_vectors.py), and the properties the algorithm promises: with r = n <= m the update
// is the workers' mean, error feedback conserves M, every worker holds the same bits, refused
// calls change nothing.
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

#include <gradcomp/powersgd/compressor.hpp>

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
        if (key == "workers") tv.cfg.workers = static_cast<std::size_t>(value);
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

// Workers that run a step together, their payloads summed in worker order as an all-reduce of
// two workers does.
template <class T>
struct group {
  std::vector<gradcomp::powersgd_compressor<T>> workers;

  explicit group(const gradcomp::powersgd_config& cfg) {
    for (std::size_t w = 0; w < cfg.workers; ++w) workers.emplace_back(cfg);
  }
  void add(const std::string& name, std::vector<std::size_t> shape) {
    for (auto& c : workers) c.add_tensor(name, shape);
  }
  static std::vector<T> sum(const std::vector<std::vector<T>>& parts) {
    std::vector<T> s(parts[0]);
    for (std::size_t w = 1; w < parts.size(); ++w)
      for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<T>(s[i] + parts[w][i]);
    return s;
  }
  // One step: grads[w][t] is worker w's gradient of tensor t.
  void step(const std::vector<std::vector<std::vector<T>>>& grads) {
    std::vector<std::vector<T>> parts;
    for (std::size_t w = 0; w < workers.size(); ++w) {
      std::vector<span<const T>> views;
      for (const auto& g : grads[w]) views.emplace_back(g.data(), g.size());
      auto p = workers[w].begin_step(span<const span<const T>>(views.data(), views.size()));
      REQUIRE(p);
      parts.emplace_back(p->begin(), p->end());
    }
    auto first = sum(parts);
    parts.clear();
    for (auto& c : workers) {
      auto p = c.reduce_first(span<const T>(first.data(), first.size()));
      REQUIRE(p);
      parts.emplace_back(p->begin(), p->end());
    }
    if (parts[0].empty()) return;
    auto second = sum(parts);
    for (auto& c : workers) REQUIRE(c.reduce_second(span<const T>(second.data(), second.size())));
  }
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
  group<float> g(tv.cfg);
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
    std::vector<std::vector<std::vector<float>>> grads(tv.cfg.workers);
    for (std::size_t w = 0; w < tv.cfg.workers; ++w)
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
}

using gradcomp_test::gaussian;

TEST_CASE("powersgd: with r = n <= m the update is the workers' mean") {
  // P (n x n, orthogonal after the sum) spans every row: P P^T M is M.
  gradcomp::powersgd_config cfg;
  cfg.rank = 6;
  cfg.workers = 3;
  cfg.min_compression_rate = 0.1;  // compress the 6 x 40 matrix at full rank
  group<double> g(cfg);
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
  group<double> low(cfg);
  low.add("w", {6, 40});
  low.step(grads);
  double off = 0.0;
  for (std::size_t i = 0; i < 240; ++i) off = std::max(off, std::fabs(low.workers[0].update(0)[i] - mean[i]));
  CHECK(off > 0.1);
}

TEST_CASE("powersgd: error feedback keeps M = e + P Q^T, for every worker's own M") {
  gradcomp::powersgd_config cfg;
  cfg.rank = 2;
  cfg.workers = 2;
  group<float> g(cfg);
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
  cfg.workers = 2;
  group<float> a(cfg), b(cfg);
  a.add("w", {12, 40});
  b.add("w", {12, 40});
  std::vector<std::vector<std::vector<float>>> grads{{gaussian<float>(480, 1)}, {gaussian<float>(480, 2)}};
  auto bad = grads[0][0];
  bad[17] = std::nanf("");
  auto& c = a.workers[0];
  const span<const float> bad_view(bad.data(), bad.size());
  CHECK(c.begin_step(span<const span<const float>>(&bad_view, 1)).error() == errc::non_finite_input);
  CHECK(c.reduce_first(span<const float>()).error() == errc::invalid_argument);  // no step open
  CHECK(c.begin_step(span<const span<const float>>()).error() == errc::wrong_tensor_count);
  const span<const float> short_view(bad.data(), 10);
  CHECK(c.begin_step(span<const span<const float>>(&short_view, 1)).error() == errc::size_mismatch);
  // A sum with a NaN (a peer's garbage) closes the step; the workers begin it again.
  const span<const float> good(grads[0][0].data(), 480);
  auto p = c.begin_step(span<const span<const float>>(&good, 1));
  REQUIRE(p);
  CHECK(c.begin_step(span<const span<const float>>(&good, 1)).error() == errc::invalid_argument);  // open
  std::vector<float> garbage(p->size(), 1.0f);
  garbage[3] = std::numeric_limits<float>::infinity();
  CHECK(c.reduce_first(span<const float>(garbage.data(), garbage.size())).error() == errc::non_finite_input);
  CHECK(c.reduce_first(span<const float>(garbage.data(), 3)).error() == errc::invalid_argument);  // closed
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
