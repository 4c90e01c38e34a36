// detail::adacomp_ops<cpu_backend>: the CPU kernels of AdaComp (adacomp/step_plan.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "step_plan.hpp"
#include "../backend.hpp"
#include "../span.hpp"

namespace gradcomp {
namespace detail {

template <>
struct adacomp_ops<cpu_backend> {
  // Bin by bin (gmax from one read; no count: apply writes the bins one after the other and counts
  // as it goes), then the chunks in the portable order and the tensor's record.
  template <class T>
  static void measure(const cpu_backend&, span<const T> g, span<const T> r, std::size_t bin, span<adacomp_bin<T>> bins,
                      span<adacomp_chunk<T>> chunks, span<std::uint32_t>, span<adacomp_record> records,
                      std::size_t t) {
    const std::size_t n = g.size();
    const T* rp = r.empty() ? nullptr : r.data();
    for (std::size_t b = 0; b < bins.size(); ++b)
      bins[b] = adacomp_measure_bin(g.data(), rp, b * bin, b * bin + bin < n ? b * bin + bin : n, false);
    for (std::size_t c = 0; c < chunks.size(); ++c) chunks[c] = adacomp_chunk_of(bins.data(), bins.size(), c);
    adacomp_fold(chunks.data(), chunks.size(), bins.size(), records[t]);
  }
  static void plan(const cpu_backend&, span<const adacomp_record> records, span<adacomp_step_record> step) {
    plan_step(records.data(), records.size(), step.data());
  }
  // The step, if the verdict allows: the bins' selections one after the other, or g whole.
  template <class T>
  static void apply(const cpu_backend&, span<const T> g, span<T> r, std::size_t bin, span<std::uint32_t> indices,
                    span<T> values,
                    span<const adacomp_bin<T>> bins, span<const std::uint32_t>, span<adacomp_record> records,
                    std::size_t t, span<const adacomp_step_record> step) {
    if (step[0].status != static_cast<std::int32_t>(errc::ok)) return;
    const std::size_t n = g.size();
    adacomp_record& rec = records[t];
    if (rec.compressed == 0) {
      for (std::size_t i = 0; i < n; ++i) values[i] = g[i];
      return;
    }
    const T scale = static_cast<T>(rec.scale);
    // adacomp_apply_bin's selection without a branch per element: every element is written at the
    // next free entry, which only a sent one keeps (the entry stays below the element's own index,
    // so within the buffers).
    std::size_t w = 0;
    for (std::size_t b = 0; b < bins.size(); ++b) {
      const key_t<T> gmax = bins[b].top_G;
      const std::size_t last = b * bin + bin < n ? b * bin + bin : n;
      for (std::size_t i = b * bin; i < last; ++i) {
        const T G = static_cast<T>(r[i] + g[i]);
        const bool sent = adacomp_sends(G, g[i], gmax);
        const T v = G > T(0) ? scale : -scale;
        indices[w] = static_cast<std::uint32_t>(i);
        values[w] = v;
        w += sent ? 1 : 0;
        r[i] = sent ? static_cast<T>(G - v) : G;
      }
    }
    rec.kept = w;
  }
};

}  // namespace detail
}  // namespace gradcomp
