// Indirect Stochastic Gradient Quantization on a fully connected layer: four workers fit
// Y = relu(X) W^T (256 inputs, 64 outputs) to their own data by least squares, each sending its
// weight gradient as the layer's input and back-propagated error over its batch of 16, quantised
// (isgq_compressor), through the wire format to an aggregator that rebuilds and averages the
// products. The same loop runs with every gradient sent whole (fp32) and with ISGQ's two
// quantisers, and prints the loss each reaches and the bytes a worker sends per step. Exits with 1
// if an ISGQ run does not bring the loss below a tenth of where it started.
#include <gradcomp/gradcomp.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr std::size_t kWorkers = 4, kIn = 256, kOut = 64, kBatch = 16, kSamples = 512, kSteps = 400;

// Worker k's data: inputs after a ReLU (about half exact zeros) and targets of a hidden W*.
struct shard {
  std::vector<float> x, y;
};

std::vector<shard> make_data() {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(kOut * kIn);
  for (auto& v : w) v = normal(rng) / 16.0f;
  std::vector<shard> data(kWorkers);
  for (auto& d : data) {
    d.x.resize(kSamples * kIn);
    d.y.assign(kSamples * kOut, 0.0f);
    for (auto& v : d.x) v = std::max(0.0f, normal(rng));
    for (std::size_t s = 0; s < kSamples; ++s)
      for (std::size_t o = 0; o < kOut; ++o) {
        float acc = 0.01f * normal(rng);
        for (std::size_t i = 0; i < kIn; ++i) acc += d.x[s * kIn + i] * w[o * kIn + i];
        d.y[s * kOut + o] = acc;
      }
  }
  return data;
}

// Mean squared error of W over every worker's data.
double loss(const std::vector<shard>& data, const std::vector<float>& w) {
  double sum = 0.0;
  for (const auto& d : data)
    for (std::size_t s = 0; s < kSamples; ++s)
      for (std::size_t o = 0; o < kOut; ++o) {
        double p = 0.0;
        for (std::size_t i = 0; i < kIn; ++i) p += d.x[s * kIn + i] * w[o * kIn + i];
        sum += (p - d.y[s * kOut + o]) * (p - d.y[s * kOut + o]);
      }
  return sum / static_cast<double>(kWorkers * kSamples * kOut);
}

// Trains with momentum SGD; each worker's message from `send` (its batch's X and Delta, and the
// exact gradient for the dense run). Returns the final loss and the bytes a worker sent per step.
struct outcome {
  double loss = 0.0, bytes = 0.0;
};
template <class Send>
outcome train(const std::vector<shard>& data, Send&& send) {
  std::vector<float> w(kOut * kIn, 0.0f), velocity(w.size(), 0.0f);
  gradcomp::receiver_layout layout;
  gradcomp::receiver_tensor t;
  t.info.name = "fc.weight";
  t.info.shape = {kOut, kIn};
  t.info.numel = kOut * kIn;
  t.dense = true;
  layout.tensors.push_back(t);
  gradcomp::aggregator<float> receiver(layout);
  std::vector<float> x(kBatch * kIn), delta(kBatch * kOut), grad(kOut * kIn);
  double bytes = 0.0;
  for (std::size_t step = 0; step < kSteps; ++step) {
    receiver.begin();
    for (std::size_t r = 0; r < kWorkers; ++r) {
      // The batch's inputs and the error of the mean squared loss at the output (1 / B in Delta).
      for (std::size_t b = 0; b < kBatch; ++b) {
        const std::size_t s = (step * kBatch + b) % kSamples;
        for (std::size_t i = 0; i < kIn; ++i) x[b * kIn + i] = data[r].x[s * kIn + i];
        for (std::size_t o = 0; o < kOut; ++o) {
          float p = 0.0f;
          for (std::size_t i = 0; i < kIn; ++i) p += x[b * kIn + i] * w[o * kIn + i];
          delta[b * kOut + o] = 2.0f * (p - data[r].y[s * kOut + o]) / static_cast<float>(kBatch);
        }
      }
      for (std::size_t o = 0; o < kOut; ++o)
        for (std::size_t i = 0; i < kIn; ++i) {
          float g = 0.0f;
          for (std::size_t b = 0; b < kBatch; ++b) g += delta[b * kOut + o] * x[b * kIn + i];
          grad[o * kIn + i] = g;
        }
      const std::vector<std::byte> msg = send(r, x, delta, grad);
      bytes += static_cast<double>(msg.size());
      receiver.add(gradcomp::span<const std::byte>(msg.data(), msg.size())).value();
    }
    receiver.finish(kWorkers).value();
    const auto update = receiver.update(0);
    for (std::size_t j = 0; j < w.size(); ++j) {
      velocity[j] = 0.9f * velocity[j] + update[j];
      w[j] -= 0.002f * velocity[j];
    }
  }
  return {loss(data, w), bytes / static_cast<double>(kSteps * kWorkers)};
}

}  // namespace

int main() {
  const auto data = make_data();
  const double start = loss(data, std::vector<float>(kOut * kIn, 0.0f));
  gradcomp::wire::encode_options opt;
  opt.checksum = true;

  // Every gradient whole, in fp32.
  const outcome dense = train(data, [&](std::size_t, const std::vector<float>&, const std::vector<float>&,
                                        const std::vector<float>& grad) {
    gradcomp::tensor_message<float> m;
    m.numel = grad.size();
    m.dense = true;
    m.values = gradcomp::span<const float>(grad.data(), grad.size());
    return gradcomp::wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&m, 1), opt);
  });
  std::printf("start loss %.5f\n%-22s loss %.5f, %6.0f bytes per worker per step\n", start, "dense fp32",
              dense.loss, dense.bytes);

  bool ok = true;
  for (const auto method : {gradcomp::isgq_method::dithered, gradcomp::isgq_method::min_mse}) {
    // One compressor per worker: each draws its own dithers (its rank).
    std::vector<gradcomp::isgq_compressor<float>> workers;
    for (std::size_t r = 0; r < kWorkers; ++r) {
      gradcomp::isgq_config cfg;
      cfg.method = method;
      cfg.levels = method == gradcomp::isgq_method::dithered ? 3 : 8;
      cfg.rank = r;
      workers.emplace_back(cfg);
      workers.back().add_layer("fc.weight", kIn, kOut, gradcomp::isgq_layout::out_in);
    }
    const outcome run = train(data, [&](std::size_t r, const std::vector<float>& x, const std::vector<float>& delta,
                                        const std::vector<float>&) {
      const auto m = workers[r]
                         .compress(0, gradcomp::span<const float>(x.data(), x.size()),
                                   gradcomp::span<const float>(delta.data(), delta.size()), kBatch)
                         .value();
      return gradcomp::wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&m, 1), opt);
    });
    const char* name = method == gradcomp::isgq_method::dithered ? "ISGQ dithered, s = 3" : "ISGQ min-MSE, L = 8";
    std::printf("%-22s loss %.5f, %6.0f bytes per worker per step (%.1fx less)\n", name, run.loss, run.bytes,
                dense.bytes / run.bytes);
    ok = ok && run.loss < 0.1 * start;
  }
  return ok ? 0 : 1;
}
