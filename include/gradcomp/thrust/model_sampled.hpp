// DGC's sampled threshold for every tensor of a model at once on the portable Thrust backend: for
// each tensor, cpu::sampled_threshold_select of its error buffer, its indices and every field of
// its selection result bitwise the CPU's (thrust/sampled.hpp does one tensor), in a fixed number of
// launches whatever the tensors. Every per-tensor decision of the single-tensor algorithm runs on
// one thread per tensor of a launch over the tensors; every pass over the data is one launch over
// the whole model:
// - each tensor's k (the caller's mode), sampling plan and seed, on the device;
// - the samples of every tensor (strided from the CPU's offset, or the uniform draws that the
//   bounded draw accepts, compacted at once with room for a few rejected each; a tensor with more
//   rejections walks its draws on), one sort by tensor and descending key, each tensor's rounds'
//   thresholds;
// - each tensor's rounds counted by one segmented reduction per `rounds_per_count` rounds, each
//   tensor's decision (the CPU's adaptation loop);
// - the exact paths (the exact top-k of the whole input, of the candidates at the chosen
//   threshold, or the plain radix select where the input is too small to sample) as one model-wide
//   top-k (thrust/model_select.hpp), each tensor in its own mode;
// - the candidates of the tensors that take the first k by index or every candidate, compacted
//   at once (a pass that reads no element where no tensor takes them), and taken.
#pragma once

#include <cstddef>
#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include "../cpu/select_kernels.hpp"
#include "../detail/rng.hpp"
#include "../selection_types.hpp"
#include "model_select.hpp"
#include "model_table.hpp"
#include "sampled.hpp"

