// Step-Ahead Error Feedback with double-way compression, the whole training loop: four workers fit
// a linear model to their own data (least squares), each compressing its momentum update with
// error feedback, the average compressed again by the server with its own residual, and the
// residuals averaged every 20 steps. The gradient is taken at x - e_k (the step ahead). The same
// loop runs with the identity compressor (momentum SGD), top-k (2% kept) and scaled signs, and
// prints the loss each reaches and the bytes a worker sends per step. Exits with 1 if a compressed
// run does not bring the loss below a tenth of where it started.
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

namespace {

constexpr std::size_t kWorkers = 4, kOut = 8, kIn = 64, kSamples = 256, kSteps = 300;

// Worker k's data: X (kSamples x kIn) and targets Y = X W* + noise (kSamples x kOut).
struct shard {
  std::vector<float> x, y;
};

std::vector<shard> make_data() {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kOut * kIn);
  for (auto& v : w) v = normal(rng);
  std::vector<shard> data(kWorkers);
  for (auto& d : data) {
    d.x.resize(kSamples * kIn);
    d.y.assign(kSamples * kOut, 0.0f);
    for (auto& v : d.x) v = normal(rng);
    for (std::size_t s = 0; s < kSamples; ++s)
      for (std::size_t o = 0; o < kOut; ++o) {
        float acc = 0.1f * normal(rng);
        for (std::size_t i = 0; i < kIn; ++i) acc += d.x[s * kIn + i] * w[o * kIn + i];
        d.y[s * kOut + o] = acc;
      }
  }
  return data;
}

// The loss 0.5 * mean ||X W^T - Y||^2 of weights w on a shard, and its gradient (when g is given).
double loss(const shard& d, const std::vector<float>& w, std::vector<float>* g) {
  if (g != nullptr) g->assign(w.size(), 0.0f);
  double total = 0.0;
  for (std::size_t s = 0; s < kSamples; ++s)
    for (std::size_t o = 0; o < kOut; ++o) {
      float r = -d.y[s * kOut + o];
      for (std::size_t i = 0; i < kIn; ++i) r += d.x[s * kIn + i] * w[o * kIn + i];
      total += 0.5 * static_cast<double>(r) * r;
      if (g != nullptr)
        for (std::size_t i = 0; i < kIn; ++i) (*g)[o * kIn + i] += r * d.x[s * kIn + i] / float(kSamples);
    }
  return total / kSamples;
}

double mean_loss(const std::vector<shard>& data, const std::vector<float>& w) {
  double l = 0.0;
  for (const auto& d : data) l += loss(d, w, nullptr);
  return l / static_cast<double>(data.size());
}

// The SAEF loop with the compressor `make()` gives each worker and the server.
template <class Make>
double train(const char* name, const std::vector<shard>& data, Make make) {
  using C = decltype(make());
  gradcomp::saef_config cfg;
  cfg.learning_rate = 0.05;
  cfg.momentum = 0.9;
  cfg.average_every = 20;
  std::vector<C> compressors;
  for (std::size_t k = 0; k < kWorkers; ++k) compressors.push_back(make());
  C server_compressor = make();
  std::vector<gradcomp::saef_worker<C>> workers;
  for (auto& c : compressors) workers.emplace_back(c, cfg);
  gradcomp::saef_server<C> server(server_compressor);
  gradcomp::aggregator<float> exchange(workers[0].receiver());

  std::vector<float> w(kOut * kIn, 0.0f), ahead(w.size()), g;
  double bytes = 0.0;
  for (std::size_t step = 0; step < kSteps; ++step) {
    exchange.begin();
    for (std::size_t k = 0; k < kWorkers; ++k) {
      // 1. The gradient at x - e_k, 2. the worker's compressed step, 3. its message to the others.
      (void)workers[k].lookahead(0, gradcomp::span<const float>(w.data(), w.size()),
                                 gradcomp::span<float>(ahead.data(), ahead.size()));
      (void)loss(data[k], ahead, &g);
      if (auto r = workers[k].step({gradcomp::span<const float>(g.data(), g.size())}); !r) {
        std::fprintf(stderr, "%s: worker step: %s\n", name, gradcomp::to_string(r.error()));
        return 1e30;
      }
      auto& c = workers[k].compressor();
      std::vector<std::byte> msg(c.max_message_bytes());
      msg.resize(c.encode_message({}, gradcomp::span<std::byte>(msg.data(), msg.size())).value());
      bytes += static_cast<double>(msg.size());
      (void)exchange.add(gradcomp::span<const std::byte>(msg.data(), msg.size()));
    }
    // 4. The average, compressed again by the server (every rank runs the same one), 5. applied.
    (void)exchange.finish(kWorkers);
    if (!server.step({exchange.update(0)})) return 1e30;
    (void)server.apply(0, gradcomp::span<float>(w.data(), w.size()));
    // 6. Every 20 steps the workers average their residuals (an all-reduce in a real job).
    if (workers[0].averaging_due()) {
      std::vector<float> mean(w.size(), 0.0f);
      for (auto& wk : workers) {
        const auto e = wk.residual(0);
        for (std::size_t i = 0; i < e.size(); ++i) mean[i] += e[i] / float(kWorkers);
      }
      for (auto& wk : workers)
        if (!mean.empty() && !wk.residual(0).empty()) (void)wk.set_residuals({gradcomp::span<const float>(mean.data(), mean.size())});
    }
  }
  const double l = mean_loss(data, w);
  std::printf("%-14s loss %10.5f   bytes per worker and step %8.0f\n", name, l, bytes / (kSteps * kWorkers));
  return l;
}

}  // namespace

int main() {
  const auto data = make_data();
  const double start = mean_loss(data, std::vector<float>(kOut * kIn, 0.0f));
  std::printf("%-14s loss %10.5f\n", "start", start);

  const double dense = train("momentum SGD", data, [] {
    gradcomp::dgc_config cfg;
    cfg.momentum_correction = false;
    cfg.momentum_masking = false;
    gradcomp::dgc_compressor<float> c(cfg);
    c.add_tensor("w", {kOut, kIn}, gradcomp::tensor_mode::dense);
    return c;
  });
  const double topk = train("SAEF top-k 2%", data, [] {
    gradcomp::dgc_config cfg;
    cfg.momentum_correction = false;
    cfg.momentum_masking = false;
    cfg.selection = gradcomp::selection_method::exact_topk;
    cfg.schedule = gradcomp::warmup_schedule::constant(0.02);
    gradcomp::dgc_compressor<float> c(cfg);
    c.add_tensor("w", {kOut, kIn});
    return c;
  });
  const double sign = train("SAEF sign", data, [] {
    gradcomp::ef_signsgd_config cfg;
    cfg.learning_rate = 1.0;  // the input is already eta * M
    gradcomp::ef_signsgd_compressor<float> c(cfg);
    c.add_tensor("w", {kOut, kIn});
    return c;
  });
  const bool ok = dense < 0.1 * start && topk < 0.1 * start && sign < 0.1 * start;
  return ok ? 0 : 1;
}
