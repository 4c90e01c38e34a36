// gradcomp in a libtorch training loop, in the fewest lines: DGC registered from
// named_parameters(), each worker compressing straight from .grad() (no copy), the messages
// averaged on the replica and handed to torch's own SGD as the gradient (no copy either).
// Two workers are simulated in this process on a synthetic task; in a real job each worker is a
// process and the messages cross the network (MPI_Allgatherv, NCCL, gradcomp::comm).
#include <gradcomp/gradcomp.hpp>

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "torch_views.hpp"

int main() {
  torch::manual_seed(0);
  const std::size_t workers = 2;
  auto model = torch::nn::Sequential(torch::nn::Linear(20, 64), torch::nn::ReLU(), torch::nn::Linear(64, 4));
  // The task: the class is the argmax of 4 fixed linear functions of the input.
  const torch::Tensor teacher = torch::randn({20, 4});

  // Registration: one gradcomp tensor per parameter, in named_parameters() order.
  gradcomp::dgc_config config;  // momentum 0.9 with momentum correction
  config.num_workers = workers;
  config.schedule = gradcomp::warmup_schedule::constant(0.05);  // default: warm-up to 0.1% density
  std::vector<gradcomp::dgc_compressor<float>> dgc(workers, gradcomp::dgc_compressor<float>(config));
  std::vector<torch::Tensor> params;
  for (auto& p : model->named_parameters()) {
    for (auto& w : dgc) w.add_tensor(p.key(), gctorch::shape(p.value()));
    params.push_back(p.value());
  }
  gradcomp::dgc_aggregator<float> replica(dgc[0]);
  // DGC carries the momentum (momentum correction): torch's SGD adds weight decay only.
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05).weight_decay(1e-4));
  const gradcomp::wire::encode_options wire;
  std::vector<std::vector<std::byte>> messages(workers, std::vector<std::byte>(dgc[0].max_message_bytes(wire)));
  std::vector<std::size_t> sizes(workers);

  double first = 0.0, last = 0.0;
  for (int step = 0; step < 300; ++step) {
    double loss_sum = 0.0;
    for (std::size_t r = 0; r < workers; ++r) {  // worker r: its batch, its gradient, its message
      const torch::Tensor x = torch::randn({32, 20});
      const torch::Tensor y = x.matmul(teacher).argmax(1);
      sgd.zero_grad();
      const torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      loss_sum += loss.item<double>();

      // The step: compress from .grad() itself, encode the message.
      std::vector<gradcomp::span<const float>> grads;
      for (const auto& p : params) grads.push_back(gctorch::const_view(p.grad()));
      if (grads[0].data() != params[0].grad().data_ptr<float>()) return 1;  // a view: no copy
      if (!dgc[r].compress(grads)) return 1;  // refused: a NaN or an infinity, nothing changed
      const auto bytes = dgc[r].encode_message(wire, messages[r]);
      if (!bytes) return 1;
      sizes[r] = *bytes;
    }
    // Every replica: the workers' messages summed in rank order, averaged, momentum-corrected.
    replica.begin();
    for (std::size_t r = 0; r < workers; ++r)
      if (!replica.add(gradcomp::span<const std::byte>(messages[r].data(), sizes[r]))) return 1;
    if (!replica.finish(workers)) return 1;
    // The average becomes each parameter's .grad() (a tensor over gradcomp's memory), then torch steps.
    for (std::size_t t = 0; t < params.size(); ++t)
      params[t].mutable_grad() = gctorch::tensor_over(replica.update(t), params[t].sizes());
    sgd.step();

    if (step == 0) first = loss_sum / workers;
    last = loss_sum / workers;
  }
  std::int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();
  const double dense_bytes = 4.0 * static_cast<double>(numel);
  std::printf("loss %.3f -> %.3f over 300 steps; last message %zu bytes (dense fp32: %.0f)\n", first, last, sizes[0],
              dense_bytes);
  return last < 0.5 * first ? 0 : 1;
}
