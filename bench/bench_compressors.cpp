// Every compressor of the library on one model, the Fashion-MNIST demo's MLP (784-512-256-10:
// six tensors, 535,818 parameters), through the common compressor interface on the CPU backend,
// one thread: the three costs a worker and a receiver pay per step.
//   BM_compressor_step/<mode>    compress() and stats(): the step on fresh gradients (eight
//                                gradient sets drawn once, taken in turn)
//   BM_compressor_encode/<mode>  encode_message() of the last step, with a CRC-32C
//   BM_compressor_decode/<mode>  aggregator::add() of that message: checked, decoded and added
//                                into the receiver's sums
// <mode> names the demo's modes: dense (every tensor fp32, dgc_compressor with dense tensors),
// dgc (density 0.001 from the first step, the demo's settings: momentum correction, masking,
// clipping), ef_signsgd, terngrad, onebit_sgd, qsgd, adacomp (bins of 500, biases compressed as
// in the demo), saef_topk and saef_sign (a Step-Ahead Error Feedback worker's step: its momentum,
// then top-k at density 0.001 or scaled signs with error feedback), isgq (each weight matrix as its
// factors over a batch of 32, dithered with s = 3, the biases fp32; the step takes eight factor
// sets in turn: inputs with half their entries exact zeros, as after a ReLU, and Student-t errors),
// powersgd_r1, _r2, _r4 (PowerSGD of rank 1, 2, 4, the vectors summed dense: a step is both rounds
// of one worker, the message its two round messages, the decode both added by their rounds'
// aggregators).
// Counters:
//   items_per_second     model parameters per second
//   message_bytes        the step's message, headers and checksum included
//   bits_per_element     8 * message_bytes / parameters
//   index_bits_per_position  (sparse messages) the index payloads' bits per sent position
//   bin_offset_bits_per_position  (adacomp) the same positions packed as offsets within their bins
//                        (ceil(log2 L) bits each) plus a unary count per bin, the paper's packing
// scripts/compare_compressors.sh turns these into the speed columns of docs/compressors.md.
#include <benchmark/benchmark.h>

#include <gradcomp/gradcomp.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <type_traits>
#include <utility>
#include <string>
#include <vector>

