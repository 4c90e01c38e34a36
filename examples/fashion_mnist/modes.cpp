// The demo's mode registry (modes.hpp): the adapters that put every gradcomp compressor behind
// `worker_compressor`, on each backend of --backend, and the registry itself. One translation unit
// of the library target gradcomp_fashion_mnist (examples/fashion_mnist/demo_deps.cmake); the nvcc
// build of the demo compiles it as modes_cuda.cu. Part of the example, not of the library.
#include "modes.hpp"

#if defined(FMNIST_WITH_THRUST)
#include <gradcomp/thrust.hpp>
#if defined(__CUDACC__)
#include <thrust/system/cuda/execution_policy.h>
#else
#include <thrust/system/omp/execution_policy.h>
#endif
#endif

namespace fmnist {

/// ISGQ (`gradcomp::isgq_compressor`): every weight matrix (a fully connected layer's) sent as its
/// quantised factors X and Delta, the other tensors (biases) whole in fp32; the receiver averages
/// and applies its momentum, as for the other quantisers.
class isgq_adapter final : public worker_compressor {
 public:
  isgq_adapter(gradcomp::isgq_config cfg, std::size_t batch, double momentum)
      : c_(cfg), batch_(batch), momentum_(momentum) {}
  std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                         gradcomp::tensor_mode) override {
    gradcomp::tensor_info t;
    t.name = name;
    t.shape = shape;
    t.numel = 1;
    for (const std::size_t d : shape) t.numel *= d;
    t.compressed = shape.size() == 2;  // a weight matrix, out x in
    layer_.push_back(t.compressed ? c_.add_layer(name, shape[1], shape[0], gradcomp::isgq_layout::out_in, info_.size())
                                  : none);
    info_.push_back(std::move(t));
    return info_.size() - 1;
  }
  const gradcomp::tensor_info& info(std::size_t id) const override { return info_.at(id); }
  void begin_step(std::size_t, double) override {}
  double density() override { return 1.0; }
  double final_density() const override { return 1.0; }
  bool uses_factors() const override { return true; }
  void set_factors(const std::vector<layer_factors>& f) override { factors_ = f; }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& grads) override {
    if (grads.size() != info_.size()) return gradcomp::fail(gradcomp::errc::wrong_tensor_count);
    messages_.clear();
    for (std::size_t t = 0; t < grads.size(); ++t) {
      if (layer_[t] == none) {
        gradcomp::tensor_message<float> m;
        m.tensor = t;
        m.numel = grads[t].size();
        m.dense = true;
        m.values = grads[t];
        messages_.push_back(m);
        continue;
      }
      if (layer_[t] >= factors_.size()) return gradcomp::fail(gradcomp::errc::invalid_argument);
      const layer_factors& f = factors_[layer_[t]];
      const auto m = c_.compress(layer_[t], gradcomp::span<const float>(f.x, f.batch * f.n_in),
                                 gradcomp::span<const float>(f.delta, f.batch * f.n_out), f.batch);
      if (!m) return gradcomp::fail(m.error());
      messages_.push_back(*m);
    }
    ++steps_;
    return {};
  }
  gradcomp::result<gradcomp::step_stats> stats() override {
    gradcomp::step_stats s;
    s.step = steps_ - 1;
    s.density = 1.0;
    for (const auto& t : info_) {
      s.total_elements += t.numel;
      (t.compressed ? s.target_elements : s.dense_elements) += t.numel;
      if (t.compressed) s.kept_elements += t.numel;
    }
    return s;
  }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options& opt) const override {
    std::uint64_t total = gradcomp::wire::message_overhead_bytes(opt);
    for (std::size_t t = 0; t < info_.size(); ++t) {
      if (layer_[t] == none) {
        total += gradcomp::wire::max_section_bytes(info_[t].numel, info_[t].numel, true, opt).value();
        continue;
      }
      // The isgq payload of a batch of batch_: its block, scales and codes.
      gradcomp::detail::isgq_block b;
      b.batch = static_cast<std::uint32_t>(batch_);
      b.n_in = static_cast<std::uint32_t>(info_[t].shape[1]);
      b.n_out = static_cast<std::uint32_t>(info_[t].shape[0]);
      b.levels = static_cast<std::uint16_t>(c_.config().levels);
      b.bucket = c_.config().bucket;
      b.variant = c_.config().method == gradcomp::isgq_method::dithered ? gradcomp::detail::isgq_variant::dithered
                                                                          : gradcomp::detail::isgq_variant::levels;
      total += gradcomp::wire::section_header_bytes + b.payload_bytes();
    }
    return static_cast<std::size_t>(total);
  }
  gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options& opt,
                                               gradcomp::span<std::byte> out) override {
    return gradcomp::wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(messages_.data(), messages_.size()),
                                  opt, out);
  }
  gradcomp::receiver_layout receiver() const override {
    gradcomp::receiver_layout l;
    l.momentum = momentum_;
    for (const auto& t : info_) {
      gradcomp::receiver_tensor r;
      r.info = t;
      r.dense = true;
      r.momentum = true;
      l.tensors.push_back(r);
    }
    return l;
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  gradcomp::isgq_compressor<float> c_;
  std::size_t batch_;
  double momentum_;
  std::vector<gradcomp::tensor_info> info_;
  std::vector<std::size_t> layer_;  // the ISGQ layer of each tensor, or none
  std::vector<layer_factors> factors_;
  std::vector<gradcomp::tensor_message<float>> messages_;
  std::size_t steps_ = 0;
};

