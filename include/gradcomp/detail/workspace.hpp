// Carves aligned arrays out of a caller-provided byte workspace. Sizes are computed by the same
// code path as the matching `*_workspace_bytes` function, so a workspace of that size always fits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../span.hpp"

namespace gradcomp {
namespace detail {

inline constexpr std::size_t workspace_alignment = 64;

// Bytes to reserve for `count` elements of T, including worst-case alignment padding.
template <class T>
constexpr std::size_t workspace_slot_bytes(std::size_t count) noexcept {
  return count * sizeof(T) + workspace_alignment;
}

class workspace_carver {
 public:
  explicit workspace_carver(span<std::byte> ws) noexcept : cur_(ws.data()), left_(ws.size()) {}

  // Returns nullptr when the workspace is exhausted.
  template <class T>
  T* take(std::size_t count) noexcept {
    const auto addr = reinterpret_cast<std::uintptr_t>(cur_);
    const std::size_t pad = (workspace_alignment - addr % workspace_alignment) % workspace_alignment;
    if (cur_ == nullptr && count == 0) return nullptr;
    if (pad > left_ || count > (left_ - pad) / sizeof(T)) return nullptr;
    T* p = reinterpret_cast<T*>(cur_ + pad);
    cur_ += pad + count * sizeof(T);
    left_ -= pad + count * sizeof(T);
    return p;
  }

 private:
  std::byte* cur_;
  std::size_t left_;
};

}  // namespace detail
}  // namespace gradcomp
