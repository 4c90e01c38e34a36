// Data-parallel DGC on a synthetic model: N workers compress heavy-tailed gradients of a small
// CNN's tensors for a few steps while the sparsity warms up to 99.9%. Every worker's step goes
// through the wire format (encode -> bytes -> decode-and-accumulate). Prints, per step, the bytes
// each worker sends and the compression ratio, and checks conservation: every worker's residual
// must equal, bitwise, the velocity it accumulated and has not sent yet.
//
//   compress_synthetic_model [--workers N] [--steps S]
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/detail/rounded.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct layer {
  const char* name;
  std::vector<std::size_t> shape;
};

// A LeNet-style CNN for 28x28 inputs: two 5x5 convolutions, two fully connected layers.
const std::vector<layer> kModel = {
    {"conv1.weight", {32, 1, 5, 5}}, {"conv1.bias", {32}},
    {"conv2.weight", {64, 32, 5, 5}}, {"conv2.bias", {64}},
    {"fc1.weight", {512, 3136}},      {"fc1.bias", {512}},
    {"fc2.weight", {10, 512}},        {"fc2.bias", {10}},
};

std::size_t numel(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// Gradient of one worker: a direction shared by all workers plus heavy-tailed per-worker noise,
// which is what makes top-k selection and error feedback matter. Values are drawn once into pools
// and read from a different offset at each (tensor, worker, step), which keeps the demo fast.
class gradient_source {
 public:
  gradient_source() : signal_(kPool), noise_(kPool) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::student_t_distribution<float> heavy(2.5f);
    for (auto& x : signal_) x = normal(rng);
    for (auto& x : noise_) x = 0.002f * heavy(rng);
  }
  void fill(std::vector<float>& g, std::size_t tensor, std::size_t worker, std::size_t step) const {
    const std::size_t shared = (7919 * tensor + 104729 * step) % kPool;
    const std::size_t own = (shared + 15485863 * (worker + 1)) % kPool;
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = signal_[(shared + i) % kPool] + noise_[(own + 3 * i) % kPool];
  }

 private:
  static constexpr std::size_t kPool = (1 << 22) + 15;
  std::vector<float> signal_, noise_;
};