/// PowerSGD (`gradcomp::powersgd_compressor`): two rounds of averages per step (`round_worker`),
/// each a wire message of its round's kind; the replica applies its momentum to the step's average
/// (every tensor dense in `receiver()`). Its rounds run on the CPU whatever the backend.
class powersgd_adapter final : public worker_compressor, public round_worker {
 public:
  powersgd_adapter(gradcomp::powersgd_config cfg, double momentum) : c_(cfg), momentum_(momentum) {}
  std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                         gradcomp::tensor_mode mode) override {
    return c_.add_tensor(name, shape, mode);
  }
  const gradcomp::tensor_info& info(std::size_t id) const override { return c_.info(id); }
  void begin_step(std::size_t, double) override {}
  // The share of the elements the next step sends (both rounds): 1 for a dense step.
  double density() override { return c_.rounds() == 2 ? final_density() : 1.0; }
  // The share a compressing step sends: (n + m) r of a compressed tensor, every other element.
  double final_density() const override {
    double sent = 0.0, total = 0.0;
    for (std::size_t t = 0; t < c_.num_tensors(); ++t) {
      const auto& info = c_.info(t);
      const double rows = info.shape.empty() ? 1.0 : static_cast<double>(info.shape[0]);
      const double numel = static_cast<double>(info.numel);
      sent += c_.rank(t) != 0 ? (rows + numel / rows) * static_cast<double>(c_.rank(t)) : numel;
      total += numel;
    }
    return total == 0.0 ? 1.0 : sent / total;
  }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>&) override {
    return gradcomp::fail(gradcomp::errc::invalid_argument);  // its step is its rounds
  }
  gradcomp::result<gradcomp::step_stats> stats() override { return gradcomp::fail(gradcomp::errc::invalid_argument); }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options&) const override { return 0; }
  gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options&,
                                               gradcomp::span<std::byte>) override {
    return gradcomp::fail(gradcomp::errc::invalid_argument);
  }
  gradcomp::receiver_layout receiver() const override {
    gradcomp::receiver_layout l;
    l.momentum = momentum_;
    for (std::size_t t = 0; t < c_.num_tensors(); ++t) l.tensors.push_back({c_.info(t), true, true, 0});
    return l;
  }
  round_worker* rounds() override { return this; }

  gradcomp::result<void> begin(const std::vector<gradcomp::span<const float>>& grads) override {
    sent_ = c_.round_size(1) + c_.round_size(2);
    const auto p = c_.begin_step(gradcomp::span<const gradcomp::span<const float>>(grads.data(), grads.size()));
    return p ? gradcomp::result<void>() : gradcomp::fail(p.error());
  }
  std::size_t round() const override { return c_.round(); }
  gradcomp::wire::message_kind round_kind() const override { return c_.round_kind(c_.round()); }
  gradcomp::receiver_layout round_layout() const override { return c_.round_layout(c_.round()); }
  std::size_t max_round_bytes(const gradcomp::wire::encode_options& opt) const override {
    return c_.max_round_bytes(opt);
  }
  gradcomp::result<std::size_t> encode_round(const gradcomp::wire::encode_options& opt,
                                             gradcomp::span<std::byte> out) const override {
    return c_.encode_round(opt, out);
  }
  gradcomp::result<void> end_round(gradcomp::span<const float> average) override {
    const auto next = c_.end_round(average);
    return next ? gradcomp::result<void>() : gradcomp::fail(next.error());
  }
  std::size_t sent_elements() const override { return sent_; }
  gradcomp::span<const float> update(std::size_t t) const override { return c_.update(t); }

 private:
  gradcomp::powersgd_compressor<float> c_;
  double momentum_;
  std::size_t sent_ = 0;
};

namespace detail {
template <class C, class = void>
struct has_epoch : std::false_type {};
template <class C>
struct has_epoch<C, std::void_t<decltype(std::declval<C&>().set_epoch(std::size_t{}))>> : std::true_type {};
template <class C, class = void>
struct has_learning_rate : std::false_type {};
template <class C>
struct has_learning_rate<C, std::void_t<decltype(std::declval<C&>().set_learning_rate(1.0))>> : std::true_type {};
template <class C, class = void>
struct has_schedule : std::false_type {};
template <class C>
struct has_schedule<C, std::void_t<decltype(std::declval<const C&>().config().schedule.final_density())>>
    : std::true_type {};
template <class C, class = void>
struct has_local_scales : std::false_type {};
template <class C>
struct has_local_scales<C, std::void_t<decltype(std::declval<C&>().local_scales(
                               std::declval<gradcomp::span<const typename C::tensor_view>>()))>> : std::true_type {};
}  // namespace detail

