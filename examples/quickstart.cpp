// The smallest complete DGC step: register a model's tensors, compress one gradient per tensor,
// aggregate the messages of every worker and apply the averaged update.
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  // Defaults follow the DGC paper: momentum 0.9 with correction and masking, warm-up to 99.9%
  // sparsity. Here: a fixed 1% density so the first step already sparsifies.
  gradcomp::dgc_config config;
  config.schedule = gradcomp::warmup_schedule::constant(0.01);
  config.clip_norm = 5.0;    // global clipping threshold of the whole job
  config.num_workers = 2;    // each worker clips at 5 / sqrt(2)

  // One compressor per worker (each keeps its own residuals), one aggregator per replica.
  std::vector<gradcomp::dgc_compressor<float>> workers(2, gradcomp::dgc_compressor<float>(config));
  for (auto& w : workers) {
    w.add_tensor("fc1.weight", {256, 784});  // compressed
    w.add_tensor("fc1.bias", {256});         // rank 1: sent dense
  }
  gradcomp::dgc_aggregator<float> aggregator(workers[0]);

  std::vector<float> weight(256 * 784, 0.0f), bias(256, 0.0f);
  const float learning_rate = 0.1f;

  aggregator.begin();
  for (std::size_t r = 0; r < workers.size(); ++r) {
    // Stand-in gradients; a trainer passes its own buffers (any contiguous float memory).
    std::vector<float> g_weight(weight.size()), g_bias(bias.size());
    for (std::size_t i = 0; i < g_weight.size(); ++i)
      g_weight[i] = std::sin(0.001f * static_cast<float>(i * (r + 1)));
    for (std::size_t i = 0; i < g_bias.size(); ++i) g_bias[i] = 0.01f;

    // compress issues the step; stats() waits for it and says whether it was accepted (a NaN
    // or an infinity in a gradient refuses it, changing nothing).
    const auto issued = workers[r].compress({gradcomp::as_const_span(g_weight), gradcomp::as_const_span(g_bias)});
    const auto stats = issued ? workers[r].stats() : gradcomp::fail(issued.error());
    if (!stats) {
      std::printf("compress failed: %s\n", gradcomp::to_string(stats.error()));
      return 1;
    }
    // In a real job the messages cross the network here (allgather).
    for (std::size_t t = 0; t < workers[r].num_tensors(); ++t) {
      if (auto ok = aggregator.add(workers[r].message(t)); !ok) return 1;
    }
    std::printf("worker %zu: sent %zu of %zu weight entries\n", r,
                workers[r].message(0).indices.size(), weight.size());
  }
  if (auto ok = aggregator.finish(workers.size()); !ok) return 1;

  const auto dw = aggregator.update(0);
  const auto db = aggregator.update(1);
  for (std::size_t i = 0; i < weight.size(); ++i) weight[i] -= learning_rate * dw[i];
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] -= learning_rate * db[i];

  std::size_t changed = 0;
  for (float w : weight) changed += w != 0.0f;
  std::printf("weights changed: %zu (at most %zu: each worker sent 1%%)\n", changed,
              2 * workers[0].message(0).indices.size());
  return changed > 0 && changed <= 2 * workers[0].message(0).indices.size() ? 0 : 1;
}