namespace gradcomp {
namespace detail {
namespace thrust_impl {

// How a tensor selects in a model-wide sampled threshold.
enum class model_sampled_kind : std::uint32_t {
  none = 0,     // nothing (no error buffer, or k = 0 from the mode): skipped
  exact = 1,    // too small to sample: the plain radix select (cpu::plan_sampling's `exact`)
  sampled = 2,  // the sample, the rounds, and the path they decide
};

// One tensor's sampled threshold, in System's memory.
template <class T>
struct model_sampled_tensor {
  sampled_device_state st;  // thrust/sampled.hpp: the rounds' outcome and the decided path
  cpu::sample_plan plan;
  std::uint64_t k;
  std::uint64_t seed;
  std::uint64_t offset;         // the strided sample's first position
  std::uint64_t samples;        // its sample's size
  std::uint64_t draws;          // uniform draws compacted at once (the sample and a slack)
  std::uint64_t accepted_first;  // its accepted draws in their compaction
  std::uint64_t accepted_end;
  std::uint64_t take_first;  // its candidates in their compaction (the first k, or every one)
  std::uint64_t take_end;
  model_sampled_kind kind;
  std::uint32_t reserved;
};
// Tensor t's k, plan, seed and sample size (its state marked skipped where it does not sample, or
// the gate is closed); the first thread clears the compactions' counts.
template <class T, class KOf>
struct model_sampled_plan_op {
  model_sampled_tensor<T>* sel;
  std::size_t space;
  KOf k_of;
  sampled_threshold_config cfg;
  std::uint64_t seed;
  std::uint64_t step;
  const std::int32_t* gate;
  std::uint64_t* counts;  // 3: accepted draws, candidates taken, tensors that take candidates
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t) const {
    if (t == 0) counts[0] = counts[1] = counts[2] = 0;
    model_sampled_tensor<T> y{};
    y.st.action = static_cast<std::int32_t>(sampled_action::skip);
    const std::uint64_t n = x.items[space];
    y.k = x.e == nullptr ? 0 : k_of(static_cast<std::size_t>(n));
    if (x.e != nullptr) {
      y.plan = cpu::plan_sampling(cfg, static_cast<std::size_t>(n), static_cast<std::size_t>(y.k));
      y.kind = y.plan.exact ? model_sampled_kind::exact : model_sampled_kind::sampled;
    }
    if (y.kind == model_sampled_kind::sampled) {
      y.seed = derive_seed(seed, t, step);
      if (cfg.sampling == sampling_mode::strided) {
        y.offset = cpu::strided_sample_offset(y.seed, y.plan.stride);
        y.samples = y.offset < n ? (n - 1 - y.offset) / y.plan.stride + 1 : 0;
      } else {
        y.samples = y.plan.max_samples;
        y.draws = y.samples + uniform_slack;
      }
      if (gate_open(gate)) y.st.action = static_cast<std::int32_t>(sampled_action::undecided);
    }
    sel[t] = y;
  }
};

// Uniform draw d of the model: its tensor's, where the bounded draw accepts it (with its
// position).
template <class T>
struct model_draw {
  const model_tensor<T>* tensors;
  std::size_t space;
  const model_sampled_tensor<T>* sel;
  const std::uint64_t* draw_first;
  std::uint32_t count;
  GRADCOMP_HD bool at(std::uint64_t d, model_entry& out) const {
    if (d >= draw_first[count - 1] + sel[count - 1].draws) return false;
    const std::uint32_t t = segment_of(value_at<std::uint64_t>{draw_first}, count, d);
    const uniform_draw draw{sel[t].seed, tensors[t].items[space]};
    const std::uint64_t j = d - draw_first[t];
    if (!uniform_accepted{draw}(static_cast<std::size_t>(j))) return false;
    out = model_entry{t, draw(static_cast<std::size_t>(j))};
    return true;
  }
};
template <class T>
using accepted_range = member_range<model_sampled_tensor<T>, &model_sampled_tensor<T>::accepted_first,
                                    &model_sampled_tensor<T>::accepted_end>;
template <class T>
using take_range =
    member_range<model_sampled_tensor<T>, &model_sampled_tensor<T>::take_first, &model_sampled_tensor<T>::take_end>;

// Key j of tensor t's sample: at its strided position, or at its uniform sample's (the accepted
// draws in order: the compacted ones, then, past them, its draws walked on).
template <class T>
struct sampled_sample_key {
  const model_tensor<T>* tensors;
  std::size_t space;
  const model_sampled_tensor<T>* sel;
  const model_entry* accepted;
  bool strided;
  GRADCOMP_HD key_t<T> operator()(std::uint32_t t, std::uint64_t j) const {
    const model_sampled_tensor<T>& y = sel[t];
    std::uint64_t i = 0;
    if (strided) {
      i = y.offset + j * y.plan.stride;
    } else if (y.accepted_first + j < y.accepted_end) {
      i = accepted[y.accepted_first + j].index;
    } else {
      const uniform_draw draw{y.seed, tensors[t].items[space]};
      std::uint64_t seen = y.accepted_end - y.accepted_first;
      for (std::uint64_t d = y.draws;; ++d) {
        if (!uniform_accepted{draw}(static_cast<std::size_t>(d))) continue;
        if (seen++ == j) {
          i = draw(static_cast<std::size_t>(d));
          break;
        }
      }
    }
    return magnitude_key(tensors[t].e[i]);
  }
};

// A sampling tensor's rounds' thresholds from its sorted sample (sampled_start).
template <class T>
struct model_sampled_start_op {
  model_sampled_tensor<T>* sel;
  const model_key<key_t<T>>* sorted;
  const std::uint64_t* sample_first;
  key_t<T>* thresholds;  // max_rounds a tensor
  std::size_t space;
  int rounds;
  double decay;
  GRADCOMP_HD void operator()(const model_tensor<T>& x, std::uint32_t t) const {
    model_sampled_tensor<T>& y = sel[t];
    if (y.st.action == static_cast<std::int32_t>(sampled_action::skip)) return;
    const std::uint64_t rank = cpu::sample_rank(static_cast<std::size_t>(y.samples), static_cast<std::size_t>(y.k),
                                                static_cast<std::size_t>(x.items[space]));
    const key_t<T> key = sorted[sample_first[t] + rank - 1].key;
    sampled_start<T>{&y.st, &key, thresholds + static_cast<std::size_t>(t) * rounds, rounds, decay, nullptr}(0);
  }
};

// Element i of tensor t as one pass's round counts (round_of_element; nothing for a tensor that
// does not sample).
template <class T>
struct model_round_leaf {
  const model_tensor<T>* tensors;
  const model_sampled_tensor<T>* sel;
  const key_t<T>* thresholds;
  int rounds;
  int first;
  int last;
  GRADCOMP_HD round_counts operator()(std::uint32_t t, std::uint64_t i) const {
    if (sel[t].st.action == static_cast<std::int32_t>(sampled_action::skip)) return round_counts{};
    return round_of_element<T>{tensors[t].e, thresholds + static_cast<std::size_t>(t) * rounds, first, last,
                               &sel[t].st}(static_cast<std::size_t>(i));
  }
};

// Whether a tensor takes its candidates at the chosen threshold: the first k by index, or all.
template <class T>
GRADCOMP_HD bool takes_candidates(const model_sampled_tensor<T>& y) noexcept {
  return y.st.action == static_cast<std::int32_t>(sampled_action::first_k) ||
         y.st.action == static_cast<std::int32_t>(sampled_action::accept);
}

// A sampling tensor's decision (sampled_decide) over its rounds' counts, a NaN refusal into its
// sink.
template <class T, class Sink>
struct model_sampled_decide_op {
  model_sampled_tensor<T>* sel;
  const key_t<T>* thresholds;
  const round_counts* counts;  // per pass, one per tensor
  std::uint32_t count;
  sampled_threshold_config cfg;
  Sink sink;
  std::uint64_t* takers;  // the tensors that take their candidates, counted
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    model_sampled_tensor<T>& y = sel[t];
    sampled_decide<T>{&y.st,
                      thresholds + static_cast<std::size_t>(t) * cfg.max_rounds,
                      counts + t,
                      cfg.max_rounds,
                      y.k,
                      y.plan.candidate_cap,
                      y.plan.upper,
                      cfg.lower_bound,
                      cfg.truncation == truncation_mode::index_order,
                      sink(t),
                      count}(0);
    if (takes_candidates(y)) atomic_add(takers, 1);
  }
};

// The exact paths' modes, from each tensor's decision: the plain radix select where it does not
// sample, the planned exact top-k of all its elements, or the radix select over its candidates at
// the chosen threshold. On the host, the most any of them uses.
template <class T, class KOf>
struct model_sampled_exact_mode {
  const model_sampled_tensor<T>* sel;
  sampled_threshold_config cfg;
  KOf k_of;
  GRADCOMP_HD model_topk_mode operator()(const model_tensor<T>&, std::uint32_t t, std::size_t) const {
    const model_sampled_tensor<T>& y = sel[t];
    if (y.kind == model_sampled_kind::exact) return model_topk_mode{y.k, model_topk_kind::radix, 0};
    if (y.st.action == static_cast<std::int32_t>(sampled_action::exact_all))
      return model_topk_mode{y.k, model_topk_kind::planned, 0};
    if (y.st.action == static_cast<std::int32_t>(sampled_action::exact_candidates))
      return model_topk_mode{y.k, model_topk_kind::at_cut, y.st.chosen};
    return model_topk_mode{};
  }
  model_topk_bounds bounds(const model_tensor<T>&, std::size_t n) const {
    const std::size_t k = k_of(n);
    model_topk_bounds b = planned_bounds(n, k);
    const cpu::sample_plan plan = cpu::plan_sampling(cfg, n, k);
    if (!plan.exact && plan.candidate_cap > b.candidates) b.candidates = plan.candidate_cap;
    return b;
  }
};

// Element i of the model where its tensor takes its candidates and it is one (no element's tensor
// is looked up where no tensor takes them).
template <class T>
struct model_take_reader {
  const model_tensor<T>* tensors;
  std::uint32_t count;
  std::size_t space;
  const model_sampled_tensor<T>* sel;
  const std::uint64_t* takers;
  GRADCOMP_HD bool at(std::uint64_t i, model_entry& out) const {
    if (*takers == 0) return false;
    const std::uint32_t t = tensor_of_item(tensors, count, space, i);
    const model_sampled_tensor<T>& y = sel[t];
    if (!takes_candidates(y)) return false;
    const std::uint64_t j = i - tensors[t].first[space];
    if (magnitude_key(tensors[t].e[j]) < static_cast<key_t<T>>(y.st.chosen)) return false;
    out = model_entry{t, static_cast<std::uint32_t>(j)};
    return true;
  }
};

// How many of its candidates a tensor takes: k for the first k by index, all for acceptance.
template <class T>
struct sampled_taken {
  const model_sampled_tensor<T>* sel;
  GRADCOMP_HD std::uint64_t operator()(std::uint32_t t) const {
    const model_sampled_tensor<T>& y = sel[t];
    return y.st.action == static_cast<std::int32_t>(sampled_action::first_k)  ? y.k
           : y.st.action == static_cast<std::int32_t>(sampled_action::accept) ? y.st.count
                                                                               : 0;
  }
};

// Each tensor's outcome into its sink: the exact paths' (publish_exact, with the sample and
// rounds where it sampled), or the first k's and acceptance's (publish_sampled).
template <class T, class Sink>
struct model_sampled_publish_op {
  const model_sampled_tensor<T>* sel;
  const model_topk_tensor<T>* exact;
  Sink sink;
  GRADCOMP_HD void operator()(const model_tensor<T>&, std::uint32_t t) const {
    const model_sampled_tensor<T>& y = sel[t];
    if (y.kind == model_sampled_kind::none) return;
    const selection_sink<T> to = sink(t);
    if (y.kind == model_sampled_kind::exact) {
      publish_exact<T>{&exact[t].s, to, y.k}(0);
      return;
    }
    publish_exact<T>{&exact[t].s, to, y.k, y.samples, &y.st.rounds}(0);
    publish_sampled<T>{&y.st, to, y.k, y.samples}(0);
  }
};

// The sampled threshold of every tensor of a model at once: the scratch of one selection, planned
// on the host, released after the launches that use it (in the stream's order). KOf: k of a
// tensor's n items in space `space` (its elements), callable on the host and the device.
template <class T, class System, class KOf>
class model_sampled {
 public:
  model_sampled(stream_t stream, const model_table<T, System>& m, std::size_t space, KOf k_of,
                const sampled_threshold_config& cfg)
      : model_sampled(stream, m, space, k_of, cfg, sizes_of(m, space, k_of, cfg)) {}

