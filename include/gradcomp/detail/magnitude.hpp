// Magnitude keys: |v| as an unsigned integer whose order equals the order of |v| for every
// non-NaN value. Selection works on these keys, so it never compares floats and never depends on
// the rounding mode; NaN keys sort above the infinity key, which is how they are detected.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "../config.hpp"

namespace gradcomp {
namespace detail {

// The keys of an IEEE 754 binary format T held in the unsigned Key of its width: the sign bit is
// masked off, and the infinity key has every exponent bit set and no mantissa bit.
template <class T, class Key>
struct ieee_magnitude {
  static_assert(sizeof(T) == sizeof(Key) && std::numeric_limits<T>::is_iec559, "an IEEE 754 binary format");
  using key_type = Key;
  static constexpr int key_bits = 8 * static_cast<int>(sizeof(Key)) - 1;
  static constexpr key_type abs_mask = static_cast<Key>(~Key(0) >> 1);
  static constexpr key_type inf_key =
      abs_mask & static_cast<Key>(~((Key(1) << (std::numeric_limits<T>::digits - 1)) - 1));
};

template <class T>
struct magnitude_traits;
template <>
struct magnitude_traits<float> : ieee_magnitude<float, std::uint32_t> {};
template <>
struct magnitude_traits<double> : ieee_magnitude<double, std::uint64_t> {};
static_assert(magnitude_traits<float>::inf_key == 0x7f800000u && magnitude_traits<float>::abs_mask == 0x7fffffffu &&
              magnitude_traits<double>::inf_key == 0x7ff0000000000000ull && magnitude_traits<float>::key_bits == 31,
              "binary32's and binary64's magnitude keys");

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
