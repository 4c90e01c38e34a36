// AVX2 versions of the CPU kernels that touch every element (the gradient's norm, the fused
// update-and-filter pass, the threshold filter), chosen at run time. The library is compiled for
// the baseline instruction set of its target; these functions carry their own target attribute,
// so a binary built for any x86-64 CPU uses AVX2 where the CPU has it and the portable kernels
// elsewhere. Both compute the same operations in the same order (multiplications and additions
// are never fused into FMA), so their results are bitwise identical: only the speed differs.
//
// Every compiler sees the same bodies (nvcc included: its host compiler takes the target
// attributes), so translation units built by different compilers agree on these inline functions.
//
// The level can be pinned with the environment variable GRADCOMP_CPU_SIMD=portable (read once)
// or, for tests, with simd_override.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "magnitude.hpp"
#include "ordered_sum.hpp"
#include "rounded.hpp"
#include "../momentum_kind.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(GRADCOMP_NO_AVX2)
#define GRADCOMP_HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#define GRADCOMP_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define GRADCOMP_HAVE_AVX2_KERNELS 0
#endif

namespace gradcomp {
namespace detail {
namespace cpu {

enum class simd_level : int { portable = 0, avx2 = 1 };

// Records the magnitude keys of v at next, next + stride, ... as a pass over v moves on: each
// take(v, last) records the positions below `last` not recorded yet. The fused pass calls it
// after each block, while the block is still in the L1 cache.
template <class T>
struct strided_sampler {
  std::size_t next = 0;
  std::size_t stride = 1;
  key_t<T>* out = nullptr;
  std::size_t count = 0;

  void take(const T* v, std::size_t last) noexcept {
    for (; next < last; next += stride) out[count++] = magnitude_key(v[next]);
  }
};

// Asks the CPU to fetch the cache line at p for writing; nothing where the compiler has no way
// to say it.
template <class T>
inline void prefetch_for_write(const T* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

// How many positions ahead scattered loops (gather_and_zero, the candidate pool's write-back)
// prefetch: scattered positions are cache misses, and asking for them early lets many be in
// flight at once.
inline constexpr std::size_t gather_prefetch_distance = 64;

// Blocks of the fused pass: small enough to stay in the L1 cache between the update and the
// reads that follow it (filter, samples).
inline constexpr std::size_t fused_block = 1024;

#if GRADCOMP_HAVE_AVX2_KERNELS
// Elements kept per block (0.4%) from which the next block appends branch-free: from there on,
// a branch around each append is mispredicted often enough to cost more than the branch-free
// append, which costs a few instructions per vector that memory-bound passes hide.
inline constexpr std::size_t dense_append_from = 4;
// The same for the read-only filter, whose branching path skips 32 elements per branch and whose
// memory time hides less: 1.2%.
inline constexpr std::size_t filter_dense_from = 12;
#endif

// -1: no override; otherwise a simd_level the dispatch uses instead of the detected one.
inline std::atomic<int>& simd_override() {
  static std::atomic<int> level{-1};
  return level;
}

inline simd_level detected_simd_level() {
  static const simd_level level = [] {
#if GRADCOMP_HAVE_AVX2_KERNELS
    const char* env = std::getenv("GRADCOMP_CPU_SIMD");
    if (env != nullptr && std::strcmp(env, "portable") == 0) return simd_level::portable;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? simd_level::avx2 : simd_level::portable;
#else
    return simd_level::portable;
#endif
  }();
  return level;
}

// The level the kernels use now.
inline simd_level active_simd_level() {
  const int forced = simd_override().load(std::memory_order_relaxed);
  if (forced >= 0) {
    // Never more than the CPU has.
    return static_cast<int>(detected_simd_level()) >= forced ? static_cast<simd_level>(forced)
                                                              : detected_simd_level();
  }
  return detected_simd_level();
}

inline bool use_avx2() { return active_simd_level() == simd_level::avx2; }

// True when the portable kernels are pinned (GRADCOMP_CPU_SIMD=portable or simd_override), not
// merely all this CPU has: the other instruction-set paths (CRC-32C's) follow it too.
inline bool portable_pinned() {
  const int forced = simd_override().load(std::memory_order_relaxed);
  if (forced >= 0) return forced == static_cast<int>(simd_level::portable);
  static const bool env = [] {
    const char* e = std::getenv("GRADCOMP_CPU_SIMD");
    return e != nullptr && std::strcmp(e, "portable") == 0;
  }();
  return env;
}

#if GRADCOMP_HAVE_AVX2_KERNELS

// rounded() (detail/rounded.hpp) for vectors: a vector of products that no later addition can
// fuse with, where the target has fused multiply-adds; nothing otherwise.
GRADCOMP_TARGET_AVX2 inline __m256 rounded_ps(__m256 x) noexcept {
#if GRADCOMP_ROUNDING_BARRIER == 1
  __asm__("" : "+x"(x));
#endif
  return x;
}
GRADCOMP_TARGET_AVX2 inline __m256d rounded_pd(__m256d x) noexcept {
#if GRADCOMP_ROUNDING_BARRIER == 1
  __asm__("" : "+x"(x));
#endif
  return x;
}

// Sum of squares of n floats in double into the sum_lanes lanes of one block, updated in the
// order of detail/ordered_sum.hpp (lane j takes the elements i with i % sum_lanes == j): eight
// independent vector sums, so the additions' latency does not limit the pass.
GRADCOMP_TARGET_AVX2 inline void sum_squares_avx2(const float* p, std::size_t n, double part[sum_lanes]) {
  static_assert(sum_lanes == 32, "four vectors of eight floats per iteration");
  __m256d acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_loadu_pd(part + 4 * j);
  std::size_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes) {
    for (int j = 0; j < 4; ++j) {
      const __m256 x = _mm256_loadu_ps(p + i + 8 * j);
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
      acc[2 * j] = _mm256_add_pd(acc[2 * j], rounded_pd(_mm256_mul_pd(lo, lo)));
      acc[2 * j + 1] = _mm256_add_pd(acc[2 * j + 1], rounded_pd(_mm256_mul_pd(hi, hi)));
    }
  }
  for (int j = 0; j < 8; ++j) _mm256_storeu_pd(part + 4 * j, acc[j]);
  for (std::size_t j = 0; i < n; ++i, ++j) {
    const double x = static_cast<double>(p[i]);
    part[j] += rounded(x * x);
  }
}

// The largest magnitude key of n floats, from four independent vector maxima (a key at or above
// the key of infinity means a NaN or an infinity is among them).
GRADCOMP_TARGET_AVX2 inline std::uint32_t largest_key_avx2(const float* p, std::size_t n) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff);
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), abs));
    m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)), abs));
    m2 = _mm256_max_epu32(m2, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 16)), abs));
    m3 = _mm256_max_epu32(m3, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 24)), abs));
  }
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
  std::uint32_t largest = 0;
  for (const std::uint32_t key : lanes) largest = std::max(largest, key);
  for (; i < n; ++i) largest = std::max(largest, magnitude_key(p[i]));
  return largest;
}