/// A gradcomp compressor on `Backend` as a `worker_compressor`. Hooks a compressor does not have
/// (an epoch, a learning rate, a schedule) are skipped. Where the backend's memory is not the
/// host's, each step's gradients are first copied into buffers in that memory, where a trainer
/// on that backend would hold them.
template <class Compressor, class Backend = gradcomp::cpu_backend>
class compressor_adapter final : public worker_compressor {
  static_assert(gradcomp::is_compressor_v<Compressor>, "not a gradcomp compressor");
  static constexpr bool host_memory = gradcomp::is_host_accessible_v<gradcomp::memory_space_t<Backend>>;

 public:
  /// `share_scales`: agree on the scales before each step, where the compressor can.
  explicit compressor_adapter(Compressor c, Backend backend = Backend{}, bool share_scales = false)
      : c_(std::move(c)), backend_(backend), share_(share_scales) {}
  std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                         gradcomp::tensor_mode mode) override {
    const std::size_t id = c_.add_tensor(name, shape, mode);
    if constexpr (!host_memory) staged_.push_back(gradcomp::allocate_buffer<float>(backend_, c_.info(id).numel));
    return id;
  }
  const gradcomp::tensor_info& info(std::size_t id) const override { return c_.info(id); }
  void begin_step(std::size_t epoch, double lr) override {
    if constexpr (detail::has_epoch<Compressor>::value) c_.set_epoch(epoch);
    if constexpr (detail::has_learning_rate<Compressor>::value) c_.set_learning_rate(lr);
    (void)epoch;
    (void)lr;
  }
  double density() override {
    if constexpr (detail::has_schedule<Compressor>::value)
      return c_.density();
    else
      return 1.0;
  }
  double final_density() const override {
    if constexpr (detail::has_schedule<Compressor>::value)
      return c_.config().schedule.final_density();
    else
      return 1.0;
  }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& grads) override {
    if (const auto staged = stage(grads); !staged) return staged;
    return c_.compress(views_);
  }
  bool shares_scales() const override { return share_ && detail::has_local_scales<Compressor>::value; }
  gradcomp::result<std::vector<float>> local_scales(const std::vector<gradcomp::span<const float>>& grads) override {
    if constexpr (detail::has_local_scales<Compressor>::value) {
      if (const auto staged = stage(grads); !staged) return gradcomp::fail(staged.error());
      return c_.local_scales(staged_views());
    } else {
      (void)grads;
      return gradcomp::fail(gradcomp::errc::invalid_argument);
    }
  }
  gradcomp::result<void> compress_shared(const std::vector<gradcomp::span<const float>>& grads,
                                         gradcomp::span<const float> shared) override {
    if constexpr (detail::has_local_scales<Compressor>::value) {
      if (const auto staged = stage(grads); !staged) return staged;
      return c_.compress(staged_views(), shared);
    } else {
      (void)grads;
      (void)shared;
      return gradcomp::fail(gradcomp::errc::invalid_argument);
    }
  }
  gradcomp::result<gradcomp::step_stats> stats() override { return c_.stats(); }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options& opt) const override {
    return c_.max_message_bytes(opt);
  }
  gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options& opt,
                                               gradcomp::span<std::byte> out) override {
    return c_.encode_message(opt, out);
  }
  gradcomp::receiver_layout receiver() const override { return c_.receiver(); }

 private:
  // The gradients as views in the backend's memory (views_): the host's own where the backend
  // reads it, else copies in staged_.
  gradcomp::result<void> stage(const std::vector<gradcomp::span<const float>>& grads) {
    if (grads.size() != c_.num_tensors()) return gradcomp::fail(gradcomp::errc::wrong_tensor_count);
    views_.clear();
    for (std::size_t t = 0; t < grads.size(); ++t) {
      if constexpr (host_memory) {
        views_.push_back(grads[t]);
      } else {
        const auto copied = gradcomp::copy_to_backend(backend_, grads[t], staged_[t].view());
        if (!copied) return copied;
        views_.push_back(gradcomp::readonly(staged_[t].view()));
      }
    }
    return {};
  }
  gradcomp::span<const typename Compressor::tensor_view> staged_views() const {
    return gradcomp::span<const typename Compressor::tensor_view>(views_.data(), views_.size());
  }

  Compressor c_;
  Backend backend_;
  bool share_;
  std::vector<gradcomp::backend_buffer<float, Backend>> staged_;  // where the host's memory is not the backend's
  std::vector<typename Compressor::tensor_view> views_;
};

namespace detail {

// Host memory and a backend's, for the SAEF stages: where the backend's memory is not the host's,
// buffers there that the host's data is copied into (and results out of), one per tensor.
template <class Backend>
class staging {
 public:
  static constexpr bool host_memory = gradcomp::is_host_accessible_v<gradcomp::memory_space_t<Backend>>;
  using view = gradcomp::backend_span<const float, Backend>;