  // Issues every tensor's selection: take(tensor, t, j, index) for entry j of tensor t's (index
  // `index` of its elements, ascending in j), its outcome into sink(t) (a selection_sink<T>),
  // seeds derived from `seed`, t and `step` as the compressors derive them; a closed gate (the
  // step's verdict) stops everything.
  template <class Sink, class Take>
  void issue(stream_t stream, const model_table<T, System>& m, std::uint64_t seed, std::uint64_t step,
             const std::int32_t* gate, Sink sink, Take take) {
    using key_type = key_t<T>;
    const std::uint32_t count = m.size();
    if (count == 0) return;
    const auto sys = exec<System>(stream);
    const thrust::counting_iterator<std::size_t> first(0);
    model_sampled_tensor<T>* sel = sel_.data();
    const bool strided = cfg_.sampling == sampling_mode::strided;
    m.for_each_tensor(stream, model_sampled_plan_op<T, KOf>{sel, space_, k_of_, cfg_, seed, step, gate,
                                                            counts_.data()});
    if (sizes_.samples != 0) {
      if (!strided) {
        using draws_of = member_of<model_sampled_tensor<T>, std::uint64_t, &model_sampled_tensor<T>::draws>;
        exclusive_scan_tensors<System>(stream, count, draws_of{sel}, draw_first_.data());
        compact_runs<System>(stream, model_draw<T>{m.tensors(), space_, sel, draw_first_.data(), count},
                             sizes_.draws, accepted_.data(), counts_.data(), sizes_.draws, accepted_range<T>{sel});
      }
      model_key<key_type>* keys = samples_.data();
      using samples_of = member_of<model_sampled_tensor<T>, std::uint64_t, &model_sampled_tensor<T>::samples>;
      sort_samples<System>(stream, count, samples_of{sel},
                           sampled_sample_key<T>{m.tensors(), space_, sel, accepted_.data(), strided},
                           sample_first_.data(), keys, sizes_.samples);
      m.for_each_tensor(stream, model_sampled_start_op<T>{sel, keys, sample_first_.data(), thresholds_.data(), space_,
                                                          cfg_.max_rounds, cfg_.threshold_decay});
      for (std::size_t p = 0; p < passes_; ++p) {
        const int from = static_cast<int>(p) * rounds_per_count;
        const int to = from + rounds_per_count < cfg_.max_rounds ? from + rounds_per_count : cfg_.max_rounds;
        m.sums().issue(stream, model_round_leaf<T>{m.tensors(), sel, thresholds_.data(), cfg_.max_rounds, from, to},
                       add_round_counts{}, round_counts_.data() + p * count);
      }
      m.for_each_tensor(stream, model_sampled_decide_op<T, Sink>{sel, thresholds_.data(), round_counts_.data(), count,
                                                                 cfg_, sink, counts_.data() + 2});
    }
    using exact_mode = model_sampled_exact_mode<T, KOf>;
    model_topk<T, System, exact_mode> exact(stream, m, space_, exact_mode{sel, cfg_, k_of_});
    exact.issue(stream, m, gate);
    exact.for_each_selected(stream, m, take);
    if (sizes_.taken != 0) {
      compact_runs<System>(stream, model_take_reader<T>{m.tensors(), count, space_, sel, counts_.data() + 2},
                           m.items(space_), taken_.data(), counts_.data() + 1, sizes_.taken, take_range<T>{sel});
      thrust::for_each_n(sys, first, sizes_.taken,
                         model_entries_op<T, take_range<T>, sampled_taken<T>, Take>{
                             m.tensors(), taken_.data(), counts_.data() + 1, take_range<T>{sel}, sampled_taken<T>{sel},
                             take});
    }
    m.for_each_tensor(stream, model_sampled_publish_op<T, Sink>{sel, exact.tensors(), sink});
  }

