// The AdaComp step split into host plan and backend execution (docs/backends.md), as for the
// quantisers: per-bin measurements, per-tensor records and the step's verdict live in backend
// memory, the decisions below run where that memory is, and the kernels obey the verdict. A
// backend that runs AdaComp specialises detail::adacomp_ops (the CPU's is adacomp/cpu_ops.hpp).
//
// Per compressed tensor with gradient g and residual r: G = r + g and H = G + g (each rounded to
// T); the tensor is cut into bins of `bin` consecutive elements (the last one may be shorter);
// gmax(b) is the largest |G| of bin b; element i is sent iff G_i != 0 and |H_i| >= gmax(bin(i)),
// as sign(G_i) * scale, with scale = the mean of the bins' gmax rounded to binary32; r = G - sent.
// Magnitudes are compared as magnitude keys (detail/magnitude.hpp), never as floats.
//
// The order of the one sum is fixed, so every backend gets the same scale: the bins' gmax (as
// double) are summed from +0 in bin order within chunks of adacomp_chunk_bins bins, and the chunks'
// sums from +0 in chunk order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../backend.hpp"
#include "../config.hpp"
#include "../detail/magnitude.hpp"
#include "../detail/step_verdict.hpp"
#include "../error.hpp"

namespace gradcomp {
namespace detail {

// Bins of a chunk of the scale's sum.
inline constexpr std::size_t adacomp_chunk_bins = 256;
// Elements of a "bin" of a tensor sent whole: its bins only check g for NaN and infinity.
inline constexpr std::size_t adacomp_dense_bin = 4096;

// One tensor's record, in backend memory. The host writes `numel` and `compressed` at
// registration; the step writes the rest.
struct adacomp_record {
  std::uint64_t numel = 0;
  std::uint64_t count = 0;     // entries the step will send (a backend that counts in measure)
  std::uint64_t kept = 0;      // entries of the last step that was not refused
  double maxima_sum = 0.0;     // sum of the bins' gmax, in the fixed order
  float scale = 0.0f;          // the sent magnitude (0 for a tensor without bins)
  std::uint8_t g_finite = 1;   // every element of g is finite
  std::uint8_t G_finite = 1;   // every element of G is finite, and so is the scale in binary32
  std::uint8_t compressed = 0; // sent as AdaComp's selection (1) or whole (0)
};

// The step's verdict (detail/step_verdict.hpp).
using adacomp_step_record = step_status;

// One bin's measurements.
template <class T>
struct adacomp_bin {
  key_t<T> top_g = 0;       // largest magnitude key of g (a NaN or an infinity shows)
  key_t<T> top_G = 0;       // largest magnitude key of G: gmax
  std::uint32_t count = 0;  // elements the bin sends
};

// One chunk's sums over its bins.
template <class T>
struct adacomp_chunk {
  double maxima = 0.0;      // the bins' gmax summed from +0 in bin order
  key_t<T> top_g = 0;
  key_t<T> top_G = 0;
  std::uint64_t count = 0;
};

// Bins of a tensor of `numel` elements in bins of `bin`, and chunks of those bins.
GRADCOMP_HD inline std::size_t adacomp_bins(std::size_t numel, std::size_t bin) noexcept {
  return bin == 0 ? 0 : (numel + bin - 1) / bin;
}
GRADCOMP_HD inline std::size_t adacomp_chunks(std::size_t bins) noexcept {
  return (bins + adacomp_chunk_bins - 1) / adacomp_chunk_bins;
}

// G = r + g of element i (r null: a tensor sent whole, G = g).
template <class T>
GRADCOMP_HD T adacomp_G(const T* g, const T* r, std::size_t i) noexcept {
  return r != nullptr ? static_cast<T>(r[i] + g[i]) : g[i];
}

// Whether element i is sent, given G_i, g_i and its bin's gmax key. Both tests are evaluated (no
// short circuit), so that the kernels' loops over it compile without a branch per element: with
// one, GCC made the CPU's step three times slower (bench_dgc's BM_adacomp_step, 7.5 against 2.2 ms).
template <class T>
GRADCOMP_HD bool adacomp_sends(T G, T g, key_t<T> gmax) noexcept {
  const key_t<T> kG = magnitude_key(G), kS = magnitude_key(static_cast<T>(G + g));
  return (kG != 0) & (kS >= gmax);
}

// Measures the bin of elements [begin, end): gmax and the largest key of g in one read, then, with
// `count_sent`, the count of the elements it sends in a second read of the same (cached) elements (a
// backend that writes the bins one after the other counts as it writes instead).
template <class T>
GRADCOMP_HD adacomp_bin<T> adacomp_measure_bin(const T* g, const T* r, std::size_t begin, std::size_t end,
                                               bool count_sent = true) noexcept {
  adacomp_bin<T> b;
  for (std::size_t i = begin; i < end; ++i) {
    const key_t<T> kg = magnitude_key(g[i]), kG = magnitude_key(adacomp_G(g, r, i));
    b.top_g = kg > b.top_g ? kg : b.top_g;
    b.top_G = kG > b.top_G ? kG : b.top_G;
  }
  if (r == nullptr || !count_sent) return b;
  std::uint32_t count = 0;
  for (std::size_t i = begin; i < end; ++i) count += adacomp_sends(adacomp_G(g, r, i), g[i], b.top_G) ? 1u : 0u;
  b.count = count;
  return b;
}

// Chunk c's sums over bins [c * adacomp_chunk_bins, ...) of `bins`, in bin order.
template <class T>
GRADCOMP_HD adacomp_chunk<T> adacomp_chunk_of(const adacomp_bin<T>* b, std::size_t bins, std::size_t c) noexcept {
  adacomp_chunk<T> s;
  const std::size_t first = c * adacomp_chunk_bins;
  const std::size_t last = first + adacomp_chunk_bins < bins ? first + adacomp_chunk_bins : bins;
  for (std::size_t i = first; i < last; ++i) {
    s.maxima += static_cast<double>(value_of_key<T>(b[i].top_G));
    s.top_g = b[i].top_g > s.top_g ? b[i].top_g : s.top_g;
    s.top_G = b[i].top_G > s.top_G ? b[i].top_G : s.top_G;
    s.count += b[i].count;
  }
  return s;
}

// Folds a tensor's chunks (in chunk order) into its record: the sum, the count, the flags and
// the scale. A tensor sent whole only needs a finite g.
template <class T>
GRADCOMP_HD void adacomp_fold(const adacomp_chunk<T>* chunks, std::size_t count, std::size_t bins,
                              adacomp_record& r) noexcept {
  double sum = 0.0;
  key_t<T> top_g = 0, top_G = 0;
  std::uint64_t sent = 0;
  for (std::size_t c = 0; c < count; ++c) {
    sum += chunks[c].maxima;
    top_g = chunks[c].top_g > top_g ? chunks[c].top_g : top_g;
    top_G = chunks[c].top_G > top_G ? chunks[c].top_G : top_G;
    sent += chunks[c].count;
  }
  r.maxima_sum = sum;
  r.count = sent;
  r.g_finite = is_finite_key<T>(top_g) ? 1 : 0;
  r.scale = bins == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(bins));
  r.G_finite = r.compressed == 0 ? r.g_finite : (is_finite_key<T>(top_G) && std::isfinite(r.scale) ? 1 : 0);
}

// Sends the selection of the bin of elements [begin, end) with gmax key `gmax`: each sent index
// and its value at out_idx / out_val (in element order), r = G - sent for sent elements and
// r = G for the others. Returns the count written.
template <class T>
GRADCOMP_HD std::uint32_t adacomp_apply_bin(const T* g, T* r, std::size_t begin, std::size_t end, key_t<T> gmax,
                                            T scale, std::uint32_t* out_idx, T* out_val) noexcept {
  std::uint32_t w = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const T G = adacomp_G<T>(g, r, i);
    if (adacomp_sends(G, g[i], gmax)) {
      const T v = G > T(0) ? scale : -scale;
      out_idx[w] = static_cast<std::uint32_t>(i);
      out_val[w] = v;
      ++w;
      r[i] = static_cast<T>(G - v);
    } else {
      r[i] = G;
    }
  }
  return w;
}