namespace {

const std::vector<std::vector<std::size_t>> kModel = {{512, 784}, {512}, {256, 512}, {256}, {10, 256}, {10}};

std::size_t parameters() {
  std::size_t n = 0;
  for (const auto& s : kModel) {
    std::size_t k = 1;
    for (std::size_t d : s) k *= d;
    n += k;
  }
  return n;
}

// Eight gradient sets of the model: Student-t values (heavy tails, like real gradients), per
// tensor a scale of its own.
struct gradient_sets {
  gradient_sets() {
    std::mt19937_64 rng(11);
    std::student_t_distribution<float> dist(3.0f);
    for (std::size_t s = 0; s < 8; ++s) {
      std::vector<std::vector<float>> set;
      for (std::size_t t = 0; t < kModel.size(); ++t) {
        std::size_t n = 1;
        for (std::size_t d : kModel[t]) n *= d;
        std::vector<float> g(n);
        for (auto& x : g) x = 1e-3f * static_cast<float>(t + 1) * dist(rng);
        set.push_back(std::move(g));
      }
      sets.push_back(std::move(set));
    }
    for (const auto& set : sets) {
      std::vector<gradcomp::span<const float>> v;
      for (const auto& g : set) v.emplace_back(g.data(), g.size());
      views.push_back(std::move(v));
    }
  }
  std::vector<std::vector<std::vector<float>>> sets;
  std::vector<std::vector<gradcomp::span<const float>>> views;
};

const gradient_sets& gradients() {
  static const gradient_sets g;
  return g;
}

gradcomp::wire::encode_options checksummed() {
  gradcomp::wire::encode_options o;
  o.checksum = true;
  return o;
}

template <class C>
void add_model(C& c, gradcomp::tensor_mode mode) {
  for (std::size_t t = 0; t < kModel.size(); ++t) {
    std::string name = "t";
    name += std::to_string(t);
    c.add_tensor(name, kModel[t], mode);
  }
}

// The index payload of a message's sparse sections in bits per position, and how many positions.
struct index_cost {
  double bits = 0.0;
  double positions = 0.0;
};
inline index_cost sparse_index_cost(gradcomp::span<const std::byte> msg) {
  index_cost c;
  const auto h = gradcomp::wire::peek(msg);
  if (!h) return c;
  const std::uint64_t end = h->total_bytes - (h->has_checksum() ? gradcomp::wire::checksum_bytes : 0);
  std::uint64_t offset = gradcomp::wire::message_header_bytes;
  for (std::uint32_t i = 0; i < h->section_count; ++i) {
    const auto sec = gradcomp::wire::read_section_header(msg, offset, end);
    if (!sec) return index_cost{};
    if (sec->indices != gradcomp::wire::index_coding::dense) {
      c.bits += 8.0 * static_cast<double>(sec->index_bytes);
      c.positions += sec->kept;
    }
    offset += sec->bytes;
  }
  return c;
}

// For a compressor with bins (AdaComp): the bits its last step's positions would take as offsets
// within their bins, the packing of the AdaComp paper: ceil(log2 L) bits per position plus a count
// per bin of at least one bit (unary: count + 1 bits).
template <class C, class = void>
struct has_bins : std::false_type {};
template <class C>
struct has_bins<C, std::void_t<decltype(std::declval<const C&>().bin(0))>> : std::true_type {};
template <class C>
double bin_offset_bits(C& c) {
  double bits = 0.0;
  if constexpr (has_bins<C>::value) {
    for (std::size_t t = 0; t < c.num_tensors(); ++t) {
      if (!c.info(t).compressed) continue;
      const std::size_t n = c.info(t).numel, bin = c.bin(t), kept = c.message(t).indices.size();
      std::size_t width = 0;
      while ((std::size_t(1) << width) < bin) ++width;
      bits += static_cast<double>(kept * width + (n + bin - 1) / bin + kept);
    }
  }
  return bits;
}

// A Step-Ahead Error Feedback worker around a compressor, with the compressor's interface: a step
// is the worker's (its momentum, then the compressor on eta * M).
template <class C>
class saef_model {
 public:
  explicit saef_model(C c) : c_(std::make_unique<C>(std::move(c))) {
    gradcomp::saef_config cfg;
    cfg.learning_rate = 0.1;
    w_ = std::make_unique<gradcomp::saef_worker<C>>(*c_, cfg);
  }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& g) { return w_->step(g); }
  auto stats() { return c_->stats(); }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options& o) const { return c_->max_message_bytes(o); }
  auto encode_message(const gradcomp::wire::encode_options& o, gradcomp::span<std::byte> out) {
    return c_->encode_message(o, out);
  }
  gradcomp::receiver_layout receiver() const { return w_->receiver(); }

 private:
  std::unique_ptr<C> c_;
  std::unique_ptr<gradcomp::saef_worker<C>> w_;
};

