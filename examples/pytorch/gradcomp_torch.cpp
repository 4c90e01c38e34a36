// gradcomp_torch._core: gradcomp's compressors for PyTorch's DDP communication hook
// (python/gradcomp_torch/__init__.py). A `Bucket` is one DDP bucket's compressor: it reads the
// bucket's gradient tensors where they are (no copy), encodes its wire message into a uint8
// tensor, adds every rank's message in rank order, and writes the averaged update back into the
// gradient tensors. The exchange itself (torch.distributed) is the Python side's. Part of the example, not
// of the library.
#include <torch/extension.h>

#include <gradcomp/gradcomp.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace gradcomp_torch {

using gradcomp::errc;

// A tensor's memory as a view, after the checks a view needs: contiguous float32 on the CPU.
gradcomp::span<float> float_view(const torch::Tensor& t, const char* what) {
  if (!t.defined() || t.scalar_type() != torch::kFloat32 || !t.device().is_cpu() || !t.is_contiguous())
    throw py::value_error(std::string("gradcomp_torch: ") + what + " must be a contiguous float32 CPU tensor");
  return gradcomp::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
}

gradcomp::span<std::byte> byte_view(const torch::Tensor& t, const char* what) {
  if (!t.defined() || t.scalar_type() != torch::kUInt8 || !t.device().is_cpu() || !t.is_contiguous())
    throw py::value_error(std::string("gradcomp_torch: ") + what + " must be a contiguous uint8 CPU tensor");
  return gradcomp::span<std::byte>(reinterpret_cast<std::byte*>(t.data_ptr<std::uint8_t>()),
                                   static_cast<std::size_t>(t.numel()));
}

// A method's options from the keyword arguments a user gave: each read once; any left over is a
// name the method does not have (a ValueError naming it).
class options {
 public:
  options(std::string method, py::dict d) : method_(std::move(method)), d_(std::move(d)) {}
  template <class T>
  T get(const char* name, T fallback) {
    used_.insert(name);
    if (!d_.contains(name)) return fallback;
    try {
      return d_[name].cast<T>();
    } catch (const py::cast_error&) {
      throw py::value_error("gradcomp_torch: " + method_ + ": option '" + name + "' has the wrong type");
    }
  }
  void check_all_used() const {
    for (const auto& item : d_) {
      const auto key = item.first.cast<std::string>();
      if (!used_.count(key)) throw py::value_error("gradcomp_torch: " + method_ + " has no option '" + key + "'");
    }
  }

 private:
  std::string method_;
  py::dict d_;
  std::set<std::string> used_;
};

// One bucket's compressor behind one interface: a method of one message per step, or one of
// rounds (PowerSGD).
class method {
 public:
  virtual ~method() = default;
  virtual void add_tensor(const std::string& name, const std::vector<std::size_t>& shape) = 0;
  virtual bool rounds() const { return false; }
  // One message per step.
  virtual gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>&) {
    return gradcomp::fail(errc::invalid_argument);
  }
  // Methods whose workers agree on a scale per tensor first (TernGrad's scale sharing): this
  // worker's scales, to be replaced by the largest over the workers before `compress_shared`.
  virtual bool shares_scales() const { return false; }
  virtual gradcomp::result<std::vector<float>> local_scales(const std::vector<gradcomp::span<const float>>&) {
    return gradcomp::fail(errc::invalid_argument);
  }
  virtual gradcomp::result<void> compress_shared(const std::vector<gradcomp::span<const float>>&,
                                                 gradcomp::span<const float>) {
    return gradcomp::fail(errc::invalid_argument);
  }
  virtual std::size_t max_message_bytes() const { return 0; }
  virtual gradcomp::result<std::size_t> encode(gradcomp::span<std::byte>) { return gradcomp::fail(errc::invalid_argument); }
  virtual gradcomp::receiver_layout receiver() const { return {}; }
  // Rounds: the payloads to average over the ranks, and the update.
  virtual gradcomp::result<gradcomp::span<const float>> begin_step(const std::vector<gradcomp::span<const float>>&) {
    return gradcomp::fail(errc::invalid_argument);
  }
  virtual gradcomp::result<gradcomp::span<const float>> end_round(gradcomp::span<const float>) {
    return gradcomp::fail(errc::invalid_argument);
  }
  virtual gradcomp::span<const float> update(std::size_t) const { return {}; }
  virtual void cancel() {}
  // Snapshots of the compressor's state.
  virtual std::vector<std::byte> snapshot() const = 0;
  virtual gradcomp::result<void> restore(gradcomp::span<const std::byte>) = 0;
};

