// Checkpoint and restart without losing accumulated gradient: DGC keeps most of every gradient
// in its residuals, so a trainer's checkpoint must hold them too. save_snapshot writes the
// compressor's whole state in the wire format; restore_snapshot brings it back bit for bit.
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace {

gradcomp::dgc_compressor<float> make_compressor() {
  gradcomp::dgc_config config;
  config.schedule = gradcomp::warmup_schedule::constant(0.01);
  config.seed = 42;
  gradcomp::dgc_compressor<float> c(config);
  c.add_tensor("fc.weight", {128, 256});
  c.add_tensor("fc.bias", {128});
  return c;
}

std::vector<float> gradient(std::size_t n, std::size_t step) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = std::sin(0.37f * static_cast<float>(i + 31 * step));
  return g;
}

bool compress_step(gradcomp::dgc_compressor<float>& c, std::size_t step) {
  const auto w = gradient(128 * 256, step), b = gradient(128, step);
  return c.compress({gradcomp::as_const_span(w), gradcomp::as_const_span(b)}) && c.stats();
}

}  // namespace

int main() {
  auto running = make_compressor();
  for (std::size_t step = 0; step < 3; ++step)
    if (!compress_step(running, step)) return 1;

  // Checkpoint: the snapshot is an ordinary byte buffer with a CRC-32C; store it with the weights.
  const std::vector<std::byte> snapshot = gradcomp::save_snapshot(running);
  std::ofstream("compressor.gcwf", std::ios::binary)
      .write(reinterpret_cast<const char*>(snapshot.data()), static_cast<std::streamsize>(snapshot.size()));
  std::printf("saved %zu bytes after step %zu\n", snapshot.size(), running.step());

  // Restart: a new process builds the same compressor and restores the file into it.
  std::ifstream in("compressor.gcwf", std::ios::binary);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  auto restarted = make_compressor();
  if (auto ok = gradcomp::restore_snapshot(restarted, gradcomp::span<const std::byte>(bytes.data(), bytes.size())); !ok) {
    std::printf("restore failed: %s\n", gradcomp::to_string(ok.error()));
    return 1;
  }

  // Both continue identically.
  bool identical = true;
  for (std::size_t step = 3; step < 6; ++step) {
    if (!compress_step(running, step) || !compress_step(restarted, step)) return 1;
    const auto a = running.message(0), b = restarted.message(0);
    identical &= a.indices.size() == b.indices.size() &&
                 std::memcmp(a.indices.data(), b.indices.data(), a.indices.size_bytes()) == 0 &&
                 std::memcmp(a.values.data(), b.values.data(), a.values.size_bytes()) == 0;
  }
  std::printf("restarted compressor continues identically: %s\n", identical ? "yes" : "NO");
  return identical ? 0 : 1;
}