  // Every tensor's sampling state and decision, in System's memory.
  const model_sampled_tensor<T>* tensors() const noexcept { return sel_.data(); }

 private:
  struct sizes {
    std::uint64_t samples = 0;  // every sampling tensor's sample, at most
    std::uint64_t draws = 0;    // uniform draws compacted at once
    std::uint64_t taken = 0;    // candidates of the first-k and acceptance paths, at most
  };
  static sizes sizes_of(const model_table<T, System>& m, std::size_t space, const KOf& k_of,
                        const sampled_threshold_config& cfg) {
    sizes z;
    for (std::uint32_t t = 0; t < m.size(); ++t) {
      const model_tensor<T>& x = m.host(t);
      if (x.e == nullptr) continue;
      const auto n = static_cast<std::size_t>(x.items[space]);
      const cpu::sample_plan plan = cpu::plan_sampling(cfg, n, k_of(n));
      if (plan.exact) continue;
      z.samples += plan.max_samples;
      if (cfg.sampling == sampling_mode::uniform) z.draws += plan.max_samples + uniform_slack;
      z.taken += plan.candidate_cap;
    }
    return z;
  }
  static std::size_t at_least_one(std::uint64_t n) { return n == 0 ? 1 : static_cast<std::size_t>(n); }

  model_sampled(stream_t stream, const model_table<T, System>& m, std::size_t space, KOf k_of,
                const sampled_threshold_config& cfg, sizes z)
      : space_(space),
        k_of_(k_of),
        cfg_(cfg),
        sizes_(z),
        passes_(round_count_passes(cfg.max_rounds)),
        sel_(stream, at_least_one(m.size())),
        sample_first_(stream, at_least_one(m.size())),
        draw_first_(stream, at_least_one(m.size())),
        accepted_(stream, at_least_one(z.draws)),
        samples_(stream, at_least_one(z.samples)),
        thresholds_(stream, at_least_one(static_cast<std::uint64_t>(m.size()) *
                                         static_cast<std::uint64_t>(cfg.max_rounds))),
        round_counts_(stream, at_least_one(static_cast<std::uint64_t>(m.size()) * passes_)),
        taken_(stream, at_least_one(z.taken)),
        counts_(stream, 3) {}

  std::size_t space_;
  KOf k_of_;
  sampled_threshold_config cfg_;
  sizes sizes_;
  std::size_t passes_;
  scratch<model_sampled_tensor<T>, System> sel_;
  scratch<std::uint64_t, System> sample_first_;
  scratch<std::uint64_t, System> draw_first_;
  scratch<model_entry, System> accepted_;
  scratch<model_key<key_t<T>>, System> samples_;
  scratch<key_t<T>, System> thresholds_;
  scratch<round_counts, System> round_counts_;
  scratch<model_entry, System> taken_;
  scratch<std::uint64_t, System> counts_;
};

}  // namespace thrust_impl
}  // namespace detail
}  // namespace gradcomp