gradcomp::wire::encode_options wire_options() {
  gradcomp::wire::encode_options w;
  w.checksum = true;  // a damaged message is refused, never added
  return w;
}

// Compressors whose workers can share their scales (`local_scales`, then `compress(grads, shared)`).
template <class C, class = void>
struct has_shared_scales : std::false_type {};
template <class C>
struct has_shared_scales<C, std::void_t<decltype(std::declval<C&>().local_scales(
                                std::declval<gradcomp::span<const gradcomp::span<const float>>>()))>>
    : std::true_type {};

// Any compressor of one message per step; with `share_scales`, one that shares its scales.
template <class C>
class message_method final : public method {
 public:
  explicit message_method(C c, gradcomp::tensor_mode mode = gradcomp::tensor_mode::automatic, bool share_scales = false)
      : c_(std::move(c)), mode_(mode), share_scales_(share_scales) {
    if (share_scales && !has_shared_scales<C>::value) throw py::value_error("gradcomp_torch: no scales to share");
  }
  void add_tensor(const std::string& name, const std::vector<std::size_t>& shape) override {
    c_.add_tensor(name, shape, mode_);
  }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& g) override {
    return verdict(c_.compress(all(g)));
  }
  bool shares_scales() const override { return share_scales_; }
  gradcomp::result<std::vector<float>> local_scales(const std::vector<gradcomp::span<const float>>& g) override {
    if constexpr (has_shared_scales<C>::value) return c_.local_scales(all(g));
    return method::local_scales(g);
  }
  gradcomp::result<void> compress_shared(const std::vector<gradcomp::span<const float>>& g,
                                         gradcomp::span<const float> shared) override {
    if constexpr (has_shared_scales<C>::value) return verdict(c_.compress(all(g), shared));
    return method::compress_shared(g, shared);
  }
  std::size_t max_message_bytes() const override { return c_.max_message_bytes(wire_options()); }
  gradcomp::result<std::size_t> encode(gradcomp::span<std::byte> out) override {
    return c_.encode_message(wire_options(), out);
  }
  gradcomp::receiver_layout receiver() const override { return c_.receiver(); }
  std::vector<std::byte> snapshot() const override { return gradcomp::save_snapshot(c_); }
  gradcomp::result<void> restore(gradcomp::span<const std::byte> s) override { return gradcomp::restore_snapshot(c_, s); }

 private:
  static gradcomp::span<const gradcomp::span<const float>> all(const std::vector<gradcomp::span<const float>>& g) {
    return {g.data(), g.size()};
  }
  // An issued step's outcome: its refusal (a NaN, an overflow) or none.
  gradcomp::result<void> verdict(const gradcomp::result<void>& issued) {
    if (!issued) return issued;
    const auto stats = c_.stats();
    if (!stats) return gradcomp::fail(stats.error());
    return {};
  }

  C c_;
  gradcomp::tensor_mode mode_;
  bool share_scales_;
};

class powersgd_method final : public method {
 public:
  explicit powersgd_method(const gradcomp::powersgd_config& cfg) : c_(cfg) {}
  void add_tensor(const std::string& name, const std::vector<std::size_t>& shape) override { c_.add_tensor(name, shape); }
  bool rounds() const override { return true; }
  gradcomp::result<gradcomp::span<const float>> begin_step(const std::vector<gradcomp::span<const float>>& g) override {
    return c_.begin_step(gradcomp::span<const gradcomp::span<const float>>(g.data(), g.size()));
  }
  gradcomp::result<gradcomp::span<const float>> end_round(gradcomp::span<const float> average) override {
    return c_.end_round(average);
  }
  gradcomp::span<const float> update(std::size_t t) const override { return c_.update(t); }
  void cancel() override { c_.cancel_step(); }
  std::vector<std::byte> snapshot() const override { return gradcomp::save_snapshot(c_); }
  gradcomp::result<void> restore(gradcomp::span<const std::byte> s) override { return gradcomp::restore_snapshot(c_, s); }

