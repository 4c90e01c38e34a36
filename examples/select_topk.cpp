// Selection on its own: exact top-k, DGC's sampled threshold, and a fixed threshold, with the
// workspace reserved once and reused (no allocation per call).
#include <gradcomp/gradcomp.hpp>

#include <cstdio>
#include <random>
#include <vector>

int main() {
  const std::size_t n = 1 << 20;
  const std::size_t k = n / 1000;  // 0.1% density
  std::vector<float> values(n);
  std::mt19937 rng(1);
  std::student_t_distribution<float> heavy_tailed(3.0f);
  for (auto& v : values) v = heavy_tailed(rng);

  const gradcomp::cpu_backend cpu;
  const gradcomp::span<const float> in(values.data(), values.size());
  std::vector<std::uint32_t> indices(k);
  const gradcomp::span<std::uint32_t> out(indices.data(), indices.size());

  // Exact: exactly k indices, ascending, ties to the lower index.
  const auto exact = gradcomp::exact_topk(cpu, in, k, out);
  if (!exact) return 1;
  std::printf("exact top-k:      %zu indices, first %u\n", *exact, indices[0]);

  // Sampled: the threshold comes from a 1% sample; never more than k indices.
  gradcomp::sampled_threshold_config cfg;  // 1% strided sample, bounds 0.8 / 1.3
  std::vector<std::byte> workspace(
      gradcomp::sampled_threshold_workspace_bytes<float>(cpu, cfg, n, k).value());
  const auto sampled = gradcomp::sampled_threshold_select(
      cpu, in, k, cfg, /*seed=*/42, out, gradcomp::span<std::byte>(workspace.data(), workspace.size()));
  if (!sampled) return 1;
  std::printf("sampled:          %zu of k = %zu, threshold %.4f, %zu samples, %d round(s)%s\n",
              sampled->count, k, static_cast<double>(sampled->threshold), sampled->sample_count,
              sampled->rounds, sampled->exact ? ", exact" : "");

  // Threshold: every |v| >= t.
  std::vector<std::uint32_t> all(n);
  std::size_t total = 0;
  const auto kept = gradcomp::threshold_select(cpu, in, sampled->threshold,
                                               gradcomp::span<std::uint32_t>(all.data(), n), &total);
  if (!kept) return 1;
  std::printf("threshold %.4f: %zu indices\n", static_cast<double>(sampled->threshold), *kept);
  return sampled->count <= k && *kept >= sampled->count ? 0 : 1;
}
