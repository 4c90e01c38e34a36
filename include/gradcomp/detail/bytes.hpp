// Little-endian loads and stores at any alignment. The wire format is little-endian on every
// platform; these helpers are the only place that knows the host byte order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gradcomp {
namespace detail {

inline constexpr bool host_is_little_endian() noexcept {
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return false;
#else
  return true;
#endif
}

template <class U>
inline U byteswap(U v) noexcept {
  U r = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) r = static_cast<U>((r << 8) | ((v >> (8 * i)) & 0xff));
  return r;
}

template <class U>
inline U load_le(const std::byte* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return host_is_little_endian() ? v : byteswap(v);
}

template <class U>
inline void store_le(std::byte* p, U v) noexcept {
  if (!host_is_little_endian()) v = byteswap(v);
  std::memcpy(p, &v, sizeof(U));
}

inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint64_t double_bits(double d) noexcept {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
inline double bits_double(std::uint64_t u) noexcept {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

}  // namespace detail
}  // namespace gradcomp