// The largest of (word & mask) over n little-endian words of 32 or 16 bits at p, at any
// alignment (the magnitude bits of wire values: a result at or above the exponent mask means a
// NaN or an infinity). Four independent vector maxima; the tail word by word.
GRADCOMP_TARGET_AVX2 inline std::uint32_t largest_masked_le32_avx2(const std::byte* p, std::size_t n,
                                                                   std::uint32_t mask) {
  const __m256i m = _mm256_set1_epi32(static_cast<int>(mask));
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const auto* q = reinterpret_cast<const __m256i*>(p + 4 * i);
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256(q), m));
    m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256(q + 1), m));
    m2 = _mm256_max_epu32(m2, _mm256_and_si256(_mm256_loadu_si256(q + 2), m));
    m3 = _mm256_max_epu32(m3, _mm256_and_si256(_mm256_loadu_si256(q + 3), m));
  }
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
  std::uint32_t largest = 0;
  for (const std::uint32_t w : lanes) largest = std::max(largest, w);
  for (; i < n; ++i) {
    std::uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    largest = std::max(largest, w & mask);
  }
  return largest;
}
GRADCOMP_TARGET_AVX2 inline std::uint32_t largest_masked_le16_avx2(const std::byte* p, std::size_t n,
                                                                   std::uint16_t mask) {
  const __m256i m = _mm256_set1_epi16(static_cast<short>(mask));
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const auto* q = reinterpret_cast<const __m256i*>(p + 2 * i);
    m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256(q), m));
    m1 = _mm256_max_epu16(m1, _mm256_and_si256(_mm256_loadu_si256(q + 1), m));
  }
  alignas(32) std::uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epu16(m0, m1));
  std::uint32_t largest = 0;
  for (const std::uint16_t w : lanes) largest = std::max<std::uint32_t>(largest, w);
  for (; i < n; ++i) {
    std::uint16_t w;
    std::memcpy(&w, p + 2 * i, 2);
    largest = std::max<std::uint32_t>(largest, static_cast<std::uint32_t>(w & mask));
  }
  return largest;
}

