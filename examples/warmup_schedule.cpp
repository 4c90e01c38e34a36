// Warm-up: DGC raises sparsity exponentially over the first epochs while the trainer warms up its
// learning rate. The sparsity side is gradcomp's; the learning-rate side is the trainer's and is
// shown here only to put the two together.
#include <gradcomp/gradcomp.hpp>

#include <cstdio>

int main() {
  const std::size_t epochs = 8;
  const std::size_t warmup_epochs = 4;
  const double base_lr = 0.1;
  const std::size_t workers = 8;

  const auto paper = gradcomp::warmup_schedule::paper(0.001, warmup_epochs);
  const auto authors = gradcomp::warmup_schedule::coefficient(0.001, warmup_epochs);

  std::printf("epoch  lr      density(paper)  sparsity(paper)  density(authors' coefficient)\n");
  for (std::size_t e = 0; e < epochs; ++e) {
    // Linear learning-rate warm-up to base_lr * workers (Goyal et al.), the trainer's job.
    const double scaled = base_lr * static_cast<double>(workers);
    const double lr = e < warmup_epochs
                          ? base_lr + (scaled - base_lr) * static_cast<double>(e) / warmup_epochs
                          : scaled;
    std::printf("%5zu  %.3f   %.8f      %7.4f%%         %.6f\n", e, lr, paper.density(e, 0),
                100.0 * (1.0 - paper.density(e, 0)), authors.density(e, 0));
  }

  // Inside training: the compressor follows the schedule; tell it the epoch.
  gradcomp::dgc_config config;
  config.schedule = paper;
  gradcomp::dgc_compressor<float> compressor(config);
  compressor.add_tensor("w", {1000, 1000});
  compressor.set_epoch(2);
  std::printf("at epoch 2 the compressor keeps %zu of %d entries\n",
              gradcomp::kept_count(1000000, compressor.density()), 1000000);
  return compressor.density() == 0.015625 ? 0 : 1;
}
