// The factor quantisers of Indirect Stochastic Gradient Quantization (Abdi and Fekri, "Indirect
// Stochastic Gradient Quantization and its Application in Distributed Deep Learning", AAAI 2020):
// a fully connected layer's weight gradient is G = X^T Delta (X: B x n_in, the layer's input;
// Delta: B x n_out, the back-propagated error), and the two factors are quantised instead of G.
//
// Dithered (unbiased): per bucket of consecutive elements of a factor, scale = max |w| / s; an
// element that is exactly 0 is sent as the zero symbol and rebuilt as 0; any other as
// q = floor(w / scale + u + 1/2) in [-s, s], with u uniform in (-1/2, 1/2) drawn from a key both
// sides know, rebuilt as scale * (q - u) (subtractive dither: the error is uniform in
// [-scale/2, scale/2] and independent of w, so E[rebuilt] = w). With independent draws for the
// two factors, E[X^^T Delta^] = X^T Delta.
//
// Minimum MSE (deterministic): each factor's elements are assigned to one of L levels (2, 4 or 8)
// of its largest magnitude (exact zeros to a zero level of their own), then the levels' values are
// refitted by least squares on ||X^^T Delta^ - X^T Delta||_F, one factor at a time with the other
// fixed; each refit minimises the error over its factor's values, so the error never increases.
// Every product the refit needs is a B x B Gram matrix, never an n_in x n_out one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../config.hpp"
#include "../detail/bytes.hpp"
#include "../wire/codecs/isgq.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/rounded.hpp"