 private:
  gradcomp::powersgd_compressor<float> c_;
};

// Where the world is: each method's options may depend on it.
struct world {
  std::size_t rank = 0, size = 1;
};

// DGC's schedule: `density` from the first step, or the paper's four stages over `warmup_steps`.
gradcomp::warmup_schedule schedule(double density, std::size_t warmup_steps) {
  if (warmup_steps == 0) return gradcomp::warmup_schedule::constant(density);
  return gradcomp::warmup_schedule::paper(density, 4, gradcomp::schedule_unit::step, (warmup_steps + 3) / 4);
}

// The top-k methods' rule for tensors their density leaves with fewer than `min_kept` elements.
gradcomp::small_tensor_policy small_tensors(options& o) {
  gradcomp::small_tensor_policy p;
  p.min_kept = o.get<std::size_t>("min_kept", 0);
  const auto action = o.get<std::string>("small_tensors", "floor");
  if (action != "floor" && action != "dense")
    throw py::value_error("gradcomp_torch: small_tensors is 'floor' or 'dense'");
  p.action = action == "dense" ? gradcomp::small_tensor_action::dense : gradcomp::small_tensor_action::floor;
  return p;
}

gradcomp::compression_policy policy(options& o, gradcomp::compression_policy p) {
  p.compress_vectors = o.get<bool>("compress_vectors", p.compress_vectors);
  p.min_compressed_elements = o.get<std::size_t>("min_compressed_elements", p.min_compressed_elements);
  return p;
}

// The receiver applies no momentum: torch's optimizer does, as it would without compression.
template <class Config>
Config quantiser(options& o) {
  Config cfg;
  cfg.momentum = 0.0;
  cfg.policy = policy(o, cfg.policy);
  return cfg;
}

using factory = std::function<std::unique_ptr<method>(options&, const world&)>;

struct method_entry {
  const char* description;
  bool carries_momentum;  // the optimizer must not apply momentum again
  factory make;
};