  explicit staging(Backend backend) : backend_(backend) {}
  void add(std::size_t n) {
    if constexpr (!host_memory) buffers_.push_back(gradcomp::allocate_buffer<float>(backend_, n));
    host_.emplace_back(host_memory ? 0 : n);
  }
  // Tensor t's host data as a view in the backend's memory (copied into it where needed).
  gradcomp::result<view> in(std::size_t t, gradcomp::span<const float> x) {
    if constexpr (host_memory) {
      return view(x);
    } else {
      if (const auto copied = gradcomp::copy_to_backend(backend_, x, buffers_[t].view()); !copied)
        return gradcomp::fail(copied.error());
      return gradcomp::readonly(buffers_[t].view());
    }
  }
  // Every tensor's host data as views in the backend's memory.
  gradcomp::result<std::vector<view>> in(const std::vector<gradcomp::span<const float>>& xs) {
    std::vector<view> out;
    for (std::size_t t = 0; t < xs.size() && t < host_.size(); ++t) {
      const auto v = in(t, xs[t]);
      if (!v) return gradcomp::fail(v.error());
      out.push_back(*v);
    }
    if (xs.size() != host_.size()) return gradcomp::fail(gradcomp::errc::wrong_tensor_count);
    return out;
  }
  // Tensor t's scratch in the backend's memory, where an operation writes what out() reads.
  gradcomp::backend_span<float, Backend> scratch(std::size_t t) { return buffers_[t].view(); }
  // `v` (backend memory) as host memory: itself, or a copy in tensor t's host buffer.
  gradcomp::span<const float> out(std::size_t t, view v) const {
    if constexpr (host_memory) {
      return v;
    } else {
      host_[t].resize(v.size());
      if (!gradcomp::copy_to_host(backend_, v, gradcomp::span<float>(host_[t].data(), v.size())))
        throw std::runtime_error("staging: a copy to the host failed");
      gradcomp::synchronize(backend_);
      return gradcomp::span<const float>(host_[t].data(), v.size());
    }
  }

 private:
  Backend backend_;
  std::vector<gradcomp::backend_buffer<float, Backend>> buffers_;
  mutable std::vector<std::vector<float>> host_;
};

}  // namespace detail

/// A worker of Step-Ahead Error Feedback (`gradcomp::saef_worker`) around a compressor, on the
/// compressor's backend: its gradients go to the worker's momentum, `eta * M` through the
/// compressor. Where the backend's memory is not the host's, the host's gradients, weights and
/// residuals are staged through buffers in it.
template <class Compressor>
class saef_adapter final : public worker_compressor {
  using worker_type = gradcomp::saef_worker<Compressor>;
  using Backend = typename worker_type::backend_type;

 public:
  saef_adapter(Compressor c, gradcomp::saef_config cfg)
      : c_(std::move(c)), cfg_(cfg), grads_(c_.backend()), points_(c_.backend()), residuals_(c_.backend()) {}
  std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                         gradcomp::tensor_mode mode) override {
    const std::size_t id = c_.add_tensor(name, shape, mode);
    grads_.add(c_.info(id).numel);
    points_.add(c_.info(id).numel);
    residuals_.add(c_.info(id).numel);
    return id;
  }
  const gradcomp::tensor_info& info(std::size_t id) const override { return c_.info(id); }
  void begin_step(std::size_t epoch, double lr) override {
    if constexpr (detail::has_epoch<Compressor>::value) c_.set_epoch(epoch);
    (void)epoch;
    worker().set_learning_rate(lr);
  }
  double density() override {
    if constexpr (detail::has_schedule<Compressor>::value) return c_.density();
    else return 1.0;
  }
  double final_density() const override {
    if constexpr (detail::has_schedule<Compressor>::value) return c_.config().schedule.final_density();
    else return 1.0;
  }
  gradcomp::result<void> compress(const std::vector<gradcomp::span<const float>>& grads) override {
    const auto staged = grads_.in(grads);
    if (!staged) return gradcomp::fail(staged.error());
    return worker().step(*staged);
  }
  gradcomp::result<gradcomp::step_stats> stats() override { return c_.stats(); }
  std::size_t max_message_bytes(const gradcomp::wire::encode_options& opt) const override {
    return c_.max_message_bytes(opt);
  }
  gradcomp::result<std::size_t> encode_message(const gradcomp::wire::encode_options& opt,
                                               gradcomp::span<std::byte> out) override {
    return c_.encode_message(opt, out);
  }
  gradcomp::receiver_layout receiver() const override { return worker().receiver(); }
  bool steps_ahead() const override { return true; }
  void lookahead(std::size_t t, gradcomp::span<const float> x, gradcomp::span<float> out) override {
    bool done = false;
    if constexpr (detail::staging<Backend>::host_memory) {
      done = static_cast<bool>(worker().lookahead(t, x, out));
    } else if (const auto at = points_.in(t, x); at) {
      done = static_cast<bool>(worker().lookahead(t, *at, points_.scratch(t)));
      if (done) {
        const auto back = points_.out(t, gradcomp::readonly(points_.scratch(t)));
        std::copy(back.begin(), back.end(), out.begin());
      }
    }
    if (!done) throw std::logic_error("lookahead: the tensor's own length");
  }
  bool averaging_due() const override { return worker_ && worker_->averaging_due(); }
  gradcomp::span<const float> residual(std::size_t t) const override {
    return worker_ ? residuals_.out(t, worker_->residual(t)) : gradcomp::span<const float>();
  }
  gradcomp::result<void> set_residuals(const std::vector<gradcomp::span<const float>>& mean) override {
    const auto staged = grads_.in(mean);
    if (!staged) return gradcomp::fail(staged.error());
    return worker().set_residuals(*staged);
  }

 private:
  // The SAEF worker, once the tensors are registered.
  worker_type& worker() {
    if (!worker_) worker_ = std::make_unique<worker_type>(c_, cfg_);
    return *worker_;
  }
  const worker_type& worker() const { return const_cast<saef_adapter*>(this)->worker(); }

  Compressor c_;
  gradcomp::saef_config cfg_;
  std::unique_ptr<worker_type> worker_;
  detail::staging<Backend> grads_;   // the gradients, or the mean residuals
  detail::staging<Backend> points_;     // the weights and the step-ahead points
  detail::staging<Backend> residuals_;  // the residuals read back
};

