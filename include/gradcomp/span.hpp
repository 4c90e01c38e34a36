/// @file span.hpp
/// @brief `gradcomp::span`, a pointer + length view of caller memory (C++17 has no `std::span`).
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "config.hpp"

namespace gradcomp {

/**
 * @brief A non-owning view of `size()` contiguous elements of type `T`.
 *
 * gradcomp never takes framework tensors: every component reads and writes caller memory through
 * spans. Which memory space the pointer refers to (host or device) is fixed by the backend of the
 * call that receives it, and each call documents it.
 */
template <class T>
class span {
 public:
  using element_type = T;                          ///< The element type, possibly const.
  using value_type = std::remove_cv_t<T>;          ///< The element type without cv-qualifiers.
  using size_type = std::size_t;                   ///< Type of lengths.
  using pointer = T*;                              ///< Pointer to an element.
  using iterator = T*;                             ///< Iterators are plain pointers.

  /// An empty view.
  constexpr span() noexcept = default;
  /// A view of `size` elements starting at `data`.
  constexpr span(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  /// A view of a whole vector (const vectors give spans of const).
  template <class U, class A,
            class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  span(std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT implicit
  /// A view of a whole const vector.
  template <class U, class A,
            class = std::enable_if_t<std::is_convertible<const U (*)[], T (*)[]>::value>>
  span(const std::vector<U, A>& v) noexcept : data_(v.data()), size_(v.size()) {}  // NOLINT
  /// A view of a whole array.
  template <class U, std::size_t N,
            class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  constexpr span(std::array<U, N>& a) noexcept : data_(a.data()), size_(N) {}  // NOLINT implicit
  /// Conversion from a span of a compatible type (`span<float>` to `span<const float>`).
  template <class U, class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  constexpr span(const span<U>& other) noexcept  // NOLINT implicit
      : data_(other.data()), size_(other.size()) {}

  /// Pointer to the first element.
  GRADCOMP_HD constexpr T* data() const noexcept { return data_; }
  /// Number of elements.
  GRADCOMP_HD constexpr std::size_t size() const noexcept { return size_; }
  /// Size in bytes.
  GRADCOMP_HD constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  /// True when the view has no elements.
  GRADCOMP_HD constexpr bool empty() const noexcept { return size_ == 0; }
  /// Element `i`, unchecked.
  GRADCOMP_HD constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// Iterator to the first element.
  constexpr T* begin() const noexcept { return data_; }
  /// Iterator past the last element.
  constexpr T* end() const noexcept { return data_ + size_; }
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

/// Deduces `span<T>` from a pointer and a length.
template <class T>
constexpr span<T> make_span(T* data, std::size_t size) noexcept {
  return span<T>(data, size);
}

/// Views a vector as `span<const T>`.
template <class T, class A>
span<const T> as_const_span(const std::vector<T, A>& v) noexcept {
  return span<const T>(v.data(), v.size());
}

}  // namespace gradcomp
