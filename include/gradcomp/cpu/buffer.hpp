// The CPU backend's owning storage: host memory behind the buffer interface every backend
// provides (docs/backends.md): construction with a size (elements value-initialised), view(),
// size(), deep copies.
#pragma once

#include <cstddef>
#include <vector>

#include "../span.hpp"

namespace gradcomp {
namespace detail {
namespace cpu {

template <class T>
class host_buffer {
 public:
  using value_type = T;

  host_buffer() = default;
  explicit host_buffer(std::size_t n) : data_(n, T{}) {}

  span<T> view() noexcept { return span<T>(data_.data(), data_.size()); }
  span<const T> view() const noexcept { return span<const T>(data_.data(), data_.size()); }
  std::size_t size() const noexcept { return data_.size(); }
  bool empty() const noexcept { return data_.empty(); }
  // Host memory: the CPU backend's own code may use the pointers directly.
  T* data() noexcept { return data_.data(); }
  const T* data() const noexcept { return data_.data(); }

 private:
  std::vector<T> data_;
};

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