const std::map<std::string, method_entry>& registry() {
  static const std::map<std::string, method_entry> all = {
      {"dense",
       {"every gradient sent whole (fp32 through the wire format), averaged in rank order", false,
        [](options&, const world&) -> std::unique_ptr<method> {
          gradcomp::dgc_config cfg;
          cfg.momentum = 0.0;
          cfg.momentum_correction = false;
          cfg.momentum_masking = false;
          cfg.schedule = gradcomp::warmup_schedule::constant(1.0);
          return std::make_unique<message_method<gradcomp::dgc_compressor<float>>>(
              gradcomp::dgc_compressor<float>(cfg), gradcomp::tensor_mode::dense);
        }}},
      {"dgc",
       {"Deep Gradient Compression: momentum correction and masking, local clipping, warm-up to `density`; "
        "options density (0.001), warmup_steps (0), momentum (0.9), nesterov (False), clip_norm (0: off), "
        "selection ('sampled' or 'exact'), compress_vectors (False), min_compressed_elements (0), min_kept (0), "
        "small_tensors ('floor' or 'dense')",
        true,
        [](options& o, const world& w) -> std::unique_ptr<method> {
          gradcomp::dgc_config cfg;
          cfg.momentum = o.get<double>("momentum", 0.9);
          cfg.nesterov = o.get<bool>("nesterov", false);
          cfg.clip_norm = o.get<double>("clip_norm", 0.0);
          cfg.num_workers = w.size;
          cfg.schedule = schedule(o.get<double>("density", 0.001), o.get<std::size_t>("warmup_steps", 0));
          const auto sel = o.get<std::string>("selection", "sampled");
          if (sel != "sampled" && sel != "exact")
            throw py::value_error("gradcomp_torch: dgc: selection is 'sampled' or 'exact'");
          cfg.selection = sel == "exact" ? gradcomp::selection_method::exact_topk
                                         : gradcomp::selection_method::sampled_threshold;
          cfg.policy = policy(o, cfg.policy);
          cfg.small_tensors = small_tensors(o);
          return std::make_unique<message_method<gradcomp::dgc_compressor<float>>>(gradcomp::dgc_compressor<float>(cfg));
        }}},
      {"topk",
       {"exact top-k with error feedback on the gradient; options density (0.001), warmup_steps (0), "
        "compress_vectors (False), min_compressed_elements (0), min_kept (0), small_tensors ('floor' or 'dense')",
        false,
        [](options& o, const world&) -> std::unique_ptr<method> {
          gradcomp::dgc_config cfg;
          cfg.momentum = 0.0;
          cfg.momentum_correction = false;
          cfg.momentum_masking = false;
          cfg.selection = gradcomp::selection_method::exact_topk;
          cfg.schedule = schedule(o.get<double>("density", 0.001), o.get<std::size_t>("warmup_steps", 0));
          cfg.policy = policy(o, cfg.policy);
          cfg.small_tensors = small_tensors(o);
          return std::make_unique<message_method<gradcomp::dgc_compressor<float>>>(gradcomp::dgc_compressor<float>(cfg));
        }}},
      {"ef_signsgd",
       {"EF-SignSGD: scaled signs with error feedback, 1 bit per element (in gradient units: the optimizer's "
        "learning rate scales it)",
        false,
        [](options& o, const world&) -> std::unique_ptr<method> {
          gradcomp::ef_signsgd_config cfg;
          cfg.learning_rate = 1.0;
          cfg.policy = policy(o, cfg.policy);
          return std::make_unique<message_method<gradcomp::ef_signsgd_compressor<float>>>(
              gradcomp::ef_signsgd_compressor<float>(cfg));
        }}},
      {"terngrad",
       {"TernGrad: stochastic ternary gradients, 2 bits per element; options clip_sigmas (2.5), seed, "
        "share_scales (True: every rank sends each tensor with the largest of the ranks' scales, agreed by an "
        "all_reduce with max of one float per tensor, as in the paper)",
        false,
        [](options& o, const world& w) -> std::unique_ptr<method> {
          auto cfg = quantiser<gradcomp::terngrad_config>(o);
          cfg.clip_sigmas = o.get<double>("clip_sigmas", cfg.clip_sigmas);
          cfg.seed = o.get<std::uint64_t>("seed", cfg.seed);
          cfg.rank = w.rank;
          return std::make_unique<message_method<gradcomp::terngrad_compressor<float>>>(
              gradcomp::terngrad_compressor<float>(cfg), gradcomp::tensor_mode::automatic,
              o.get<bool>("share_scales", true));
        }}},
      {"onebit_sgd",
       {"1-bit SGD: one bit per element and two values per column, error feedback", false,
        [](options& o, const world&) -> std::unique_ptr<method> {
          return std::make_unique<message_method<gradcomp::onebit_sgd_compressor<float>>>(
              gradcomp::onebit_sgd_compressor<float>(quantiser<gradcomp::onebit_sgd_config>(o)));
        }}},
      {"qsgd",
       {"QSGD: stochastic levels of each bucket's norm; options levels (15), bucket (512), seed", false,
        [](options& o, const world& w) -> std::unique_ptr<method> {
          auto cfg = quantiser<gradcomp::qsgd_config>(o);
          cfg.levels = o.get<std::uint32_t>("levels", cfg.levels);
          cfg.bucket = o.get<std::uint32_t>("bucket", cfg.bucket);
          cfg.seed = o.get<std::uint64_t>("seed", cfg.seed);
          cfg.rank = w.rank;
          return std::make_unique<message_method<gradcomp::qsgd_compressor<float>>>(gradcomp::qsgd_compressor<float>(cfg));
        }}},
      {"adacomp",
       {"AdaComp: per bin, the residuals that reach the bin's largest, as signs of one scale per layer; options "
        "conv_bin (50), fc_bin (500)",
        false,
        [](options& o, const world&) -> std::unique_ptr<method> {
          auto cfg = quantiser<gradcomp::adacomp_config>(o);
          cfg.conv_bin = o.get<std::size_t>("conv_bin", cfg.conv_bin);
          cfg.fc_bin = o.get<std::size_t>("fc_bin", cfg.fc_bin);
          return std::make_unique<message_method<gradcomp::adacomp_compressor<float>>>(
              gradcomp::adacomp_compressor<float>(cfg));
        }}},
      {"powersgd",
       {"PowerSGD: each matrix as two rank-r factors averaged by all_reduce in two rounds; options rank (1), "
        "start_iter (0), min_compression_rate (2), error_feedback (True), warm_start (True), "
        "orthogonalization_epsilon (0), seed",
        false,
        [](options& o, const world&) -> std::unique_ptr<method> {
          gradcomp::powersgd_config cfg;
          cfg.rank = o.get<std::size_t>("rank", cfg.rank);
          cfg.start_step = o.get<std::size_t>("start_iter", cfg.start_step);
          cfg.min_compression_rate = o.get<double>("min_compression_rate", cfg.min_compression_rate);
          cfg.error_feedback = o.get<bool>("error_feedback", cfg.error_feedback);
          cfg.warm_start = o.get<bool>("warm_start", cfg.warm_start);
          cfg.orthogonalization_epsilon = o.get<double>("orthogonalization_epsilon", cfg.orthogonalization_epsilon);
          cfg.seed = o.get<std::uint64_t>("seed", cfg.seed);
          return std::make_unique<powersgd_method>(cfg);
        }}},
  };
  return all;
}

