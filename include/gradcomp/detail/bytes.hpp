// Little-endian loads and stores at any alignment. The wire format is little-endian on every
// platform; these helpers are the only place that knows the host byte order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../config.hpp"

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#define GRADCOMP_HAVE_STREAMING_STORES 1
#else
#define GRADCOMP_HAVE_STREAMING_STORES 0
#endif

namespace gradcomp {
namespace detail {

GRADCOMP_HD inline constexpr bool host_is_little_endian() noexcept {
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return false;
#else
  return true;
#endif
}

template <class U>
GRADCOMP_HD inline U byteswap(U v) noexcept {
  U r = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) r = static_cast<U>((r << 8) | ((v >> (8 * i)) & 0xff));
  return r;
}

template <class U>
GRADCOMP_HD inline U load_le(const std::byte* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return host_is_little_endian() ? v : byteswap(v);
}

template <class U>
GRADCOMP_HD inline void store_le(std::byte* p, U v) noexcept {
  if (!host_is_little_endian()) v = byteswap(v);
  std::memcpy(p, &v, sizeof(U));
}

// std::bit_cast for C++17: the object representation of `from` as a `To` of the same size.
template <class To, class From>
GRADCOMP_HD inline To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of the same size");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

GRADCOMP_HD inline std::uint32_t float_bits(float f) noexcept { return bit_cast<std::uint32_t>(f); }
GRADCOMP_HD inline float bits_float(std::uint32_t u) noexcept { return bit_cast<float>(u); }
GRADCOMP_HD inline std::uint64_t double_bits(double d) noexcept { return bit_cast<std::uint64_t>(d); }
GRADCOMP_HD inline double bits_double(std::uint64_t u) noexcept { return bit_cast<double>(u); }

// The smallest binary32 value >= x, for x >= 0 finite (infinity beyond binary32's range).
GRADCOMP_HD inline float binary32_at_least(double x) noexcept {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) < x) f = bits_float(float_bits(f) + 1u);
  return f;
}

// Copies n bytes to dst with non-temporal stores where the CPU has them (SSE2, on every x86-64
// CPU): the destination's cache lines are written without being read first and without
// displacing cached data, which pays for a destination larger than the caches that nothing reads
// soon. A plain memcpy elsewhere. Call streaming_fence() before the bytes are handed to another
// thread.
inline void copy_streaming(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
#if GRADCOMP_HAVE_STREAMING_STORES
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(dst) % 16;
  const std::size_t head = misaligned == 0 ? 0 : (16 - misaligned < n ? 16 - misaligned : n);
  std::memcpy(dst, src, head);
  std::size_t j = head;
  for (; j + 64 <= n; j += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + j), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + j + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + j + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + j + 48), d);
  }
  for (; j + 16 <= n; j += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + j), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j)));
  std::memcpy(dst + j, src + j, n - j);
#else
  std::memcpy(dst, src, n);
#endif
}

// Orders the non-temporal stores of copy_streaming before every later store.
inline void streaming_fence() noexcept {
#if GRADCOMP_HAVE_STREAMING_STORES
  _mm_sfence();
#endif
}

}  // namespace detail
}  // namespace gradcomp