// ISGQ on the model's three weight matrices with the common interface's calls: a step quantises a
// factor set (taken in turn) and sends the biases of the gradients it is given in fp32.
class isgq_model {
 public:
  static constexpr std::size_t batch = 32;
  isgq_model() : c_(config()) {
    std::mt19937_64 rng(13);
    std::student_t_distribution<float> dist(3.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (std::size_t l = 0; l < 3; ++l) c_.add_layer("t" + std::to_string(2 * l), kModel[2 * l][1], kModel[2 * l][0],
                                                      gradcomp::isgq_layout::out_in, 2 * l);
    for (std::size_t s = 0; s < 8; ++s) {
      std::vector<std::vector<float>> x, d;
      for (std::size_t l = 0; l < 3; ++l) {
        std::vector<float> xl(batch * kModel[2 * l][1]), dl(batch * kModel[2 * l][0]);
        for (auto& v : xl) v = unit(rng) < 0.5f ? 0.0f : unit(rng);
        for (auto& v : dl) v = 1e-3f * dist(rng);
        x.push_back(std::move(xl));
        d.push_back(std::move(dl));
      }
      x_.push_back(std::move(x));
      d_.push_back(std::move(d));
    }
  }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& g) {
    const std::size_t s = step_++ % 8;
    messages_.clear();
    for (std::size_t t = 0; t < kModel.size(); ++t) {
      if (t % 2 == 0) {
        const auto m = c_.compress(t / 2, gradcomp::span<const float>(x_[s][t / 2].data(), x_[s][t / 2].size()),
                                   gradcomp::span<const float>(d_[s][t / 2].data(), d_[s][t / 2].size()), batch);
        if (!m) return gradcomp::fail(m.error());
        messages_.push_back(*m);
      } else {
        gradcomp::tensor_message<float> m;
        m.tensor = t;
        m.numel = g[t].size();
        m.dense = true;
        m.values = g[t];
        messages_.push_back(m);
      }
    }
    return {};
  }
  gradcomp::result<void> stats() const { return {}; }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options& o) const {
    // The payloads are as long as the step's; a first step sizes them.
    isgq_model probe;
    (void)probe.compress(gradients().views[0]);
    return gradcomp::wire::max_encoded_bytes(
               gradcomp::span<const gradcomp::tensor_message<float>>(probe.messages_.data(), probe.messages_.size()), o)
        .value();
  }
  gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options& o, gradcomp::span<std::byte> out) {
    return gradcomp::wire::encode(
        gradcomp::span<const gradcomp::tensor_message<float>>(messages_.data(), messages_.size()), o, out);
  }
  gradcomp::receiver_layout receiver() const {
    gradcomp::receiver_layout l;
    for (std::size_t t = 0; t < kModel.size(); ++t) {
      gradcomp::receiver_tensor r;
      r.info.name = "t" + std::to_string(t);
      r.info.shape = kModel[t];
      r.info.numel = 1;
      for (std::size_t d : kModel[t]) r.info.numel *= d;
      r.dense = true;
      l.tensors.push_back(r);
    }
    return l;
  }

 private:
  static gradcomp::isgq_config config() {
    gradcomp::isgq_config cfg;
    cfg.levels = 3;
    return cfg;
  }
  gradcomp::isgq_compressor<float> c_;
  std::vector<std::vector<std::vector<float>>> x_, d_;
  std::vector<gradcomp::tensor_message<float>> messages_;
  std::size_t step_ = 0;
};

// PowerSGD (rank r) with the common interface's calls: a step is both rounds of one worker, each
// round's average being this worker's own payload (the arithmetic of a step does not depend on
// the other workers' values); the message is the step's two round messages one after the other,
// and the receiver adds each into its round's aggregator.
class powersgd_model {
 public:
  explicit powersgd_model(std::size_t rank) : c_(config(rank)) { add_model(c_, gradcomp::tensor_mode::automatic); }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& g) {
    auto next = c_.begin_step(gradcomp::span<const gradcomp::span<const float>>(g.data(), g.size()));
    for (std::size_t k = 0; next && !next->empty(); ++k) {
      payloads_[k].assign(next->begin(), next->end());
      next = c_.end_round(gradcomp::span<const float>(payloads_[k].data(), payloads_[k].size()));
    }
    if (!next) return gradcomp::fail(next.error());
    return {};
  }
  gradcomp::result<void> stats() const { return {}; }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options& o) const {
    std::size_t bytes = 0;
    for (std::size_t k = 1; k <= 2; ++k) {
      const auto s = sections(k, nullptr);
      const gradcomp::span<const gradcomp::tensor_message<float>> all(s.data(), s.size());
      bytes += gradcomp::wire::max_encoded_bytes(all, o).value();
    }
    return bytes;
  }
  gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options& o, gradcomp::span<std::byte> out) {
    std::size_t at = 0;
    for (std::size_t k = 1; k <= 2; ++k) {
      const auto s = sections(k, payloads_[k - 1].data());
      const gradcomp::span<const gradcomp::tensor_message<float>> all(s.data(), s.size());
      const auto n = gradcomp::wire::encode_round(c_.round_kind(k), all, o, out.subspan(at, out.size() - at));
      if (!n) return n;
      at += *n;
      if (k == 1) first_bytes_ = *n;
    }
    return at;
  }
  // The two rounds' aggregators, taking the two messages of encode_message's last output (the
  // first one `split` bytes long).
  struct receiver_pair {
    gradcomp::aggregator<float> first, second;
    std::size_t split = 0;
    void begin() {
      first.begin();
      second.begin();
    }
    gradcomp::result<void> add(gradcomp::span<const std::byte> both) {
      if (split > both.size()) return gradcomp::fail(gradcomp::errc::truncated);
      if (auto r = first.add(both.first(split)); !r) return r;
      return second.add(both.subspan(split, both.size() - split));
    }
  };
  receiver_pair make_receiver() const {
    return {gradcomp::aggregator<float>(c_.round_kind(1), c_.round_layout(1)),
            gradcomp::aggregator<float>(c_.round_kind(2), c_.round_layout(2)), first_bytes_};
  }

 private:
  static gradcomp::powersgd_config config(std::size_t rank) {
    gradcomp::powersgd_config cfg;
    cfg.rank = rank;
    return cfg;
  }
  // Round k's sections over `values` (null: sizes only), as encode_round writes them.
  std::vector<gradcomp::tensor_message<float>> sections(std::size_t k, const float* values) const {
    const auto layout = c_.round_layout(k);
    std::vector<gradcomp::tensor_message<float>> out(layout.tensors.size());
    std::size_t at = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::size_t n = layout.tensors[i].info.numel;
      out[i].tensor = static_cast<std::uint32_t>(i);
      out[i].numel = n;
      out[i].dense = true;
      if (values != nullptr) out[i].values = gradcomp::span<const float>(values + at, n);
      at += n;
    }
    return out;
  }
  gradcomp::powersgd_compressor<float> c_;
  std::vector<float> payloads_[2];
  std::size_t first_bytes_ = 0;
};