namespace gradcomp {
namespace detail {

// ---- dithered ----

// One factor, dithered: its buckets' scales (binary32) and its codes as the wire carries them
// (wire/codecs/isgq.hpp): 0 for an exact zero, q + s + 1 for level q in [-s, s].
struct isgq_dithered_factor {
  std::vector<float> scales;
  std::vector<std::uint8_t> codes;
};

// The level q of a non-zero code under s levels.
inline std::int32_t isgq_code_level(std::uint8_t code, std::uint32_t s) noexcept {
  return static_cast<std::int32_t>(code) - 1 - static_cast<std::int32_t>(s);
}

// ISGQ's kernels on a backend (isgq/cpu_ops.hpp, isgq/thrust_ops.hpp): `dither` quantises a
// factor in the backend's memory, one bucket at a time (isgq_dither_bucket).
template <class Backend>
struct isgq_ops;

// Whether a binary32 value is finite (for devices too).
GRADCOMP_HD inline bool isgq_finite(float f) noexcept { return (float_bits(f) & 0x7f800000u) != 0x7f800000u; }

// Bucket [first, last) of a factor: its scale max |w| / s rounded up to binary32 (infinite when
// beyond binary32) and each element's code, the dithers of (key, step, stream, factor) drawn one
// Philox block per four elements. Every backend's kernel (one thread per bucket on Thrust).
template <class T>
GRADCOMP_HD void isgq_dither_bucket(const T* w, std::size_t first, std::size_t last, std::uint32_t s,
                                    std::uint64_t key, std::uint64_t step, std::uint32_t stream, std::uint32_t factor,
                                    float* scale_out, std::uint8_t* codes) noexcept {
  // The largest magnitude, as the largest magnitude key (an integer maximum, which compilers
  // vectorise; the values are finite).
  key_t<T> largest = 0;
  for (std::size_t i = first; i < last; ++i) {
    const key_t<T> k = magnitude_key(w[i]);
    largest = k > largest ? k : largest;
  }
  const double top = static_cast<double>(value_of_key<T>(largest));
  // Rounded up, so that |w| / scale <= s holds for the rounded scale.
  float scale = static_cast<float>(top / s);
  if (static_cast<double>(scale) * s < top) scale = bits_float(float_bits(scale) + 1u);
  *scale_out = scale;
  if (!isgq_finite(scale)) return;  // beyond binary32: the caller refuses the step
  isgq_dither_stream dither(key, step, stream, factor);
  for (std::size_t i = first; i < last; ++i) {
    if (w[i] == T(0)) {
      codes[i] = 0;
      continue;
    }
    // floor(w / scale + u + 1/2), within [-s - 1/2, s + 1): never outside [-s, s] but clamped.
    const double x = static_cast<double>(w[i]) / scale + dither(static_cast<std::uint32_t>(i)) + 0.5;
    auto q = static_cast<std::int64_t>(x);
    if (static_cast<double>(q) > x) --q;
    const auto limit = static_cast<std::int64_t>(s);
    q = q < -limit ? -limit : (q > limit ? limit : q);
    codes[i] = static_cast<std::uint8_t>(q + limit + 1);
  }
}

// Quantises the n values of `w` (a factor, row-major) in buckets of `bucket` with levels
// q in [-s, s] (s <= isgq_max_dither_levels), the dithers of (key, step, stream, factor). Values
// must be finite; false when a scale does not fit binary32 (nothing else is then meaningful).
template <class T>
bool isgq_dither_quantise(const T* w, std::size_t n, std::size_t bucket, std::uint32_t s, std::uint64_t key,
                          std::uint64_t step, std::uint32_t stream, std::uint32_t factor, isgq_dithered_factor& f) {
  f.scales.assign((n + bucket - 1) / bucket, 0.0f);
  f.codes.resize(n);
  bool fits = true;
  for (std::size_t k = 0; k < f.scales.size(); ++k) {
    isgq_dither_bucket(w, k * bucket, std::min(n, (k + 1) * bucket), s, key, step, stream, factor, &f.scales[k],
                       f.codes.data());
    fits = fits && isgq_finite(f.scales[k]);
  }
  return fits;
}

// The rebuilt factor: scale * (q - u) in binary64, exactly 0 for code 0 (as a receiver rebuilds it).
inline std::vector<double> isgq_dither_rebuild(const isgq_dithered_factor& f, std::size_t bucket, std::uint32_t s,
                                               std::uint64_t key, std::uint64_t step, std::uint32_t stream,
                                               std::uint32_t factor) {
  std::vector<double> w(f.codes.size(), 0.0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (f.codes[i] == 0) continue;
    const double u = isgq_dither(key, step, stream, factor, static_cast<std::uint32_t>(i));
    w[i] = static_cast<double>(f.scales[i / bucket]) * (static_cast<double>(isgq_code_level(f.codes[i], s)) - u);
  }
  return w;
}

// acc += X^T Delta for X (batch x n_in) and Delta (batch x n_out), row-major, acc n_in x n_out
// row-major, summed in double in batch order per element.
template <class T>
void isgq_add_product(const T* x, const T* delta, std::size_t batch, std::size_t n_in, std::size_t n_out,
                      double* acc) {
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < n_in; ++i) {
      const double xi = static_cast<double>(x[b * n_in + i]);
      if (xi == 0.0) continue;
      for (std::size_t j = 0; j < n_out; ++j)
        acc[i * n_out + j] += rounded(xi * static_cast<double>(delta[b * n_out + j]));
    }
}

// ---- minimum MSE ----

// One factor, quantised to levels: each element's level (0 .. levels - 1, or `levels` for an
// exact zero) and each level's value.
struct isgq_level_factor {
  std::vector<std::uint8_t> level;
  std::vector<double> value;  // levels entries; the zero level's value is 0 and not stored
};

// The initial assignment: levels evenly spaced over [-m, m] (m = max |w|) at the centres of L equal
// cells, each element to its cell.
template <class T>
isgq_level_factor isgq_assign_levels(const T* w, std::size_t n, std::uint32_t levels) {
  isgq_level_factor f;
  double m = 0.0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(w[i])));
  f.value.resize(levels);
  for (std::uint32_t l = 0; l < levels; ++l) f.value[l] = m * (-1.0 + (rounded(2.0 * l) + 1.0) / levels);
  f.level.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (w[i] == T(0)) {
      f.level[i] = static_cast<std::uint8_t>(levels);
      continue;
    }
    const double cell = m > 0.0 ? (static_cast<double>(w[i]) / m + 1.0) * 0.5 * levels : 0.0;
    f.level[i] = static_cast<std::uint8_t>(std::min<double>(levels - 1, std::max(0.0, std::floor(cell))));
  }
  return f;
}