// The bits of lanes whose magnitude key is >= cut (keys and cut below 2^31: key >= cut exactly
// when cut - 1 - key is negative).
GRADCOMP_TARGET_AVX2 inline unsigned keys_at_least_mask(__m256 x, __m256i cut_minus_one) {
  const __m256i key = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_sub_epi32(cut_minus_one, key))));
}

// Appends the lanes set in `mask` (element i + lane) to (idx, keys) while below cap; returns
// the new count (which may pass cap: then nothing more is stored).
inline std::size_t append_lanes(unsigned mask, const float* v, std::size_t i, std::uint32_t* idx,
                                std::uint32_t* keys, std::size_t count, std::size_t cap) {
  while (mask != 0) {
    const unsigned lane = static_cast<unsigned>(__builtin_ctz(mask));
    mask &= mask - 1;
    if (count < cap) {
      std::uint32_t bits;
      std::memcpy(&bits, v + i + lane, sizeof bits);
      idx[count] = static_cast<std::uint32_t>(i + lane);
      keys[count] = bits & 0x7fffffffu;
    }
    ++count;
  }
  return count;
}

// For each 8-bit lane mask, the lanes set in it in ascending order, then zeros: the permutation
// that packs a vector's selected lanes to its front.
struct left_pack_table {
  std::uint32_t lanes[256][8];
};

constexpr left_pack_table make_left_pack_table() {
  left_pack_table t{};
  for (unsigned mask = 0; mask < 256; ++mask) {
    unsigned c = 0;
    for (unsigned lane = 0; lane < 8; ++lane)
      if ((mask >> lane) & 1u) t.lanes[mask][c++] = lane;
  }
  return t;
}

inline constexpr left_pack_table left_pack = make_left_pack_table();

// Appends the lanes of `x` (elements first .. first + 7) whose key is >= cut without a branch:
// eight entries are written at idx + count and keys + count, the kept ones packed to the front,
// and the count advances by their number. The caller guarantees count + 8 <= the buffers'
// capacity.
GRADCOMP_TARGET_AVX2 inline std::size_t append_at_least_packed(__m256 x, __m256i cut_minus_one,
                                                               std::size_t first, std::uint32_t* idx,
                                                               std::uint32_t* keys, std::size_t count) {
  const __m256i key = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
  const unsigned mask =
      static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_sub_epi32(cut_minus_one, key))));
  const __m256i perm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(left_pack.lanes[mask]));
  const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + count), _mm256_permutevar8x32_epi32(index, perm));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + count), _mm256_permutevar8x32_epi32(key, perm));
  return count + static_cast<std::size_t>(__builtin_popcount(mask));
}

// filter_at_least for float over [first, last), last - first a multiple of 32: every element
// with key >= cut, ascending. The caller filters the tail. Like the fused pass, each block of
// fused_block elements appends branch-free when its predecessor found many elements, and
// otherwise tests four vectors at once, so that a run of 32 without a kept element (the common
// case) costs one branch.
GRADCOMP_TARGET_AVX2 inline std::size_t filter_at_least_avx2(const float* v, std::size_t first,
                                                             std::size_t last, std::uint32_t cut,
                                                             std::uint32_t* idx, std::uint32_t* keys,
                                                             std::size_t count, std::size_t cap) {
  const __m256i c = _mm256_set1_epi32(static_cast<int>(cut) - 1);
  const __m256i abs = _mm256_set1_epi32(0x7fffffff);
  bool dense = false;
  for (std::size_t i = first; i < last;) {
    const std::size_t end = std::min(last, i + fused_block);
    const std::size_t before = count;
    if (dense && count + (end - i) <= cap) {
      for (; i < end; i += 8) count = append_at_least_packed(_mm256_loadu_ps(v + i), c, i, idx, keys, count);
    } else {
      for (; i < end; i += 32) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + 8);
        const __m256 d = _mm256_loadu_ps(v + i + 16), e = _mm256_loadu_ps(v + i + 24);
        const __m256i any = _mm256_or_si256(
            _mm256_or_si256(_mm256_sub_epi32(c, _mm256_and_si256(_mm256_castps_si256(a), abs)),
                            _mm256_sub_epi32(c, _mm256_and_si256(_mm256_castps_si256(b), abs))),
            _mm256_or_si256(_mm256_sub_epi32(c, _mm256_and_si256(_mm256_castps_si256(d), abs)),
                            _mm256_sub_epi32(c, _mm256_and_si256(_mm256_castps_si256(e), abs))));
        if (_mm256_movemask_ps(_mm256_castsi256_ps(any)) == 0) continue;
        count = append_lanes(keys_at_least_mask(a, c), v, i, idx, keys, count, cap);
        count = append_lanes(keys_at_least_mask(b, c), v, i + 8, idx, keys, count, cap);
        count = append_lanes(keys_at_least_mask(d, c), v, i + 16, idx, keys, count, cap);
        count = append_lanes(keys_at_least_mask(e, c), v, i + 24, idx, keys, count, cap);
        if (count > cap) return count;
      }
    }
    dense = count - before >= filter_dense_from;
  }
  return count;
}