/// The server of Step-Ahead Error Feedback (`gradcomp::saef_server`) around a compressor, on its
/// backend (the averaged update staged in, D' read back where that memory is not the host's).
template <class Compressor>
class saef_server_stage final : public update_stage {
  using server_type = gradcomp::saef_server<Compressor>;
  using Backend = typename server_type::backend_type;

 public:
  explicit saef_server_stage(Compressor c) : c_(std::move(c)), mean_(c_.backend()), updates_(c_.backend()) {}
  std::size_t add_tensor(const std::string& name, const std::vector<std::size_t>& shape,
                         gradcomp::tensor_mode mode) override {
    const std::size_t id = c_.add_tensor(name, shape, mode);
    mean_.add(c_.info(id).numel);
    updates_.add(c_.info(id).numel);
    return id;
  }
  gradcomp::result<void> step(const std::vector<gradcomp::span<const float>>& mean) override {
    if (!server_) server_ = std::make_unique<server_type>(c_);
    const auto staged = mean_.in(mean);
    if (!staged) return gradcomp::fail(staged.error());
    return server_->step(*staged);
  }
  gradcomp::span<const float> update(std::size_t t) const override { return updates_.out(t, server_->update(t)); }

 private:
  Compressor c_;  // a warm-up schedule counts steps, as the workers' do
  std::unique_ptr<server_type> server_;
  detail::staging<Backend> mean_;
  detail::staging<Backend> updates_;
};

template <class Backend>
class backend_sums final : public replica_sums {
  static constexpr bool host_memory = gradcomp::is_host_accessible_v<gradcomp::memory_space_t<Backend>>;

 public:
  backend_sums(const gradcomp::receiver_layout& layout, Backend backend)
      : aggregator_(layout, backend), backend_(backend) {}
  void begin() override { aggregator_.begin(); }
  gradcomp::result<void> add(gradcomp::span<const std::byte> message) override { return aggregator_.add(message); }
  gradcomp::result<void> finish(std::size_t workers) override { return aggregator_.finish(workers); }
  gradcomp::span<const float> update(std::size_t t) override {
    const auto u = aggregator_.update(t);
    if constexpr (host_memory) {
      return u;
    } else {
      if (host_.size() <= t) host_.resize(t + 1);
      auto& h = host_[t];
      h.resize(u.size());
      if (!gradcomp::copy_to_host(backend_, u, gradcomp::span<float>(h.data(), h.size())))
        throw std::logic_error("update: a buffer of its own size");
      gradcomp::synchronize(backend_);
      return gradcomp::span<const float>(h.data(), h.size());
    }
  }

 private:
  gradcomp::aggregator<float, Backend> aggregator_;
  Backend backend_;
  std::vector<std::vector<float>> host_;  // each tensor's update read back (other memory)
};

#if defined(FMNIST_WITH_THRUST) && defined(__CUDACC__)
/// Built by nvcc: the portable Thrust backend on Thrust's CUDA system, on the GPU.
using thrust_demo_backend = gradcomp::thrust_backend<thrust::system::cuda::tag>;
inline constexpr const char* thrust_demo_backend_name = "cuda";
#elif defined(FMNIST_WITH_THRUST)
/// The portable Thrust backend on Thrust's OpenMP system: the code a GPU runs, on the CPU's cores.
using thrust_demo_backend = gradcomp::thrust_backend<thrust::system::omp::tag>;
inline constexpr const char* thrust_demo_backend_name = "thrust";
#endif

