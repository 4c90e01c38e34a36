// Magnitude keys: |v| as an unsigned integer whose order equals the order of |v| for every
// non-NaN value. Selection works on these keys, so it never compares floats and never depends on
// the rounding mode; NaN keys sort above the infinity key, which is how they are detected.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../config.hpp"

namespace gradcomp {
namespace detail {

template <class T>
struct magnitude_traits;

template <>
struct magnitude_traits<float> {
  using key_type = std::uint32_t;
  static constexpr key_type abs_mask = 0x7fffffffu;
  static constexpr key_type inf_key = 0x7f800000u;
  static constexpr int key_bits = 31;
};

template <>
struct magnitude_traits<double> {
  using key_type = std::uint64_t;
  static constexpr key_type abs_mask = 0x7fffffffffffffffull;
  static constexpr key_type inf_key = 0x7ff0000000000000ull;
  static constexpr int key_bits = 63;
};

template <class T>
using key_t = typename magnitude_traits<T>::key_type;

template <class T>
inline constexpr bool is_selectable_v = std::is_same<T, float>::value || std::is_same<T, double>::value;

template <class T>
GRADCOMP_HD inline key_t<T> magnitude_key(T v) noexcept {
  key_t<T> bits;
  std::memcpy(&bits, &v, sizeof(T));
  return bits & magnitude_traits<T>::abs_mask;
}

// The non-negative value whose magnitude key is `key`.
template <class T>
GRADCOMP_HD inline T value_of_key(key_t<T> key) noexcept {
  T v;
  std::memcpy(&v, &key, sizeof(T));
  return v;
}

template <class T>
GRADCOMP_HD inline bool is_nan_key(key_t<T> key) noexcept {
  return key > magnitude_traits<T>::inf_key;
}

template <class T>
GRADCOMP_HD inline bool is_finite_key(key_t<T> key) noexcept {
  return key < magnitude_traits<T>::inf_key;
}

}  // namespace detail
}  // namespace gradcomp
