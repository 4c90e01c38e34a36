// Compiled by nvcc: the public headers in a CUDA translation unit (host code only, so the test
// runs without a GPU). nvcc_headers_main.cpp, compiled by the C++ compiler, calls these functions
// next to the same ones of its own translation unit: both must agree bit for bit, which they can
// only if both compilers see the same inline bodies (no code that depends on __CUDACC__).
#include <gradcomp/gradcomp.hpp>

#include <cstdint>
#include <vector>

std::vector<std::uint32_t> nvcc_topk(const std::vector<float>& v, std::size_t k) { return gradcomp::exact_topk(v, k); }

std::vector<std::byte> nvcc_dgc_message(const std::vector<float>& g) {
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
