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

// std::bit_cast for C++17: the object representation of `from` as a `To` of the same size.
template <class To, class From>
inline To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of the same size");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

inline std::uint32_t float_bits(float f) noexcept { return bit_cast<std::uint32_t>(f); }
inline float bits_float(std::uint32_t u) noexcept { return bit_cast<float>(u); }
inline std::uint64_t double_bits(double d) noexcept { return bit_cast<std::uint64_t>(d); }
inline double bits_double(std::uint64_t u) noexcept { return bit_cast<double>(u); }

}  // namespace detail
}  // namespace gradcomp