// The receiver of a compressor's messages: its aggregator, or the model's own.
template <class C, class = void>
struct has_own_receiver : std::false_type {};
template <class C>
struct has_own_receiver<C, std::void_t<decltype(std::declval<const C&>().make_receiver())>> : std::true_type {};
template <class C>
auto receiver_for(const C& c) {
  if constexpr (has_own_receiver<C>::value)
    return c.make_receiver();
  else
    return gradcomp::aggregator<float>(c.receiver());
}

// A compressor from `make()` after eight steps, its last one ready to encode.
template <class Make>
auto stepped(const Make& make) {
  auto c = make();
  for (std::size_t s = 0; s < 8; ++s) (void)c.compress(gradients().views[s]);
  return c;
}

// What to compare: `make()` builds a compressor with the model registered.
template <class Make>
void register_mode(const std::string& mode, Make make) {
  const auto n = static_cast<std::int64_t>(parameters());
  benchmark::RegisterBenchmark(("BM_compressor_step/" + mode).c_str(), [make, n](benchmark::State& state) {
    auto c = make();
    std::size_t s = 0;
    bool ok = true;
    for (auto _ : state) {
      ok &= static_cast<bool>(c.compress(gradients().views[s++ % 8]));
      ok &= static_cast<bool>(c.stats());
    }
    if (!ok) state.SkipWithError("compress failed");
    state.SetItemsProcessed(state.iterations() * n);
  })->Unit(benchmark::kMicrosecond);

  benchmark::RegisterBenchmark(("BM_compressor_encode/" + mode).c_str(), [make, n](benchmark::State& state) {
    auto c = stepped(make);
    std::vector<std::byte> out(c.max_message_bytes(checksummed()));
    std::size_t bytes = 0;
    bool ok = true;
    for (auto _ : state) {
      const auto r = c.encode_message(checksummed(), gradcomp::span<std::byte>(out.data(), out.size()));
      ok &= static_cast<bool>(r);
      bytes = r ? *r : 0;
      benchmark::DoNotOptimize(out.data());
    }
    if (!ok) state.SkipWithError("encode_message failed");
    state.SetItemsProcessed(state.iterations() * n);
    state.counters["message_bytes"] = static_cast<double>(bytes);
    state.counters["bits_per_element"] = 8.0 * static_cast<double>(bytes) / static_cast<double>(n);
    const index_cost idx = sparse_index_cost(gradcomp::span<const std::byte>(out.data(), bytes));
    if (idx.positions > 0) {
      state.counters["index_bits_per_position"] = idx.bits / idx.positions;
      if (has_bins<decltype(c)>::value) state.counters["bin_offset_bits_per_position"] = bin_offset_bits(c) / idx.positions;
    }
  })->Unit(benchmark::kMicrosecond);

  benchmark::RegisterBenchmark(("BM_compressor_decode/" + mode).c_str(), [make, n](benchmark::State& state) {
    auto c = stepped(make);
    std::vector<std::byte> out(c.max_message_bytes(checksummed()));
    const auto size = c.encode_message(checksummed(), gradcomp::span<std::byte>(out.data(), out.size()));
    if (!size) {
      state.SkipWithError("encode_message failed");
      return;
    }
    auto agg = receiver_for(c);
    const gradcomp::span<const std::byte> msg(out.data(), *size);
    bool ok = true;
    for (auto _ : state) {
      // The sums start from zero every step, as a receiver's do; only the add is timed.
      agg.begin();
      const auto t0 = std::chrono::steady_clock::now();
      ok &= static_cast<bool>(agg.add(msg));
      const auto t1 = std::chrono::steady_clock::now();
      state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    }
    if (!ok) state.SkipWithError("aggregator::add failed");
    state.SetItemsProcessed(state.iterations() * n);
  })->UseManualTime()->Unit(benchmark::kMicrosecond);
}