// Per-backend kernels of AdaComp; each backend that runs it specialises this template:
//   measure<T>(b, g, r, bin, bins, chunks, offsets, records, t): with bins of `bin` elements,
//     bins[b], chunks[c] and records[t] (maxima_sum, scale, flags) from one read of g and r (r
//     empty for a tensor sent whole); a backend whose apply writes bins in parallel also counts
//     (the bins' and the record's count) and fills offsets with the exclusive scan of the counts
//   plan(b, records, step): plan_step
//   apply<T>(b, g, r, bin, indices, values, bins, offsets, records, t, step): if the verdict allows, a
//     compressed tensor's selection in indices / values (ascending), r = G - sent, and
//     records[t].kept = records[t].count; a tensor sent whole: values = g
// The primary template is left undefined: a backend without them does not compile AdaComp.
template <class Backend>
struct adacomp_ops;

// The verdict, from the records, in tensor order: a NaN or an infinity in a gradient refuses the
// step with errc::non_finite_input; otherwise a G or a scale that is not finite refuses it with
// errc::state_overflow.
GRADCOMP_HD inline void plan_step(const adacomp_record* r, std::size_t count, adacomp_step_record* step) noexcept {
  step->status = finite_verdict(r, count, &adacomp_record::g_finite, &adacomp_record::G_finite);
}

// A tensor's work items in the whole-model launches (model_items, backend.hpp): in space 0 its bins
// when compressed (else its elements), in space 1 its bins, in space 2 its chunks of bins.
inline model_items adacomp_model_items(std::size_t numel, std::size_t bin, bool compressed) noexcept {
  const std::size_t bins = adacomp_bins(numel, bin);
  model_items items;
  items.count[0] = compressed ? bins : numel;
  items.count[1] = bins;
  items.count[2] = adacomp_chunks(bins);
  return items;
}

}  // namespace detail
}  // namespace gradcomp