std::size_t arg(int argc, char** argv, const char* flag, std::size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return static_cast<std::size_t>(std::strtoul(argv[i + 1], nullptr, 10));
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t workers = arg(argc, argv, "--workers", 4);
  const std::size_t steps = arg(argc, argv, "--steps", 12);
  if (workers == 0 || steps == 0) {
    std::fprintf(stderr, "usage: %s [--workers N>0] [--steps S>0]\n", argv[0]);
    return 2;
  }

  gradcomp::dgc_config config;  // DGC defaults: vanilla momentum 0.9, correction and masking
  config.clip_norm = 20.0;  // local threshold 20 / sqrt(N)
  config.num_workers = workers;
  config.seed = 2018;
  // The paper's warm-up (75% ... 99.9% sparsity), two steps per stage for a short run.
  config.schedule = gradcomp::warmup_schedule::paper(0.001, 4, gradcomp::schedule_unit::step, 2);

  std::vector<gradcomp::dgc_compressor<float>> compressors(workers,
                                                           gradcomp::dgc_compressor<float>(config));
  for (auto& c : compressors)
    for (const auto& l : kModel) c.add_tensor(l.name, l.shape);
  gradcomp::dgc_aggregator<float> aggregator(compressors[0]);
  gradcomp::wire::encode_options wire_options;  // smallest index coding per tensor, fp32 values
  wire_options.checksum = true;
  std::vector<std::byte> buffer(compressors[0].max_message_bytes(wire_options));

  std::size_t total = 0;
  for (const auto& l : kModel) total += numel(l.shape);
  const double dense_bytes = 4.0 * static_cast<double>(total);
  std::printf("model: %zu tensors, %zu parameters, %.2f MB of fp32 gradient per worker\n",
              kModel.size(), total, dense_bytes / 1e6);
  std::printf("compressed: ");
  for (std::size_t t = 0; t < kModel.size(); ++t)
    if (compressors[0].info(t).compressed) std::printf("%s ", kModel[t].name);
  std::printf("(the others are sent dense)\n\n");

  // Reference state of every worker, kept here to check conservation bitwise: U and V of each
  // compressed tensor, updated with the formulas of docs/algorithms.md (momentum correction, clipping).
  std::vector<std::vector<std::vector<float>>> ref_u(workers), ref_v(workers);
  for (std::size_t r = 0; r < workers; ++r)
    for (const auto& l : kModel) {
      ref_u[r].emplace_back(numel(l.shape), 0.0f);
      ref_v[r].emplace_back(numel(l.shape), 0.0f);
    }

  const gradient_source source;
  std::vector<std::vector<float>> grads;
  for (const auto& l : kModel) grads.emplace_back(numel(l.shape));
  const float m = static_cast<float>(config.momentum);
  bool conserved = true;
  double bytes_after_warmup = 0.0, raw_after_warmup = 0.0;
  std::size_t steps_after_warmup = 0;

  std::printf("step  density   kept/target  bytes/worker  ratio    clip\n");
  for (std::size_t step = 0; step < steps; ++step) {
    aggregator.begin();
    double bytes = 0.0, raw_bytes = 0.0, kept = 0.0, target = 0.0, clip = 1.0;
    for (std::size_t r = 0; r < workers; ++r) {
      std::vector<gradcomp::span<const float>> views;
      for (std::size_t t = 0; t < kModel.size(); ++t) {
        source.fill(grads[t], t, r, step);
        views.push_back(gradcomp::as_const_span(grads[t]));
      }
      const auto issued = compressors[r].compress(views);
      const auto stats = issued ? compressors[r].stats() : gradcomp::fail(issued.error());
      if (!stats) {
        std::fprintf(stderr, "compress failed: %s\n", gradcomp::to_string(stats.error()));
        return 1;
      }
      kept += static_cast<double>(stats->kept_elements);
      target += static_cast<double>(stats->target_elements);
      clip = std::min(clip, stats->clip_coefficient);
      const float c = static_cast<float>(stats->clip_coefficient);
      // What this worker sends: one message with a section per tensor.
      const auto sent = compressors[r].encode_message(
          wire_options, gradcomp::span<std::byte>(buffer.data(), buffer.size()));
      if (!sent) return 1;
      bytes += static_cast<double>(*sent);
      if (auto ok = aggregator.add(gradcomp::span<const std::byte>(buffer.data(), *sent)); !ok) {
        std::fprintf(stderr, "decode failed: %s\n", gradcomp::to_string(ok.error()));
        return 1;
      }
      for (std::size_t t = 0; t < kModel.size(); ++t) {
        const auto msg = compressors[r].message(t);
        raw_bytes += msg.dense ? 4.0 * static_cast<double>(msg.values.size())
                               : 8.0 * static_cast<double>(msg.indices.size());
        if (msg.dense) continue;
        auto& u = ref_u[r][t];
        auto& v = ref_v[r][t];
        // Each product rounded before it is added, as the library computes it: a compiler that
        // may contract (aarch64, -march=native) would otherwise fuse them into one multiply-add
        // here, and this reference would hold other bits (docs/algorithms.md, "Arithmetic").
        for (std::size_t i = 0; i < u.size(); ++i) {
          u[i] = gradcomp::detail::rounded(m * u[i]) + gradcomp::detail::rounded(c * grads[t][i]);
          v[i] += u[i];
        }
        for (std::size_t j = 0; j < msg.indices.size(); ++j) {
          conserved &= msg.values[j] == v[msg.indices[j]];
          v[msg.indices[j]] = 0.0f;
          u[msg.indices[j]] = 0.0f;  // momentum factor masking
        }
        const auto held = compressors[r].residual(t);
        conserved &= std::memcmp(held.data(), v.data(), v.size() * sizeof(float)) == 0;
      }
    }
    if (!aggregator.finish(workers)) return 1;
    bytes /= static_cast<double>(workers);
    raw_bytes /= static_cast<double>(workers);
    const double density = compressors[0].config().schedule.density(0, step);
    if (density == config.schedule.final_density()) {
      bytes_after_warmup += bytes;
      raw_after_warmup += raw_bytes;
      ++steps_after_warmup;
    }
    std::printf("%4zu  %.6f  %11.3f  %12.0f  %6.1fx  %.3f\n", step, density, kept / target, bytes,
                dense_bytes / bytes, clip);
  }
  if (steps_after_warmup > 0) {
    const double steps_done = static_cast<double>(steps_after_warmup);
    std::printf("\ncompression ratio after warm-up: %.1fx (whole wire messages, headers and "
                "checksum included)\n", dense_bytes / (bytes_after_warmup / steps_done));
    std::printf("with a plain u32 index + fp32 value per kept entry it would be %.1fx\n",
                dense_bytes / (raw_after_warmup / steps_done));
  }
  std::printf("conservation (residual + sent == accumulated velocity, bitwise, every worker): %s\n",
              conserved ? "holds" : "VIOLATED");
  return conserved ? 0 : 1;
}
