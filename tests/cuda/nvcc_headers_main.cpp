// See nvcc_headers.cu: the same computations compiled by the C++ compiler and by nvcc, linked into
// one program, must give bitwise the same results. Exits 0 when they do.
#include <gradcomp/gradcomp.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "same_computation.hpp"

std::vector<std::uint32_t> nvcc_topk(const std::vector<float>& v, std::size_t k);
std::vector<std::byte> nvcc_dgc_message(const std::vector<float>& g);

int main() {
  std::vector<float> v(1 << 16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(i % 97);
  const auto a = nvcc_topk(v, 100), b = gradcomp::exact_topk(v, 100);
  const auto ma = nvcc_dgc_message(v), mb = dgc_message_of(v);
  const bool ok = a == b && !ma.empty() && ma == mb;
  std::printf("nvcc and C++ translation units %s\n", ok ? "agree" : "DISAGREE");
  return ok ? 0 : 1;
}
