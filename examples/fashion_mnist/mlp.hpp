// A multilayer perceptron with ReLU activations and softmax cross-entropy, on Eigen, for the
// Fashion-MNIST demo. Parameters and gradients are plain float arrays, one per tensor (weights
// row-major, out x in), which is what gradcomp compresses. Part of the example, not the library.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gradcomp/layout.hpp>
#include <gradcomp/span.hpp>

namespace fmnist {

/// The cache sizes the demo's matrix products are blocked for: 32 KiB L1, 1 MiB L2, 32 MiB L3.
inline constexpr std::ptrdiff_t eigen_l1_bytes = 32 * 1024;
inline constexpr std::ptrdiff_t eigen_l2_bytes = 1024 * 1024;
inline constexpr std::ptrdiff_t eigen_l3_bytes = 32 * 1024 * 1024;

/**
 * Makes Eigen block its matrix products for the fixed cache sizes above instead of the ones it
 * reads from the CPU. The blocking decides how each product's sums are split and in which order
 * the parts are added, so without this the same product gives other bits on a machine with other
 * caches (Eigen's matrix products are otherwise deterministic: their instruction set is fixed when
 * the demo is compiled, and EIGEN_DONT_PARALLELIZE keeps the thread count out of the blocking).
 * The demo calls it once at start-up, before its threads; Eigen keeps the sizes in globals, so it
 * must not run while another thread multiplies.
 */
inline void pin_eigen_blocking() { Eigen::setCpuCacheSizes(eigen_l1_bytes, eigen_l2_bytes, eigen_l3_bytes); }

/// One parameter tensor: name, shape and values.
struct parameter {
  std::string name;
  std::vector<std::size_t> shape;
  std::vector<float> values;
};

/// One parameter tensor as the trainer sees it: name, shape and the weights' own memory (which
/// the trainer updates in place).
struct tensor_slot {
  std::string name;
  std::vector<std::size_t> shape;
  gradcomp::span<float> weights;
};

/// A fully connected layer's two factors of its last weight gradient (`gradient(...)`):
/// the gradient is Delta^T X, with X (batch x n_in) the layer's input and Delta (batch x n_out) the
/// error back-propagated to its output (the mean loss's 1 / batch included), both row-major.
struct layer_factors {
  const float* x = nullptr;
  const float* delta = nullptr;
  std::size_t batch = 0, n_in = 0, n_out = 0;
};

/// Loss and correct predictions of a batch or a split.
struct eval_result {
  double loss = 0.0;          ///< mean cross-entropy
  std::size_t correct = 0;    ///< argmax == label
  std::size_t count = 0;
  double accuracy() const noexcept { return count ? double(correct) / double(count) : 0.0; }
};

class mlp {
 public:
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;  // column-major
  using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  /// `sizes` = {inputs, hidden..., classes}; He-normal weights from `seed`, zero biases.
  mlp(std::vector<std::size_t> sizes, std::uint64_t seed) : sizes_(std::move(sizes)) {
    std::mt19937_64 rng(seed);
    for (std::size_t l = 0; l + 1 < sizes_.size(); ++l) {
      const std::size_t in = sizes_[l], out = sizes_[l + 1];
      parameter w{"fc" + std::to_string(l + 1) + ".weight", {out, in}, std::vector<float>(out * in)};
      std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(in)));
      for (float& x : w.values) x = normal(rng);
      params_.push_back(std::move(w));
      params_.push_back({"fc" + std::to_string(l + 1) + ".bias", {out}, std::vector<float>(out, 0.0f)});
    }
  }

  std::vector<parameter>& parameters() noexcept { return params_; }
  const std::vector<parameter>& parameters() const noexcept { return params_; }
  std::size_t layers() const noexcept { return sizes_.size() - 1; }
  std::size_t inputs() const noexcept { return sizes_.front(); }

  /// The parameters as the trainer sees them (views valid while the model lives).
  std::vector<tensor_slot> tensors() {
    std::vector<tensor_slot> out;
    for (auto& p : params_) out.push_back({p.name, p.shape, gradcomp::span<float>(p.values.data(), p.values.size())});
    return out;
  }

  /// One set of gradient buffers (`make_gradients`), which `gradient` writes.
  using gradient_set = std::vector<std::vector<float>>;

  /// The buffers of a gradient set as views, one per parameter tensor.
  static std::vector<gradcomp::span<const float>> views(const gradient_set& g) {
    std::vector<gradcomp::span<const float>> out;
    for (const auto& t : g) out.emplace_back(t.data(), t.size());
    return out;
  }

  /// The updates' form: plain gradient descent, so the receiver keeps its momentum.
  void receive(gradcomp::receiver_layout&, bool) const noexcept {}

  /// Applies an averaged update: w -= lr * u for every tensor (lr 1 where the update includes it).
  void apply(const std::vector<gradcomp::span<const float>>& updates, double lr, bool includes_lr) {
    const float step_lr = includes_lr ? 1.0f : static_cast<float>(lr);
    for (std::size_t t = 0; t < params_.size(); ++t) {
      float* w = params_[t].values.data();
      const auto u = updates[t];
      for (std::size_t i = 0; i < u.size(); ++i) w[i] -= step_lr * u[i];
    }
  }

  /// Zeroed gradient buffers shaped like the parameters.
  gradient_set make_gradients() const {
    std::vector<std::vector<float>> g;
    for (const auto& p : params_) g.emplace_back(p.values.size(), 0.0f);
    return g;
  }

  /**
   * Forward and backward pass over `batch` images (row after row in `x`) with labels `y`:
   * writes the gradient of the mean cross-entropy into `grads` and returns the batch's loss and
   * accuracy. Deterministic (same inputs, same bits).
   */
  eval_result gradient(const float* x, const std::uint8_t* y, std::size_t batch,
                       std::vector<std::vector<float>>& grads) {
    forward(x, batch);
    const std::size_t L = layers();
    eval_result r = softmax_loss(y, batch);  // acts_[L] now holds dLoss/dlogits
    const float inv_b = 1.0f / static_cast<float>(batch);
    matrix delta = acts_[L] * inv_b;
    input_ = x;
    batch_ = batch;
    deltas_.resize(L);
    for (std::size_t l = L; l-- > 0;) {
      deltas_[l] = delta;
      Eigen::Map<row_matrix> gw(grads[2 * l].data(), static_cast<Eigen::Index>(sizes_[l + 1]),
                                static_cast<Eigen::Index>(sizes_[l]));
      gw.noalias() = delta * input_of(l, x, batch).transpose();
      Eigen::Map<Eigen::VectorXf> gb(grads[2 * l + 1].data(), static_cast<Eigen::Index>(sizes_[l + 1]));
      gb = delta.rowwise().sum();
      if (l == 0) break;
      matrix back = weight(l).transpose() * delta;
      delta = back.cwiseProduct((acts_[l].array() > 0.0f).cast<float>().matrix());
    }
    return r;
  }

  /// The factors of layer l's weight gradient of the last `gradient` call (valid until the next
  /// call of `gradient` or `evaluate`, and while the images it read are).
  layer_factors factors(std::size_t l) const {
    layer_factors f;
    f.x = input_of(l, input_, batch_).data();
    f.delta = deltas_[l].data();
    f.batch = batch_;
    f.n_in = sizes_[l];
    f.n_out = sizes_[l + 1];
    return f;
  }

  /// Loss and accuracy over `count` images, evaluated in chunks.
  eval_result evaluate(const float* x, const std::uint8_t* y, std::size_t count) {
    eval_result total;
    const std::size_t chunk = 1000;
    for (std::size_t i = 0; i < count; i += chunk) {
      const std::size_t b = std::min(chunk, count - i);
      forward(x + i * inputs(), b);
      const eval_result r = softmax_loss(y + i, b);
      total.loss += r.loss * static_cast<double>(b);
      total.correct += r.correct;
      total.count += b;
    }
    if (total.count) total.loss /= static_cast<double>(total.count);
    return total;
  }

 private:
  Eigen::Map<const row_matrix> weight(std::size_t l) const {
    return Eigen::Map<const row_matrix>(params_[2 * l].values.data(),
                                        static_cast<Eigen::Index>(sizes_[l + 1]),
                                        static_cast<Eigen::Index>(sizes_[l]));
  }
  Eigen::Map<const Eigen::VectorXf> bias(std::size_t l) const {
    return Eigen::Map<const Eigen::VectorXf>(params_[2 * l + 1].values.data(),
                                             static_cast<Eigen::Index>(sizes_[l + 1]));
  }
  // Input of layer l as features x batch (column-major: one column per image).
  Eigen::Map<const matrix> input_of(std::size_t l, const float* x, std::size_t batch) const {
    if (l == 0)
      return Eigen::Map<const matrix>(x, static_cast<Eigen::Index>(sizes_[0]),
                                      static_cast<Eigen::Index>(batch));
    return Eigen::Map<const matrix>(acts_[l].data(), acts_[l].rows(), acts_[l].cols());
  }

  // acts_[l + 1] = activation of layer l (ReLU for hidden layers, logits for the last).
  void forward(const float* x, std::size_t batch) {
    const std::size_t L = layers();
    acts_.resize(L + 1);
    for (std::size_t l = 0; l < L; ++l) {
      matrix& out = acts_[l + 1];
      out.resize(static_cast<Eigen::Index>(sizes_[l + 1]), static_cast<Eigen::Index>(batch));
      out.noalias() = weight(l) * input_of(l, x, batch);
      out.colwise() += bias(l);
      if (l + 1 < L) out = out.cwiseMax(0.0f);
    }
  }

  // Replaces the logits in acts_.back() with softmax - onehot; returns loss and accuracy.
  eval_result softmax_loss(const std::uint8_t* y, std::size_t batch) {
    matrix& z = acts_.back();
    eval_result r;
    r.count = batch;
    double loss = 0.0;
    for (Eigen::Index j = 0; j < static_cast<Eigen::Index>(batch); ++j) {
      auto col = z.col(j);
      Eigen::Index arg = 0;
      const float mx = col.maxCoeff(&arg);
      if (static_cast<std::size_t>(arg) == y[j]) ++r.correct;
      col.array() = (col.array() - mx).exp();
      const float sum = col.sum();
      col /= sum;
      loss -= std::log(std::max(col(y[j]), 1e-30f));
      col(y[j]) -= 1.0f;
    }
    r.loss = loss / static_cast<double>(batch);
    return r;
  }

  std::vector<std::size_t> sizes_;
  std::vector<parameter> params_;
  std::vector<matrix> acts_;  // acts_[0] unused (the input is mapped directly)
  std::vector<matrix> deltas_;  // the last gradient's delta of each layer (n_out x batch)
  const float* input_ = nullptr;  // the last gradient's images
  std::size_t batch_ = 0;
};

}  // namespace fmnist