// One vector of the momentum update (the portable kernel's arithmetic, operation by operation);
// returns the new v.
template <momentum_kind K>
GRADCOMP_TARGET_AVX2 inline __m256 accumulate8(__m256 m, __m256 c, const float* g, float* u, float* v) {
  const __m256 cg = rounded_ps(_mm256_mul_ps(c, _mm256_loadu_ps(g)));
  __m256 vv = _mm256_loadu_ps(v);
  if constexpr (K == momentum_kind::none) {
    (void)m;
    (void)u;
    vv = _mm256_add_ps(vv, cg);
  } else if constexpr (K == momentum_kind::vanilla) {
    const __m256 uu = _mm256_add_ps(rounded_ps(_mm256_mul_ps(m, _mm256_loadu_ps(u))), cg);
    _mm256_storeu_ps(u, uu);
    vv = _mm256_add_ps(vv, uu);
  } else {
    const __m256 uu = rounded_ps(_mm256_mul_ps(m, _mm256_add_ps(_mm256_loadu_ps(u), cg)));
    _mm256_storeu_ps(u, uu);
    vv = _mm256_add_ps(_mm256_add_ps(vv, uu), cg);
  }
  _mm256_storeu_ps(v, vv);
  return vv;
}

// The fused pass for float over [first, last), last - first a multiple of 8: updates u and v and
// appends every updated element with key >= cut to (idx, keys) after the `count` already there
// (counting past cap without storing; once past it, only updates). Returns the new count.
// After each block, on_block(v, end, count) runs while the block is still in the L1 cache.
// Where few elements pass (a few per thousand), a branch around the rare append is cheapest;
// where more pass, that branch is mispredicted often and the branch-free append is faster. Each
// block takes the way its predecessor's count calls for.
template <momentum_kind K, class OnBlock>
GRADCOMP_TARGET_AVX2 std::size_t accumulate_filter_avx2(float m, float c, const float* g, float* u,
                                                        float* v, std::size_t first, std::size_t last,
                                                        std::uint32_t cut, std::uint32_t* idx,
                                                        std::uint32_t* keys, std::size_t count,
                                                        std::size_t cap, OnBlock& on_block) {
  const __m256 vm = _mm256_set1_ps(m), vc = _mm256_set1_ps(c);
  const __m256i cm1 = _mm256_set1_epi32(static_cast<int>(cut) - 1);
  float* const no_u = nullptr;
  bool dense = false;
  for (std::size_t i = first; i < last;) {
    const std::size_t end = std::min(last, i + fused_block);
    const std::size_t before = count;
    if (dense && count + (end - i) <= cap) {
      for (; i < end; i += 8) {
        const __m256 vv = accumulate8<K>(vm, vc, g + i, K == momentum_kind::none ? no_u : u + i, v + i);
        count = append_at_least_packed(vv, cm1, i, idx, keys, count);
      }
    } else {
      for (; i < end && count <= cap; i += 8) {
        const unsigned mask = keys_at_least_mask(
            accumulate8<K>(vm, vc, g + i, K == momentum_kind::none ? no_u : u + i, v + i), cm1);
        if (mask != 0) count = append_lanes(mask, v, i, idx, keys, count, cap);
      }
      for (; i < end; i += 8)
        (void)accumulate8<K>(vm, vc, g + i, K == momentum_kind::none ? no_u : u + i, v + i);
    }
    dense = count - before >= dense_append_from;
    on_block(v, end, count);
  }
  return count;
}

#endif  // GRADCOMP_HAVE_AVX2_KERNELS

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
