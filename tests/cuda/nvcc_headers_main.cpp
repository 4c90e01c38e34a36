// See nvcc_headers.cu: the same computations compiled by the C++ compiler and by nvcc, linked into
// one program, must give bitwise the same results. Exits 0 when they do.
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

std::vector<std::uint32_t> nvcc_topk(const std::vector<float>& v, std::size_t k);
std::vector<std::byte> nvcc_dgc_message(const std::vector<float>& g);

namespace {
std::vector<std::byte> cxx_dgc_message(const std::vector<float>& g) {
  gradcomp::dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.01);
  gradcomp::dgc_compressor<float> c(cfg);
  c.add_tensor("w", {g.size()}, gradcomp::tensor_mode::compressed);
  if (!c.compress({gradcomp::span<const float>(g.data(), g.size())})) return {};
  std::vector<std::byte> out(c.max_message_bytes());
  const auto n = c.encode_message({}, gradcomp::span<std::byte>(out.data(), out.size()));
  if (!n) return {};
  out.resize(*n);
  return out;
}
}  // namespace

int main() {
  std::vector<float> v(1 << 16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(i % 97);
  const auto a = nvcc_topk(v, 100), b = gradcomp::exact_topk(v, 100);
  const auto ma = nvcc_dgc_message(v), mb = cxx_dgc_message(v);
  const bool ok = a == b && !ma.empty() && ma == mb;
  std::printf("nvcc and C++ translation units %s\n", ok ? "agree" : "DISAGREE");
  return ok ? 0 : 1;
}
