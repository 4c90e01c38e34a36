// Vector kernels of the wire codecs, chosen at run time like the other AVX2 kernels
// (detail/simd.hpp): the gap measurement of sparse sections (one pass that checks the indices and
// sizes every index coding), and the conversions of fp16 (F16C) and bf16 values. Each has a
// portable counterpart in wire/codecs/index.hpp or wire/codecs/values.hpp that is its reference:
// the results are bitwise the same, and on any value a coding refuses the callers fall back to
// the portable loop, so that the error reported is the one of the first such value.
//
// F16C is checked with CPUID on top of AVX2 (whose check includes the operating system's support
// of the YMM registers); GRADCOMP_CPU_SIMD=portable pins the portable loops here too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../detail/simd.hpp"

#if GRADCOMP_HAVE_AVX2_KERNELS
#include <cpuid.h>
#define GRADCOMP_TARGET_AVX2_F16C __attribute__((target("avx2,f16c")))
#endif

namespace gradcomp {
namespace detail {
namespace cpu {

// Sums over the gaps of an index list (d_0 = i_0, d_j = i_j - i_(j-1) - 1) for the sizes of the
// index codings: the quotients d >> r for three Rice parameters, the varint bytes beyond the
// first of each gap, and whether an index is out of range or not above its predecessor.
struct gap_sums {
  std::uint64_t quotients[3] = {0, 0, 0};
  std::uint64_t varint_extra = 0;
  bool bad = false;
};

// True when the CPU has F16C (and AVX2, whose check covers the operating system's support).
inline bool use_f16c() {
#if GRADCOMP_HAVE_AVX2_KERNELS
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  }();
  return has && use_avx2();
#else
  return false;
#endif
}

#if GRADCOMP_HAVE_AVX2_KERNELS

// The gaps of idx[first, first + 8m) for the largest m that fits below k, with first >= 1 (each
// gap needs its predecessor), added to `sums`; returns the first position not measured. Every
// lane keeps 32-bit sums: for a sound list the quotients of one lane add up to at most the sum of
// all gaps, below numel < 2^32, and an unsound list is flagged and its sums are not used.
GRADCOMP_TARGET_AVX2 inline std::size_t measure_gaps_avx2(const std::uint32_t* idx, std::size_t first,
                                                          std::size_t k, std::uint32_t n, const int r[3],
                                                          gap_sums& sums) {
  const __m256i numel = _mm256_set1_epi32(static_cast<int>(n));
  const __m256i one = _mm256_set1_epi32(1);
  const __m128i s0 = _mm_cvtsi32_si128(r[0]), s1 = _mm_cvtsi32_si128(r[1]), s2 = _mm_cvtsi32_si128(r[2]);
  const __m256i t1 = _mm256_set1_epi32(1 << 7), t2 = _mm256_set1_epi32(1 << 14);
  const __m256i t3 = _mm256_set1_epi32(1 << 21), t4 = _mm256_set1_epi32(1 << 28);
  __m256i q0 = _mm256_setzero_si256(), q1 = q0, q2 = q0, extra = q0, bad = q0;
  std::size_t j = first;
  for (; j + 8 <= k; j += 8) {
    const __m256i cur = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + j));
    const __m256i prev = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + j - 1));
    // cur >= n, or cur <= prev (unsigned comparisons through the unsigned maximum).
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_max_epu32(cur, numel), cur));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_max_epu32(cur, prev), prev));
    const __m256i d = _mm256_sub_epi32(_mm256_sub_epi32(cur, prev), one);
    q0 = _mm256_add_epi32(q0, _mm256_srl_epi32(d, s0));
    q1 = _mm256_add_epi32(q1, _mm256_srl_epi32(d, s1));
    q2 = _mm256_add_epi32(q2, _mm256_srl_epi32(d, s2));
    // One more varint byte for each threshold the gap reaches (comparisons give -1).
    extra = _mm256_sub_epi32(extra, _mm256_cmpeq_epi32(_mm256_max_epu32(d, t1), d));
    extra = _mm256_sub_epi32(extra, _mm256_cmpeq_epi32(_mm256_max_epu32(d, t2), d));
    extra = _mm256_sub_epi32(extra, _mm256_cmpeq_epi32(_mm256_max_epu32(d, t3), d));
    extra = _mm256_sub_epi32(extra, _mm256_cmpeq_epi32(_mm256_max_epu32(d, t4), d));
  }
  alignas(32) std::uint32_t lanes[5][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[0]), q0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[1]), q1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[2]), q2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[3]), extra);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[4]), bad);
  for (int l = 0; l < 8; ++l) {
    for (int c = 0; c < 3; ++c) sums.quotients[c] += lanes[c][l];
    sums.varint_extra += lanes[3][l];
    sums.bad |= lanes[4][l] != 0;
  }
  return j;
}

