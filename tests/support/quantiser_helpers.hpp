// Helpers of the quantising compressors' tests: gradient views, tensor names, bitwise comparison.
#pragma once

#include <gradcomp/span.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace gradcomp_test {

// Views of a model's gradients, one per tensor.
template <class T>
std::vector<gradcomp::span<const T>> views(const std::vector<std::vector<T>>& g) {
  std::vector<gradcomp::span<const T>> v;
  for (const auto& x : g) v.emplace_back(x.data(), x.size());
  return v;
}

// "t0", "t1", ... (appended, not prepended: GCC 12 warns falsely on a literal + std::string in C++20).
inline std::string tensor_name(std::size_t t) {
  std::string name = "t";
  name += std::to_string(t);
  return name;
}

// Whether a and b hold the same bits.
template <class T>
bool same_bits(const gradcomp::span<const T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A message held in a vector, as a view.
inline gradcomp::span<const std::byte> bytes(const std::vector<std::byte>& v) {
  return gradcomp::span<const std::byte>(v.data(), v.size());
}

}  // namespace gradcomp_test