/// The backends of --backend: "cpu", and "thrust" where the demo was built with the Thrust headers
/// ("cuda" instead where nvcc built it).
std::vector<std::string> backend_names() {
  std::vector<std::string> names = {"cpu"};
#if defined(FMNIST_WITH_THRUST)
  names.push_back(thrust_demo_backend_name);
#endif
  return names;
}

/// Calls f(backend value) for the backend named `name`; throws std::invalid_argument for a name
/// not in backend_names().
template <class F>
decltype(auto) with_backend(const std::string& name, F&& f) {
  if (name == "cpu") return f(gradcomp::cpu_backend{});
#if defined(FMNIST_WITH_THRUST)
  if (name == thrust_demo_backend_name) return f(thrust_demo_backend{});
#endif
  throw std::invalid_argument("unknown backend '" + name + "'");
}

/// The replica's sums for `layout` on the backend `o.backend`.
std::unique_ptr<replica_sums> make_replica(const train_options& o, const gradcomp::receiver_layout& layout) {
  return with_backend(o.backend, [&](auto backend) -> std::unique_ptr<replica_sums> {
    return std::make_unique<backend_sums<decltype(backend)>>(layout, backend);
  });
}

namespace detail {
// The DGC settings every DGC-based mode starts from.
inline mode_spec dgc_base(const std::string& name, const train_options& o) {
  mode_spec m;
  m.name = name;
  m.config.momentum = o.momentum;
  m.config.num_workers = o.workers;
  m.config.seed = o.seed;
  m.config.policy.compress_vectors = o.compress_vectors;
  m.config.small_tensors = o.small_tensors;
  return m;
}
// A compressor template of the library with its configuration, on the backend `o.backend`
// (sharing scales where `share_scales` asks).
template <template <class, class> class Compressor, class Config>
std::unique_ptr<worker_compressor> adapted(const train_options& o, const Config& cfg, bool share_scales = false) {
  return with_backend(o.backend, [&](auto backend) -> std::unique_ptr<worker_compressor> {
    using B = decltype(backend);
    using C = Compressor<float, B>;
    return std::make_unique<compressor_adapter<C, B>>(C(cfg, backend), backend, share_scales);
  });
}
// A mode whose workers each run a `Compressor<float, B>` of a `Config` that `configure(cfg, rank)`
// sets, on the backend `o.backend` (sharing scales where `share_scales` asks).
template <template <class, class> class Compressor, class Config, class Configure>
mode_spec compressor_mode(const std::string& name, const train_options& o, Configure configure,
                          bool share_scales = false) {
  mode_spec m;
  m.name = name;
  m.make_worker = [o, configure, share_scales](std::size_t rank) -> std::unique_ptr<worker_compressor> {
    Config cfg;
    configure(cfg, rank);
    return adapted<Compressor>(o, cfg, share_scales);
  };
  return m;
}
// The paper's warm-up to the final density over `warmup_epochs` (4 exponential stages).
inline gradcomp::warmup_schedule warmup(const train_options& o, std::size_t steps_per_epoch) {
  const std::size_t warmup_steps = std::max<std::size_t>(
      4, static_cast<std::size_t>(std::llround(o.warmup_epochs * double(steps_per_epoch))));
  return gradcomp::warmup_schedule::paper(o.final_density, 4, gradcomp::schedule_unit::step, (warmup_steps + 3) / 4);
}

// Top-k with error feedback on its input as SAEF's compressor: DGC's exact top-k without momentum
// correction, the demo's warm-up to the final density.
template <class Backend>
gradcomp::dgc_compressor<float, Backend> saef_topk(const train_options& o, std::size_t steps_per_epoch,
                                                   Backend backend) {
  gradcomp::dgc_config cfg;
  cfg.momentum_correction = false;
  cfg.momentum_masking = false;
  cfg.selection = gradcomp::selection_method::exact_topk;
  cfg.schedule = warmup(o, steps_per_epoch);
  cfg.policy.compress_vectors = o.compress_vectors;
  cfg.small_tensors = o.small_tensors;
  return gradcomp::dgc_compressor<float, Backend>(cfg, backend);
}
// Scaled signs with error feedback on its input (learning rate 1: the input is eta * M).
template <class Backend>
gradcomp::ef_signsgd_compressor<float, Backend> saef_sign(Backend backend) {
  gradcomp::ef_signsgd_config cfg;
  cfg.learning_rate = 1.0;
  return gradcomp::ef_signsgd_compressor<float, Backend>(cfg, backend);
}
// A SAEF mode: the worker's and the server's compressor from make(backend) on the backend
// `o.backend`, residuals averaged every 20 steps.
template <class Make>
mode_spec saef_mode(const std::string& name, const train_options& o, Make make) {
  mode_spec m;
  m.name = name;
  gradcomp::saef_config cfg;
  cfg.learning_rate = o.lr;
  cfg.momentum = o.momentum;
  cfg.average_every = 20;
  const std::string backend = o.backend;
  m.make_worker = [make, cfg, backend](std::size_t) -> std::unique_ptr<worker_compressor> {
    return with_backend(backend, [&](auto b) -> std::unique_ptr<worker_compressor> {
      auto c = make(b);
      return std::make_unique<saef_adapter<decltype(c)>>(std::move(c), cfg);
    });
  };
  m.make_server = [make, backend]() -> std::unique_ptr<update_stage> {
    return with_backend(backend, [&](auto b) -> std::unique_ptr<update_stage> {
      auto c = make(b);
      return std::make_unique<saef_server_stage<decltype(c)>>(std::move(c));
    });
  };
  m.update_includes_lr = true;
  return m;
}
// PowerSGD at `rank` after DGC's warm-up length of dense steps (PyTorch's start_powerSGD_iter;
// from the first step, rank 1 with 8 workers does not train at the demo's learning rate), the
// same draws of Q on every worker.
inline mode_spec powersgd_mode(const std::string& name, const train_options& o, std::size_t steps_per_epoch,
                               std::size_t rank) {
  mode_spec m;
  m.name = name;
  const auto dense_steps = static_cast<std::size_t>(std::llround(o.warmup_epochs * double(steps_per_epoch)));
  m.make_worker = [o, rank, dense_steps](std::size_t) -> std::unique_ptr<worker_compressor> {
    gradcomp::powersgd_config cfg;
    cfg.rank = rank;
    cfg.start_step = dense_steps;
    cfg.seed = o.seed;
    return std::make_unique<powersgd_adapter>(cfg, o.momentum);
  };
  return m;
}
}  // namespace detail

