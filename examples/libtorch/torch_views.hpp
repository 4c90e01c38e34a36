// The bridge between libtorch tensors and gradcomp: a tensor's own memory as a gradcomp view,
// and a gradcomp buffer as a tensor, both without copying. Part of the example, not the library.
#pragma once

#include <gradcomp/span.hpp>

#include <torch/torch.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace gctorch {

/// Throws std::invalid_argument unless `t` is a defined, contiguous float32 tensor in host memory:
/// what a view of its memory needs.
inline void check_viewable(const torch::Tensor& t, const std::string& what) {
  if (!t.defined()) throw std::invalid_argument(what + ": undefined tensor");
  if (t.scalar_type() != torch::kFloat32) throw std::invalid_argument(what + ": not float32");
  if (!t.device().is_cpu()) throw std::invalid_argument(what + ": not in host memory");
  if (!t.is_contiguous()) throw std::invalid_argument(what + ": not contiguous");
}

/// The tensor's own memory (no copy), writable.
inline gradcomp::span<float> view(torch::Tensor& t, const std::string& what = "tensor") {
  check_viewable(t, what);
  return gradcomp::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
}

/// The tensor's own memory (no copy), read only.
inline gradcomp::span<const float> const_view(const torch::Tensor& t, const std::string& what = "tensor") {
  check_viewable(t, what);
  return gradcomp::span<const float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
}

/// The tensor's shape, as gradcomp registers it.
inline std::vector<std::size_t> shape(const torch::Tensor& t) {
  std::vector<std::size_t> s;
  for (const auto d : t.sizes()) s.push_back(static_cast<std::size_t>(d));
  return s;
}

/// A tensor of shape `sizes` over `values` (no copy; the tensor does not own the memory, which
/// must outlive it). Read only by contract: torch's optimizers only read a parameter's gradient.
inline torch::Tensor tensor_over(gradcomp::span<const float> values, torch::IntArrayRef sizes) {
  std::int64_t n = 1;
  for (const auto d : sizes) n *= d;
  if (static_cast<std::size_t>(n) != values.size())
    throw std::invalid_argument("tensor_over: " + std::to_string(values.size()) + " values for " +
                                std::to_string(n) + " elements");
  return torch::from_blob(const_cast<float*>(values.data()), sizes, torch::kFloat32);
}

}  // namespace gctorch