const bool registered = [] {
  register_mode("dense", [] {
    gradcomp::dgc_config cfg;
    cfg.num_workers = 4;
    gradcomp::dgc_compressor<float> c(cfg);
    add_model(c, gradcomp::tensor_mode::dense);
    return c;
  });
  register_mode("dgc", [] {
    gradcomp::dgc_config cfg;
    cfg.num_workers = 4;
    cfg.clip_norm = 5.0;
    cfg.policy.compress_vectors = true;
    cfg.schedule = gradcomp::warmup_schedule::constant(0.001);
    gradcomp::dgc_compressor<float> c(cfg);
    add_model(c, gradcomp::tensor_mode::automatic);
    return c;
  });
  register_mode("ef_signsgd", [] {
    gradcomp::ef_signsgd_config cfg;
    cfg.learning_rate = 0.1;
    gradcomp::ef_signsgd_compressor<float> c(cfg);
    add_model(c, gradcomp::tensor_mode::automatic);
    return c;
  });
  register_mode("terngrad", [] {
    gradcomp::terngrad_compressor<float> c(gradcomp::terngrad_config{});
    add_model(c, gradcomp::tensor_mode::automatic);
    return c;
  });
  register_mode("onebit_sgd", [] {
    gradcomp::onebit_sgd_compressor<float> c(gradcomp::onebit_sgd_config{});
    add_model(c, gradcomp::tensor_mode::automatic);
    return c;
  });
  register_mode("qsgd", [] {
    gradcomp::qsgd_compressor<float> c(gradcomp::qsgd_config{});
    add_model(c, gradcomp::tensor_mode::automatic);
    return c;
  });
  register_mode("adacomp", [] {
    gradcomp::adacomp_config cfg;
    cfg.policy.compress_vectors = true;
    gradcomp::adacomp_compressor<float> c(cfg);
    add_model(c, gradcomp::tensor_mode::automatic);
    return c;
  });
  register_mode("saef_topk", [] {
    gradcomp::dgc_config cfg;
    cfg.momentum_correction = false;
    cfg.momentum_masking = false;
    cfg.selection = gradcomp::selection_method::exact_topk;
    cfg.policy.compress_vectors = true;
    cfg.schedule = gradcomp::warmup_schedule::constant(0.001);
    gradcomp::dgc_compressor<float> c(cfg);
    add_model(c, gradcomp::tensor_mode::automatic);
    return saef_model<gradcomp::dgc_compressor<float>>(std::move(c));
  });
  register_mode("saef_sign", [] {
    gradcomp::ef_signsgd_config cfg;
    cfg.learning_rate = 1.0;
    gradcomp::ef_signsgd_compressor<float> c(cfg);
    add_model(c, gradcomp::tensor_mode::automatic);
    return saef_model<gradcomp::ef_signsgd_compressor<float>>(std::move(c));
  });
  register_mode("isgq", [] { return isgq_model(); });
  for (const std::size_t r : {1, 2, 4})
    register_mode("powersgd_r" + std::to_string(r), [r] { return powersgd_model(r); });
  return true;
}();

}  // namespace