/// Every mode of the demo, in the order it runs them by default.
const std::vector<mode_entry>& modes() {
  static const std::vector<mode_entry> all = {
      {"dense", "momentum SGD, every gradient sent whole (fp32 through the wire format)",
       [](const train_options& o, std::size_t) {
         auto m = detail::dgc_base("dense", o);
         m.dense = true;
         m.config.schedule = gradcomp::warmup_schedule::constant(1.0);
         return m;
       }},
      {"dgc",
       "momentum correction, momentum factor masking, local gradient clipping, warm-up to the final density",
       [](const train_options& o, std::size_t steps_per_epoch) {
         auto m = detail::dgc_base("dgc", o);
         m.config.clip_norm = o.clip_norm;
         m.config.schedule = detail::warmup(o, steps_per_epoch);
         return m;
       }},
      {"topk_ef",
       "exact top-k with error feedback on the gradient, same warm-up; the receiver applies momentum",
       [](const train_options& o, std::size_t steps_per_epoch) {
         auto m = detail::dgc_base("topk_ef", o);
         m.config.momentum_correction = false;
         m.config.momentum_masking = false;
         m.config.selection = gradcomp::selection_method::exact_topk;
         m.config.schedule = detail::warmup(o, steps_per_epoch);
         return m;
       }},
      {"dgc_no_warmup", "dgc at the final density from the first step",
       [](const train_options& o, std::size_t) {
         auto m = detail::dgc_base("dgc_no_warmup", o);
         m.config.clip_norm = o.clip_norm;
         m.config.schedule = gradcomp::warmup_schedule::constant(o.final_density);
         return m;
       }},
      {"ef_signsgd",
       "EF-SignSGD: scaled signs with error feedback (1 bit per element), no momentum",
       [](const train_options& o, std::size_t) {
         auto m = detail::compressor_mode<gradcomp::ef_signsgd_compressor, gradcomp::ef_signsgd_config>(
             "ef_signsgd", o, [o](auto& cfg, std::size_t) { cfg.learning_rate = o.lr; });
         m.update_includes_lr = true;
         return m;
       }},
      {"terngrad",
       "TernGrad: stochastic ternary gradients (2 bits per element), 2.5-sigma clipping, the largest of the "
       "workers' scales (shared through the exchange), receiver momentum",
       [](const train_options& o, std::size_t) {
         return detail::compressor_mode<gradcomp::terngrad_compressor, gradcomp::terngrad_config>(
             "terngrad", o,
             [o](auto& cfg, std::size_t rank) {
               cfg.seed = o.seed;
               cfg.rank = rank;
               cfg.momentum = o.momentum;
             },
             true);
       }},
      {"onebit_sgd",
       "1-bit SGD: one bit per element and two values per column (a weight's inputs), error feedback, receiver "
       "momentum, 0.3x the peak learning rate",
       [](const train_options& o, std::size_t) {
         auto m = detail::compressor_mode<gradcomp::onebit_sgd_compressor, gradcomp::onebit_sgd_config>(
             "onebit_sgd", o, [o](auto& cfg, std::size_t) { cfg.momentum = o.momentum; });
         // Each side of a column is sent its mean, so small elements are over-sent and flip sign
         // from step to step through the residual; with momentum 0.9 at the common peak rate
         // (0.1) that oscillation diverges (10% test accuracy after 2 epochs), at 0.03 it trains.
         m.lr_scale = 0.3;
         return m;
       }},
      {"qsgd",
       "QSGD: 15 levels of each bucket's Euclidean norm (buckets of 512; --qsgd-levels), stochastic rounding, the "
       "shorter of fixed-width and Elias-gamma codes (about 1.5 bits per element on the demo), receiver momentum",
       [](const train_options& o, std::size_t) {
         return detail::compressor_mode<gradcomp::qsgd_compressor, gradcomp::qsgd_config>(
             "qsgd", o, [o](auto& cfg, std::size_t rank) {
               cfg.seed = o.seed;
               cfg.rank = rank;
               cfg.momentum = o.momentum;
               cfg.levels = o.qsgd_levels;
             });
       }},
      {"adacomp",
       "AdaComp: per bin of 500 elements, the residuals whose sum with twice the new gradient reaches the bin's "
       "largest, sent as signs of one scale per layer, error feedback, receiver momentum",
       [](const train_options& o, std::size_t) {
         return detail::compressor_mode<gradcomp::adacomp_compressor, gradcomp::adacomp_config>(
             "adacomp", o, [o](auto& cfg, std::size_t) {
               cfg.momentum = o.momentum;
               cfg.policy.compress_vectors = o.compress_vectors;
             });
       }},
      {"saef_topk",
       "Step-Ahead Error Feedback: worker momentum, top-k with error feedback on the workers' updates (the same "
       "warm-up to the final density) and again on their average, gradients at x - e, residuals averaged every 20 "
       "steps",
       [](const train_options& o, std::size_t steps_per_epoch) {
         return detail::saef_mode("saef_topk", o, [o, steps_per_epoch](auto b) {
           return detail::saef_topk(o, steps_per_epoch, b);
         });
       }},
      {"saef_sign",
       "Step-Ahead Error Feedback with scaled signs (1 bit per element) both ways, gradients at x - e, residuals "
       "averaged every 20 steps",
       [](const train_options& o, std::size_t) {
         return detail::saef_mode("saef_sign", o, [](auto b) { return detail::saef_sign(b); });
       }},
      {"powersgd_r1", "PowerSGD at rank 1: each weight matrix as two rank-1 factors averaged in two rounds, warm "
       "start, error feedback, biases averaged whole, after DGC's warm-up length of dense steps; receiver momentum",
       [](const train_options& o, std::size_t steps_per_epoch) {
         return detail::powersgd_mode("powersgd_r1", o, steps_per_epoch, 1);
       }},
      {"powersgd_r2", "PowerSGD at rank 2 (as powersgd_r1)",
       [](const train_options& o, std::size_t steps_per_epoch) {
         return detail::powersgd_mode("powersgd_r2", o, steps_per_epoch, 2);
       }},
      {"powersgd_r4", "PowerSGD at rank 4 (as powersgd_r1)",
       [](const train_options& o, std::size_t steps_per_epoch) {
         return detail::powersgd_mode("powersgd_r4", o, steps_per_epoch, 4);
       }},
      {"isgq",
       "ISGQ: each weight matrix sent as its layer input X and back-propagated error Delta (a row per image of "
       "the batch), dithered to 7 levels (3 bits per factor element, buckets of 512), the receiver rebuilding "
       "X^T Delta; biases in fp32; receiver momentum",
       [](const train_options& o, std::size_t) {
         mode_spec m;
         m.name = "isgq";
         m.make_worker = [o](std::size_t rank) -> std::unique_ptr<worker_compressor> {
           gradcomp::isgq_config cfg;
           cfg.seed = o.seed;
           cfg.rank = rank;
           cfg.levels = 3;  // q in [-3, 3]: 3 bits with the zero code
           return std::make_unique<isgq_adapter>(cfg, o.batch, o.momentum);
         };
         return m;
       }},
  };
  return all;
}