// binary32 -> binary16, rounding to nearest even, 8 values at a time (the tail is the caller's);
// returns false when a value is not finite or rounds beyond 65504, and then the caller encodes
// the section again with the portable loop to report the first such value.
GRADCOMP_TARGET_AVX2_F16C inline bool floats_to_half_f16c(const float* v, std::size_t n, std::byte* dst) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  __m256i top_in = _mm256_setzero_si256();
  __m128i top_out = _mm_setzero_si128();
  for (std::size_t j = 0; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(v + j);
    top_in = _mm256_max_epu32(top_in, _mm256_and_si256(_mm256_castps_si256(x), magnitude));
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    top_out = _mm_max_epu16(top_out, _mm_and_si128(h, _mm_set1_epi16(0x7fff)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * j), h);
  }
  const __m256i finite_in = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), top_in);  // top_in < 2^31
  const __m128i finite_out = _mm_cmplt_epi16(top_out, _mm_set1_epi16(0x7c00));           // top_out < 2^15
  return _mm256_movemask_epi8(finite_in) == -1 && _mm_movemask_epi8(finite_out) == 0xffff;
}

// binary16 -> binary32 (exact), 8 values at a time into out; n a multiple of 8.
GRADCOMP_TARGET_AVX2_F16C inline void half_to_floats_f16c(const std::byte* p, std::size_t n, float* out) {
  for (std::size_t j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j))));
}

// Eight binary32 values at q to bfloat16 in the low halves of 32-bit lanes (the portable
// float_to_bf16: add 0x7fff plus the lowest kept bit, keep the high half), updating the largest
// magnitude bits of the inputs and of the results.
GRADCOMP_TARGET_AVX2 inline __m256i floats_to_bf16_lanes(const float* q, __m256i& top_in, __m256i& top_out) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  top_in = _mm256_max_epu32(top_in, _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i b = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  top_out = _mm256_max_epu32(top_out, _mm256_and_si256(b, _mm256_set1_epi32(0x7fff)));
  return b;
}

// binary32 -> bfloat16, rounding to nearest even, 16 values at a time (the tail is the caller's);
// false when a value is not finite or rounds to infinity.
GRADCOMP_TARGET_AVX2 inline bool floats_to_bf16_avx2(const float* v, std::size_t n, std::byte* dst) {
  __m256i top_in = _mm256_setzero_si256(), top_out = top_in;
  for (std::size_t j = 0; j + 16 <= n; j += 16) {
    const __m256i lo = floats_to_bf16_lanes(v + j, top_in, top_out);
    const __m256i hi = floats_to_bf16_lanes(v + j + 8, top_in, top_out);
    // packus works within 128-bit halves: [lo0-3 hi0-3 | lo4-7 hi4-7], then the quarters in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * j), packed);
  }
  const __m256i finite_in = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f800000), top_in);
  const __m256i finite_out = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7f80), top_out);
  return _mm256_movemask_epi8(finite_in) == -1 && _mm256_movemask_epi8(finite_out) == -1;
}

#endif  // GRADCOMP_HAVE_AVX2_KERNELS

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