const method_entry& entry(const std::string& name) {
  const auto it = registry().find(name);
  if (it == registry().end()) throw py::value_error("gradcomp_torch: no method '" + name + "'");
  return it->second;
}

// A status for Python: 0, or the errc's value (error_name gives its name).
int status(const gradcomp::result<void>& r) { return r ? 0 : static_cast<int>(r.error()); }

// One DDP bucket's compressor and receiver.
class bucket {
 public:
  bucket(const std::string& name, const py::dict& opts, const std::vector<std::string>& names,
         const std::vector<std::vector<std::size_t>>& shapes, std::size_t rank, std::size_t world_size) {
    if (names.size() != shapes.size()) throw py::value_error("gradcomp_torch: one name per shape");
    if (world_size == 0 || rank >= world_size) throw py::value_error("gradcomp_torch: rank outside the world");
    options o(name, opts);
    try {
      m_ = entry(name).make(o, world{rank, world_size});
      o.check_all_used();
      for (std::size_t t = 0; t < shapes.size(); ++t) {
        m_->add_tensor(names[t], shapes[t]);
        std::size_t n = 1;
        for (const auto d : shapes[t]) n *= d;
        numels_.push_back(n);
      }
    } catch (const gradcomp::error& e) {
      throw py::value_error(std::string("gradcomp_torch: ") + e.what());
    }
    world_size_ = world_size;
    if (!m_->rounds()) {
      message_ = torch::empty({static_cast<std::int64_t>(m_->max_message_bytes())}, torch::kUInt8);
      agg_ = std::make_unique<gradcomp::aggregator<float>>(m_->receiver());
    }
  }

  bool rounds() const { return m_->rounds(); }

  bool shares_scales() const { return m_->shares_scales(); }
  // Scale sharing: (status, this rank's scale of every tensor, to be replaced by the largest over
  // the ranks and given to `compress`).
  std::pair<int, torch::Tensor> local_scales(const std::vector<torch::Tensor>& grads) {
    const auto views = gradient_views(grads);
    gradcomp::result<std::vector<float>> s = gradcomp::fail(errc::invalid_argument);
    {
      py::gil_scoped_release unlocked;
      s = m_->local_scales(views);
    }
    if (!s) return {static_cast<int>(s.error()), torch::Tensor()};
    return payload(gradcomp::span<const float>(s->data(), s->size()));
  }