/// The names of `modes()`, in order (those of the command line).
std::vector<std::string> mode_names() {
  std::vector<std::string> names;
  for (const auto& m : modes()) names.push_back(m.name);
  return names;
}

/// The settings of the named mode; throws std::invalid_argument for an unknown name.
mode_spec make_mode(const std::string& name, const train_options& o, std::size_t steps_per_epoch) {
  for (const auto& m : modes())
    if (m.name == name) return m.make(o, steps_per_epoch);
  std::string known;
  for (const auto& m : modes()) {
    if (!known.empty()) known += ", ";
    known += m.name;
  }
  throw std::invalid_argument("unknown mode '" + name + "' (known: " + known + ")");
}

/// Worker `rank`'s compressor for `spec`, on the backend `o.backend`.
std::unique_ptr<worker_compressor> make_worker(const mode_spec& spec, const train_options& o, std::size_t rank) {
  if (spec.make_worker) return spec.make_worker(rank);
  gradcomp::dgc_config config = spec.config;
  config.seed = spec.config.seed * 0x9e3779b97f4a7c15ULL + rank;  // each worker its own sampling stream
  return with_backend(o.backend, [&](auto backend) -> std::unique_ptr<worker_compressor> {
    using B = decltype(backend);
    using C = gradcomp::dgc_compressor<float, B>;
    return std::make_unique<compressor_adapter<C, B>>(C(config, backend), backend);
  });
}


}  // namespace fmnist
