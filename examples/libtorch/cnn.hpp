// A small CNN for Fashion-MNIST in libtorch, as a model the demo's data-parallel trainer
// (fmnist::train_model) drives: torch's autograd computes each worker's gradient into that worker's
// own gradient tensors, gradcomp's compressors read those tensors' memory (no copy), and torch's
// SGD applies the averaged update to the parameters in place. Part of the example, not the library.
#pragma once

#include <gradcomp/gradcomp.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlp.hpp"  // fmnist::tensor_slot, layer_factors, eval_result
#include "torch_views.hpp"

namespace torch_demo {

/// conv 5x5 (1 -> 8) - ReLU - max-pool 2, conv 5x5 (8 -> 16) - ReLU - max-pool 2, fully connected
/// 784 -> 64 - ReLU, fully connected 64 -> 10 (54 k parameters). Keeps each fully connected
/// layer's input and output gradient of the last backward pass: ISGQ's factors.
struct cnn_netImpl : torch::nn::Module {
  cnn_netImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 5).padding(2)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 5).padding(2)))),
        fc1(register_module("fc1", torch::nn::Linear(16 * 7 * 7, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 10))) {}

  /// Logits of images x (batch x 1 x 28 x 28). With `keep`, records the fully connected layers'
  /// inputs and hooks their outputs to record the gradient that reaches them.
  torch::Tensor forward(const torch::Tensor& x, bool keep = false) {
    auto h = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2->forward(h)), 2).flatten(1);
    auto z1 = fc1->forward(h);
    auto a1 = torch::relu(z1);
    auto z2 = fc2->forward(a1);
    if (keep) {
      inputs = {h.detach(), a1.detach()};
      deltas.assign(2, torch::Tensor());
      z1.register_hook([this](const torch::Tensor& g) { deltas[0] = g.detach().contiguous(); });
      z2.register_hook([this](const torch::Tensor& g) { deltas[1] = g.detach().contiguous(); });
    }
    return z2;
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
  std::vector<torch::Tensor> inputs, deltas;  // per fully connected layer, of the last pass
};
TORCH_MODULE(cnn_net);

/**
 * The CNN as a model of fmnist::train_model. Parameters are initialised by torch from `seed`.
 * Updates are applied by a torch::optim::SGD: where gradcomp's receiver would apply momentum, the
 * optimizer applies it instead (with weight decay, exactly as torch does); where the compressor
 * already carries momentum (DGC's momentum correction) or the learning rate (EF-SignSGD, SAEF),
 * the optimizer adds weight decay only. Weight decay `weight_decay` applies to every parameter.
 */
class cnn {
 public:
  using gradient_set = std::vector<torch::Tensor>;  ///< one worker's gradient tensors

  explicit cnn(std::uint64_t seed, double weight_decay = 1e-4) : weight_decay_(weight_decay) {
    torch::manual_seed(seed);
    net_ = cnn_net();
    for (auto& p : net_->named_parameters()) params_.push_back({p.key(), p.value()});
  }

  /// The module (for a user's own evaluation or checkpoints).
  cnn_net& module() noexcept { return net_; }

  /// Each parameter, registered from named_parameters(): its weights are the tensor's own memory.
  std::vector<fmnist::tensor_slot> tensors() {
    std::vector<fmnist::tensor_slot> out;
    for (auto& [name, p] : params_) out.push_back({name, gctorch::shape(p), gctorch::view(p, name)});
    return out;
  }

  /// A worker's gradient tensors, zeroed, shaped like the parameters.
  gradient_set make_gradients() const {
    gradient_set g;
    for (const auto& p : params_) g.push_back(torch::zeros_like(p.second));
    return g;
  }

  /// The gradient tensors' memory as views: what the compressors read.
  static std::vector<gradcomp::span<const float>> views(const gradient_set& g) {
    std::vector<gradcomp::span<const float>> out;
    for (const auto& t : g) out.push_back(gctorch::const_view(t, "gradient"));
    return out;
  }

  /**
   * Forward and backward pass over `batch` images: autograd accumulates into the worker's own
   * gradient tensors `g` (installed as the parameters' .grad() and zeroed first). Throws
   * std::logic_error if autograd wrote anywhere else: the views the compressors hold must be the
   * memory that .grad() points at (checked by pointer identity after every pass).
   */
  fmnist::eval_result gradient(const float* x, const std::uint8_t* y, std::size_t batch, gradient_set& g) {
    for (std::size_t t = 0; t < params_.size(); ++t) {
      g[t].zero_();
      params_[t].second.mutable_grad() = g[t];
    }
    const auto images = input(x, batch);
    const auto labels = targets(y, batch);
    const auto logits = net_->forward(images, true);
    const auto loss = torch::nn::functional::cross_entropy(logits, labels);
    loss.backward();
    for (std::size_t t = 0; t < params_.size(); ++t)
      if (params_[t].second.grad().data_ptr() != g[t].data_ptr())
        throw std::logic_error("autograd replaced the gradient tensor of " + params_[t].first);
    fmnist::eval_result r;
    r.loss = loss.item<double>();
    r.correct = static_cast<std::size_t>(logits.argmax(1).eq(labels).sum().item<std::int64_t>());
    r.count = batch;
    return r;
  }