  // One message per step: compresses the gradients (read in place), with the ranks' shared scales
  // where the method shares them, and encodes the message.
  int compress(const std::vector<torch::Tensor>& grads, const std::optional<torch::Tensor>& shared) {
    const auto views = gradient_views(grads);
    if (shared.has_value() != m_->shares_scales())
      throw py::value_error(m_->shares_scales() ? "gradcomp_torch: this method compresses with shared scales"
                                                : "gradcomp_torch: this method shares no scales");
    const auto scales = shared ? float_view(*shared, "the shared scales") : gradcomp::span<float>();
    py::gil_scoped_release unlocked;
    const auto done = shared ? m_->compress_shared(views, scales) : m_->compress(views);
    if (!done) return status(done);
    const auto n = m_->encode(byte_view(message_, "message"));
    if (!n) return static_cast<int>(n.error());
    length_ = *n;
    return 0;
  }
  torch::Tensor message() const { return message_.narrow(0, 0, static_cast<std::int64_t>(length_)); }

  // Every rank's message (row r of `messages`, its first lengths[r] bytes) added in rank order and
  // averaged into `out` (the bucket's gradient tensors). Returns (status, the rank whose message
  // was refused, or -1).
  std::pair<int, int> reduce(const torch::Tensor& messages, const std::vector<std::int64_t>& lengths,
                             const std::vector<torch::Tensor>& out) {
    if (messages.dim() != 2 || static_cast<std::size_t>(messages.size(0)) != world_size_ ||
        lengths.size() != world_size_)
      throw py::value_error("gradcomp_torch: reduce takes one message per rank");
    const auto all = byte_view(messages, "messages");
    const auto row = static_cast<std::size_t>(messages.size(1));
    const auto outs = output_views(out);
    py::gil_scoped_release unlocked;
    agg_->begin();
    for (std::size_t r = 0; r < world_size_; ++r) {
      if (lengths[r] < 0 || static_cast<std::size_t>(lengths[r]) > row) return {static_cast<int>(errc::truncated), int(r)};
      const auto added = agg_->add(all.subspan(r * row, static_cast<std::size_t>(lengths[r])));
      if (!added) return {status(added), static_cast<int>(r)};
    }
    if (const auto done = agg_->finish(world_size_); !done) return {status(done), -1};
    for (std::size_t t = 0; t < outs.size(); ++t) {
      const auto u = agg_->update(t);
      std::memcpy(outs[t].data(), u.data(), u.size_bytes());
    }
    return {0, -1};
  }

  // Rounds: (status, this rank's first payload).
  std::pair<int, torch::Tensor> begin_step(const std::vector<torch::Tensor>& grads) {
    const auto views = gradient_views(grads);
    gradcomp::result<gradcomp::span<const float>> p = gradcomp::fail(errc::invalid_argument);
    {
      py::gil_scoped_release unlocked;
      p = m_->begin_step(views);
    }
    return payload(p);
  }
  // Rounds: the open round's average over the ranks; (status, the next payload, empty when the
  // step is complete).
  std::pair<int, torch::Tensor> end_round(const torch::Tensor& average) {
    const auto a = float_view(average, "average");
    gradcomp::result<gradcomp::span<const float>> p = gradcomp::fail(errc::invalid_argument);
    {
      py::gil_scoped_release unlocked;
      p = m_->end_round(a);
    }
    return payload(p);
  }
  void cancel() { m_->cancel(); }
  // Rounds: the step's update into `out`.
  void write_update(const std::vector<torch::Tensor>& out) {
    const auto outs = output_views(out);
    for (std::size_t t = 0; t < outs.size(); ++t) {
      const auto u = m_->update(t);
      std::memcpy(outs[t].data(), u.data(), u.size_bytes());
    }
  }

  // The compressor's snapshot and the receiver's (its momentum, where the method's receiver
  // applies some: DGC's tensors sent dense), empty for a method without one.
  std::pair<py::bytes, py::bytes> state() const {
    const auto c = m_->snapshot();
    const auto a = agg_ ? gradcomp::save_snapshot(*agg_) : std::vector<std::byte>();
    return {py::bytes(reinterpret_cast<const char*>(c.data()), c.size()),
            py::bytes(reinterpret_cast<const char*>(a.data()), a.size())};
  }
  int load_state(const py::bytes& compressor, const py::bytes& receiver) {
    const std::string c = compressor, a = receiver;
    if (agg_ == nullptr && !a.empty()) return static_cast<int>(errc::layout_mismatch);
    if (agg_ != nullptr) {
      const auto r = gradcomp::restore_snapshot(*agg_, bytes_of(a));
      if (!r) return status(r);
    }
    return status(m_->restore(bytes_of(c)));
  }
  // The addresses the last compress or begin_step read the gradients at.
  std::vector<std::uintptr_t> last_pointers() const { return pointers_; }