// The factor's values from its levels.
inline std::vector<double> isgq_level_values(const isgq_level_factor& f) {
  std::vector<double> w(f.level.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = f.level[i] < f.value.size() ? f.value[f.level[i]] : 0.0;
  return w;
}

// The B x B Gram matrix P Q^T of two row-major matrices with `batch` rows of n columns.
inline std::vector<double> isgq_gram(const double* p, const double* q, std::size_t batch, std::size_t n) {
  std::vector<double> g(batch * batch, 0.0);
  for (std::size_t a = 0; a < batch; ++a)
    for (std::size_t b = 0; b < batch; ++b) {
      double s = 0.0;
      for (std::size_t i = 0; i < n; ++i) s += rounded(p[a * n + i] * q[b * n + i]);
      g[a * batch + b] = s;
    }
  return g;
}

// ||A^T B - C^T D||_F^2 for row-major batch x n_a (A, C) and batch x n_b (B, D) matrices, through
// Gram matrices: tr((AA^T)(BB^T)) - 2 tr((AC^T)(DB^T)) + tr((CC^T)(DD^T)).
inline double isgq_product_error(const std::vector<double>& a, const std::vector<double>& b,
                                 const std::vector<double>& c, const std::vector<double>& d, std::size_t batch,
                                 std::size_t n_a, std::size_t n_b) {
  const auto aa = isgq_gram(a.data(), a.data(), batch, n_a), bb = isgq_gram(b.data(), b.data(), batch, n_b);
  const auto ac = isgq_gram(a.data(), c.data(), batch, n_a), db = isgq_gram(d.data(), b.data(), batch, n_b);
  const auto cc = isgq_gram(c.data(), c.data(), batch, n_a), dd = isgq_gram(d.data(), d.data(), batch, n_b);
  double e = 0.0;
  for (std::size_t i = 0; i < batch; ++i)
    for (std::size_t j = 0; j < batch; ++j)
      e += rounded(aa[i * batch + j] * bb[j * batch + i]) -
           rounded(2.0 * ac[i * batch + j] * db[j * batch + i]) + rounded(cc[i * batch + j] * dd[j * batch + i]);
  return e;
}

// Refits the values of factor `f` (batch x n, the original `w`) so that ||F^^T O^ - W^T O||_F is
// least, with the other factor's rebuilt values `other_hat` and original `other` (batch x m) fixed.
// With K = O^ O^^T and N = W^T (O O^^T) (n x batch), the normal equations are
// sum_m A_lm c_m = b_l, A_lm = sum_{b,b',i} [level(b,i)=l][level(b',i)=m] K_bb',
// b_l = sum_{b,i} [level(b,i)=l] N_ib. Levels no element uses keep their value.
template <class T>
void isgq_refit(isgq_level_factor& f, const T* w, std::size_t batch, std::size_t n, const std::vector<double>& other_hat,
                const std::vector<double>& other, std::size_t m) {
  const std::size_t L = f.value.size();
  const auto k = isgq_gram(other_hat.data(), other_hat.data(), batch, m);
  const auto oo = isgq_gram(other.data(), other_hat.data(), batch, m);  // O O^^T
  std::vector<double> a(L * L, 0.0), rhs(L, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t b = 0; b < batch; ++b) {
      const std::size_t l = f.level[b * n + i];
      if (l >= L) continue;
      double nib = 0.0;  // N_ib = sum_b' w[b'][i] (O O^^T)_{b' b}
      for (std::size_t b2 = 0; b2 < batch; ++b2)
        nib += rounded(static_cast<double>(w[b2 * n + i]) * oo[b2 * batch + b]);
      rhs[l] += nib;
      for (std::size_t b2 = 0; b2 < batch; ++b2) {
        const std::size_t l2 = f.level[b2 * n + i];
        if (l2 < L) a[l * L + l2] += k[b * batch + b2];
      }
    }
  // The used levels' system, by Gaussian elimination with partial pivoting.
  std::vector<std::size_t> used;
  for (std::size_t l = 0; l < L; ++l)
    if (a[l * L + l] > 0.0) used.push_back(l);
  const std::size_t u = used.size();
  std::vector<double> s(u * (u + 1));
  for (std::size_t r = 0; r < u; ++r) {
    for (std::size_t c = 0; c < u; ++c) s[r * (u + 1) + c] = a[used[r] * L + used[c]];
    s[r * (u + 1) + u] = rhs[used[r]];
  }
  for (std::size_t col = 0; col < u; ++col) {
    std::size_t piv = col;
    for (std::size_t r = col + 1; r < u; ++r)
      if (std::fabs(s[r * (u + 1) + col]) > std::fabs(s[piv * (u + 1) + col])) piv = r;
    if (s[piv * (u + 1) + col] == 0.0) return;  // singular: keep the values
    if (piv != col)
      for (std::size_t c = 0; c <= u; ++c) std::swap(s[piv * (u + 1) + c], s[col * (u + 1) + c]);
    for (std::size_t r = 0; r < u; ++r) {
      if (r == col) continue;
      const double factor = s[r * (u + 1) + col] / s[col * (u + 1) + col];
      for (std::size_t c = col; c <= u; ++c) s[r * (u + 1) + c] -= rounded(factor * s[col * (u + 1) + c]);
    }
  }
  for (std::size_t r = 0; r < u; ++r) f.value[used[r]] = s[r * (u + 1) + u] / s[r * (u + 1) + r];
}

}  // namespace detail
}  // namespace gradcomp