  /// Fully connected layers (ISGQ sends their weight gradients as factors).
  std::size_t layers() const noexcept { return 2; }

  /// Layer l's factors of the last gradient: its input X (batch x n_in) and the gradient Delta
  /// (batch x n_out) that reached its output, the mean loss's 1 / batch included.
  fmnist::layer_factors factors(std::size_t l) const {
    const auto& x = net_->inputs.at(l);
    const auto& d = net_->deltas.at(l);
    fmnist::layer_factors f;
    f.x = x.data_ptr<float>();
    f.delta = d.data_ptr<float>();
    f.batch = static_cast<std::size_t>(x.size(0));
    f.n_in = static_cast<std::size_t>(x.size(1));
    f.n_out = static_cast<std::size_t>(d.size(1));
    return f;
  }

  /// Mean loss and accuracy over `count` images, in chunks, without autograd.
  fmnist::eval_result evaluate(const float* x, const std::uint8_t* y, std::size_t count) {
    torch::NoGradGuard no_grad;
    fmnist::eval_result total;
    for (std::size_t i = 0; i < count; i += 1000) {
      const std::size_t b = std::min<std::size_t>(1000, count - i);
      const auto labels = targets(y + i, b);
      const auto logits = net_->forward(input(x + i * 784, b));
      total.loss += torch::nn::functional::cross_entropy(
                        logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                        .item<double>();
      total.correct += static_cast<std::size_t>(logits.argmax(1).eq(labels).sum().item<std::int64_t>());
      total.count += b;
    }
    if (total.count) total.loss /= static_cast<double>(total.count);
    return total;
  }

  /// The form of the updates: the receiver's momentum is taken over by the optimizer (and cleared
  /// from `layout`, so that gradcomp only averages); the optimizer is built here.
  void receive(gradcomp::receiver_layout& layout, bool /*includes_lr: told again by apply*/) {
    std::vector<torch::Tensor> with_momentum, plain;
    for (std::size_t t = 0; t < params_.size(); ++t) {
      const bool m = layout.momentum > 0.0 && t < layout.tensors.size() && layout.tensors[t].momentum;
      (m ? with_momentum : plain).push_back(params_[t].second);
    }
    torch::optim::SGDOptions defaults(1.0);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    if (!with_momentum.empty()) {
      auto o = std::make_unique<torch::optim::SGDOptions>(1.0);
      o->momentum(layout.momentum).nesterov(layout.kind == gradcomp::momentum_kind::nesterov);
      groups.emplace_back(with_momentum, std::move(o));
    }
    if (!plain.empty()) groups.emplace_back(plain, std::make_unique<torch::optim::SGDOptions>(1.0));
    sgd_optimizer_ = std::make_unique<torch::optim::SGD>(groups, defaults);
    layout.momentum = 0.0;
  }

  /// Applies the averaged updates in place: each becomes its parameter's .grad() (a tensor over
  /// gradcomp's memory, no copy), then the optimizer steps with learning rate `lr` (1 where the
  /// update includes it, weight decay then scaled by `lr`).
  void apply(const std::vector<gradcomp::span<const float>>& updates, double lr, bool includes_lr) {
    if (!sgd_optimizer_) throw std::logic_error("apply before receive");
    if (updates.size() != params_.size()) throw std::invalid_argument("one update per parameter");
    for (std::size_t t = 0; t < params_.size(); ++t)
      params_[t].second.mutable_grad() = gctorch::tensor_over(updates[t], params_[t].second.sizes());
    for (auto& group : sgd_optimizer_->param_groups()) {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      o.lr(includes_lr ? 1.0 : lr);
      o.weight_decay(includes_lr ? weight_decay_ * lr : weight_decay_);
    }
    sgd_optimizer_->step();
    for (auto& p : params_) p.second.mutable_grad() = torch::Tensor();
  }

 private:
  static torch::Tensor input(const float* x, std::size_t batch) {
    return torch::from_blob(const_cast<float*>(x), {static_cast<std::int64_t>(batch), 1, 28, 28}, torch::kFloat32);
  }
  static torch::Tensor targets(const std::uint8_t* y, std::size_t batch) {
    return torch::from_blob(const_cast<std::uint8_t*>(y), {static_cast<std::int64_t>(batch)}, torch::kUInt8)
        .to(torch::kLong);
  }

  double weight_decay_;
  cnn_net net_{nullptr};
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::unique_ptr<torch::optim::SGD> sgd_optimizer_;
};

}  // namespace torch_demo