 private:
  std::vector<gradcomp::span<const float>> gradient_views(const std::vector<torch::Tensor>& grads) {
    if (grads.size() != numels_.size()) throw py::value_error("gradcomp_torch: one gradient per tensor");
    std::vector<gradcomp::span<const float>> v;
    pointers_.clear();
    for (std::size_t t = 0; t < grads.size(); ++t) {
      const auto g = float_view(grads[t], "a gradient");
      if (g.size() != numels_[t]) throw py::value_error("gradcomp_torch: a gradient of another size");
      v.emplace_back(g.data(), g.size());
      pointers_.push_back(reinterpret_cast<std::uintptr_t>(g.data()));
    }
    return v;
  }
  std::vector<gradcomp::span<float>> output_views(const std::vector<torch::Tensor>& out) {
    if (out.size() != numels_.size()) throw py::value_error("gradcomp_torch: one output per tensor");
    std::vector<gradcomp::span<float>> v;
    for (std::size_t t = 0; t < out.size(); ++t) {
      v.push_back(float_view(out[t], "an output"));
      if (v.back().size() != numels_[t]) throw py::value_error("gradcomp_torch: an output of another size");
    }
    return v;
  }
  static gradcomp::span<const std::byte> bytes_of(const std::string& s) {
    return gradcomp::span<const std::byte>(reinterpret_cast<const std::byte*>(s.data()), s.size());
  }
  static std::pair<int, torch::Tensor> payload(const gradcomp::result<gradcomp::span<const float>>& p) {
    if (!p) return {static_cast<int>(p.error()), torch::Tensor()};
    auto t = torch::empty({static_cast<std::int64_t>(p->size())}, torch::kFloat32);
    if (!p->empty()) std::memcpy(t.data_ptr<float>(), p->data(), p->size_bytes());
    return {0, t};
  }

  std::unique_ptr<method> m_;
  std::vector<std::size_t> numels_;
  std::size_t world_size_ = 1;
  torch::Tensor message_;
  std::size_t length_ = 0;
  std::unique_ptr<gradcomp::aggregator<float>> agg_;
  std::vector<std::uintptr_t> pointers_;
};

}  // namespace gradcomp_torch

PYBIND11_MODULE(_core, m) {
  using namespace gradcomp_torch;
  m.doc() = "gradcomp's compressors for PyTorch's DDP communication hook (see gradcomp_torch)";
  m.def(
      "methods",
      [] {
        std::map<std::string, std::pair<std::string, bool>> out;
        for (const auto& [name, e] : registry()) out[name] = {e.description, e.carries_momentum};
        return out;
      },
      "Every method: name -> (description, whether it carries momentum itself)");
  m.def(
      "error_name", [](int code) { return std::string(gradcomp::to_string(static_cast<errc>(code))); },
      "The name of a status code");
  py::class_<bucket>(m, "Bucket")
      .def(py::init<const std::string&, const py::dict&, const std::vector<std::string>&,
                    const std::vector<std::vector<std::size_t>>&, std::size_t, std::size_t>(),
           py::arg("method"), py::arg("options"), py::arg("names"), py::arg("shapes"), py::arg("rank"),
           py::arg("world_size"))
      .def_property_readonly("rounds", &bucket::rounds)
      .def_property_readonly("shares_scales", &bucket::shares_scales)
      .def("local_scales", &bucket::local_scales)
      .def("compress", &bucket::compress, py::arg("grads"), py::arg("shared") = py::none())
      .def("message", &bucket::message)
      .def("reduce", &bucket::reduce)
      .def("begin_step", &bucket::begin_step)
      .def("end_round", &bucket::end_round)
      .def("cancel", &bucket::cancel)
      .def("write_update", &bucket::write_update)
      .def("state", &bucket::state)
      .def("load_state", &bucket::load_state)
      .def("last_pointers", &bucket::last_pointers);
}
