// Compiled by nvcc: the public headers in a CUDA translation unit (host code only, so the test
// runs without a GPU), built into a shared library whose symbols are hidden except the two below,
// so that its copies of gradcomp's inline functions are its own and not merged with the C++
// program's. nvcc_headers_main.cpp, compiled by the C++ compiler, calls these functions next to
// the same computations of its own translation unit: both must agree bit for bit, which they do
// only if both compilers see the same inline bodies (no code that depends on __CUDACC__).
#include <gradcomp/gradcomp.hpp>

#include "same_computation.hpp"

#include <cstdint>
#include <vector>

__attribute__((visibility("default"))) std::vector<std::uint32_t> nvcc_topk(const std::vector<float>& v, std::size_t k) { return gradcomp::exact_topk(v, k); }

__attribute__((visibility("default"))) std::vector<std::byte> nvcc_dgc_message(const std::vector<float>& g) { return dgc_message_of(g); }
