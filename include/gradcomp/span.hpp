/// @file span.hpp
/// @brief `gradcomp::span`, a pointer + length view of memory in a named memory space (C++17 has
/// no `std::span`), and the host memory space.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "config.hpp"

namespace gradcomp {

/// The memory space of ordinary host memory: what the calling thread can read and write. The CPU
/// backend works in it; every other backend names its own space (docs/backends.md).
struct host_space {};

/// True when host code may dereference memory of `Space`. Specialise to `std::true_type` for a
/// backend whose memory the host reads directly (for example managed memory).
template <class Space>
struct is_host_accessible : std::is_same<Space, host_space> {};

/// `is_host_accessible<Space>::value` as a variable.
template <class Space>
inline constexpr bool is_host_accessible_v = is_host_accessible<Space>::value;

/**
 * @brief A non-owning view of `size()` contiguous elements of type `T` in memory space `Space`.
 *
 * gradcomp never takes framework tensors: every component reads and writes caller memory through
 * spans. The memory space is part of the type: a `span<float>` views host memory, a
 * `span<float, S>` views memory of a backend whose memory space is `S`. Only views of
 * host-accessible memory can be indexed or iterated by host code; any other view gives its
 * pointer through `data()` to that backend's operations, and moves between spaces only through
 * a backend's explicit copies. Spans of different spaces do not convert into each other.
 */
template <class T, class Space = host_space>
class span {
  template <class S>
  using if_host = std::enable_if_t<is_host_accessible<S>::value, int>;

 public:
  using element_type = T;                          ///< The element type, possibly const.
  using value_type = std::remove_cv_t<T>;          ///< The element type without cv-qualifiers.
  using size_type = std::size_t;                   ///< Type of lengths.
  using pointer = T*;                              ///< Pointer to an element.
  using iterator = T*;                             ///< Iterators are plain pointers.
  using memory_space = Space;                      ///< Where the viewed memory lives.

  /// An empty view.
  constexpr span() noexcept = default;
  /// A view of `size` elements starting at `data`.
  constexpr span(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  /// A view of a whole vector (const vectors give spans of const).
  template <class U, class A, class S = Space, if_host<S> = 0,
            class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  span(std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT implicit
  /// A view of a whole const vector.
  template <class U, class A, class S = Space, if_host<S> = 0,
            class = std::enable_if_t<std::is_convertible<const U (*)[], T (*)[]>::value>>
  span(const std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT
  /// A view of a whole array.
  template <class U, std::size_t N, class S = Space, if_host<S> = 0,
            class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  constexpr span(std::array<U, N>& a) noexcept : data_(a.data()), size_(N) {}  // NOLINT implicit
  /// Conversion from a span of a compatible type in the same space (`span<float>` to
  /// `span<const float>`).
  template <class U, class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  constexpr span(const span<U, Space>& other) noexcept  // NOLINT implicit
      : data_(other.data()), size_(other.size()) {}

  /// Pointer to the first element (in `Space`: only that space's backend may dereference it).
  GRADCOMP_HD constexpr T* data() const noexcept { return data_; }
  /// Number of elements.
  GRADCOMP_HD constexpr std::size_t size() const noexcept { return size_; }
  /// Size in bytes.
  GRADCOMP_HD constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True when the view has no elements.
  GRADCOMP_HD constexpr bool empty() const noexcept { return size_ == 0; }
  /// Element `i`, unchecked (host-accessible spaces only).
  template <class S = Space, if_host<S> = 0>
  GRADCOMP_HD constexpr T& operator[](std::size_t i) const noexcept {
    return data_[i];
  }
  /// Iterator to the first element (host-accessible spaces only).
  template <class S = Space, if_host<S> = 0>
  constexpr T* begin() const noexcept {
    return data_;
  }
  /// Iterator past the last element (host-accessible spaces only).
  template <class S = Space, if_host<S> = 0>
  constexpr T* end() const noexcept {
    return data_ + size_;
  }
  /// The view of `count` elements starting at `offset` (caller guarantees the range is inside).
  constexpr span subspan(std::size_t offset, std::size_t count) const noexcept {
    GRADCOMP_ASSERT(offset <= size_ && count <= size_ - offset);
    return span(data_ + offset, count);
  }
  /// The first `count` elements.
  constexpr span first(std::size_t count) const noexcept { return subspan(0, count); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Deduces `span<T>` (host memory) from a pointer and a length.
template <class T>
constexpr span<T> make_span(T* data, std::size_t size) noexcept {
  return span<T>(data, size);
}

/// A read-only view of the same elements, in the same space.
template <class T, class Space>
constexpr span<const T, Space> readonly(span<T, Space> s) noexcept {
  return s;
}

/// Views a vector as `span<const T>`.
template <class T, class A>
span<const T> as_const_span(const std::vector<T, A>& v) noexcept {
  return span<const T>(v.data(), v.size());
}

}  // namespace gradcomp
