// What every compressor shares: the registered tensors with their message buffers (and error
// buffers where the method keeps an error), per-tensor records and the step's verdict in backend
// memory, waiting for a step and taking its outcome, the statistics, the wire message and its
// views, and the receiver's layout. A compressed tensor is sent dense in a quantised value coding
// (EF-SignSGD's scaled signs, TernGrad's ternary values) or, for a sparse method (DGC, AdaComp),
// as the positions its step selects. A compressor derives from it (naming itself as Derived) and
// adds its configuration. A step is the base's `compress(on, grads)`, three passes through the
// method's kernels: Derived's `measure` reads every tensor into its record, the kernels' `plan`
// decides the step from the records, Derived's `apply` writes the messages (each hook takes the
// bound model in a whole-model step, `(on, grads, t)` for tensor t otherwise); a method whose step
// goes otherwise (DGC, TernGrad) hides `compress(on, grads)` with its own. The base gives the
// `compress(grads)` forms either way, and the receiver's layout from the momentum settings.
//
// Record is the method's per-tensor record, in backend memory: it has `numel` and `compressed`,
// which registration writes, and for a sparse method `kept`, the entries its step wrote into the
// tensor's index and value buffers. StepRecord is the step's record, with the verdict `status`.
// A coding with per-bucket scales (coding_parameters::bucket non-zero: QSGD's norms) gets a scales
// buffer per compressed tensor, which the step writes and the message carries.
//
// Kernels, where given, are the method's kernels on the backend: when they do a whole model's work
// at once (they have a `model<T>`, the tensors as one table: thrust/model_table.hpp), the base
// keeps that table through registrations and binds each step's gradients to it (`bind_model`),
// and the compressor issues its step through the kernels' whole-model operations.
//
// Derived may hide four hooks (the base calls them on Derived; the defaults are below):
// `model_items(t, info)`, the work items of tensor t (t = num_tensors() while it is registered)
// in the kernels' whole-model launches (its elements in the first space unless given);
// `model_buffers(t)`, tensor t's buffers of the method's own there (none unless given);
// `step_bound(t)`, the most entries the step in progress can send for sparse tensor t when its
// plan fixes that (DGC's k of the step), so that a device's payload comes to the host with the
// records in one synchronisation (otherwise the counts are read first, a second one); and
// `finish_stats(stats, verdict, records)`, the method's own statistics of a step that went
// through.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "../cpu/ops.hpp"
#include "../error.hpp"
#include "../layout.hpp"
#include "../span.hpp"
#include "../wire/tensor_message.hpp"
#include "../wire/device_section.hpp"
#include "../wire/encode.hpp"
#include "../wire/format.hpp"

namespace gradcomp {
namespace detail {

// The snapshot access of the quantisers (residual_snapshot.hpp), a friend of the base (a seeded
// quantiser befriends it too: it restores the seed of its configuration), and the trait that
// names it, each quantiser's `snapshot_trait`.
template <wire::snapshot_selection Method, bool Seeded>
struct residual_snapshot_access;
template <class T, wire::snapshot_selection Method, bool Seeded>
struct residual_snapshot_trait;

// The entries a record says its tensor's step kept (records of sparse methods), else 0.
template <class Record>
auto record_kept(const Record& r, int) noexcept -> decltype(static_cast<std::size_t>(r.kept)) {
  return static_cast<std::size_t>(r.kept);
}
template <class Record>
std::size_t record_kept(const Record&, long) noexcept {
  return 0;
}
// Where a sparse method's record keeps that count (the record may be in backend memory: only the
// address is computed), else null.
template <class Record>
auto record_kept_address(const Record* r, int) noexcept -> decltype(&r->kept) {
  return &r->kept;
}
template <class Record>
const std::uint64_t* record_kept_address(const Record*, long) noexcept {
  return nullptr;
}

// The value type and the backend of a compressor `C<T, Backend>` (the type may be incomplete).
template <class C>
struct compressor_params;
template <template <class, class> class C, class T, class Backend>
struct compressor_params<C<T, Backend>> {
  using value_type = T;
  using backend_type = Backend;
};

// The whole-model state of a method's kernels (Kernels::model<T>), for kernels that do a model's
// work in a fixed number of launches; kernels that go tensor by tensor have none.
template <class Kernels, class T, class = void>
struct model_of {
  static constexpr bool whole = false;
  struct type {};
};
template <class Kernels, class T>
struct model_of<Kernels, T, std::void_t<typename Kernels::template model<T>>> {
  static constexpr bool whole = true;
  using type = typename Kernels::template model<T>;
};

template <class Derived, class Config, class Record, class StepRecord, class Kernels = void>
class compressor_base {
  using T = typename compressor_params<Derived>::value_type;
  using Backend = typename compressor_params<Derived>::backend_type;
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "the compressors support float and double");

 protected:
  using ops = detail::ops<Backend>;
  using space = memory_space_t<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;
  static constexpr bool host_memory = is_host_accessible_v<space>;
  using model_type = typename model_of<Kernels, T>::type;
  // Whether the kernels do a whole model's work at once.
  static constexpr bool whole_model = model_of<Kernels, T>::whole;

  struct tensor_state {
    tensor_info info;
    buffer<T> e;       // error feedback (compressed tensors of a method that keeps one)
    buffer<T> values;  // last step's message values
    buffer<std::uint32_t> indices;  // last step's sent positions (compressed tensors of a sparse method)
    buffer<float> scales;  // last step's per-bucket scales (codings with buckets)
    wire::coding_parameters parameters{};  // the layout of a compressed tensor's coding
    std::size_t staged_offset = 0;  // of the values and, when sparse, the indices
    std::size_t staged_scales_offset = 0;
  };

  // No bound fixed by the step's plan (step_bound).
  static constexpr std::size_t no_bound = static_cast<std::size_t>(-1);

  // `cfg`: the method's configuration, kept as `config()`; its threads must be >= 1, and a
  // quantiser's settings (`Config` derived from quantiser_settings) give the receiver's momentum,
  // in [0, 1), vanilla or Nesterov. `coding`: the value coding of compressed tensors;
  // `error_feedback`: whether each compressed tensor keeps an error buffer; `sparse`: whether
  // compressed tensors are sent as the positions the step selects. Throws errc::invalid_argument.
  compressor_base(Backend backend, Config cfg, wire::value_coding coding, bool error_feedback, bool sparse = false)
      : cfg_(std::move(cfg)), backend_(backend), coding_(coding), error_feedback_(error_feedback), sparse_(sparse) {
    if (cfg_.threads == 0) throw error(errc::invalid_argument, "threads must be >= 1");
    if constexpr (std::is_base_of<quantiser_settings, Config>::value) {
      if (!(cfg_.momentum >= 0.0 && cfg_.momentum < 1.0))
        throw error(errc::invalid_argument, "momentum must be in [0, 1)");
      if (cfg_.momentum_form != momentum_kind::vanilla && cfg_.momentum_form != momentum_kind::nesterov)
        throw error(errc::invalid_argument, "momentum_form must be vanilla or nesterov");
      momentum_ = cfg_.momentum;
      momentum_form_ = cfg_.momentum_form;
    }
    exec_ = ops::make_executor(cfg_.threads);
    step_record_ = ops::template allocate<StepRecord>(backend_, 1);
  }

 public:
  /// A gradient in the backend's memory.
  using tensor_view = backend_span<const T, Backend>;

  /// The configuration the compressor was built with (and, where the method has setters, as they
  /// left it).
  const Config& config() const noexcept { return cfg_; }

  /// Number of registered tensors.
  std::size_t num_tensors() const noexcept { return tensors_.size(); }
  /// The registration record of tensor `id` (unchecked).
  const tensor_info& info(std::size_t id) const noexcept { return tensors_[id].info; }
  /// Issues one step over all tensors on the compressor's own backend value: the compressor's
  /// `compress(backend(), grads)`.
  [[nodiscard]] result<void> compress(span<const tensor_view> grads) {
    return static_cast<Derived&>(*this).compress(backend_, grads);
  }
  /// `compress` taking a vector of gradient views.
  [[nodiscard]] result<void> compress(const std::vector<tensor_view>& grads) {
    return static_cast<Derived&>(*this).compress(backend_, span<const tensor_view>(grads.data(), grads.size()));
  }
  /**
   * @brief Issues one step over all tensors on the execution context `on` (the compressor's
   * backend value or another stream of it); its outcome comes from `stats()`: a refused step
   * (`errc::non_finite_input`, `errc::state_overflow`: see the compressor) modifies nothing.
   * @return `errc::wrong_tensor_count`, `errc::size_mismatch`, `errc::resource_unavailable` (a
   * worker thread refused; nothing issued).
   */
  [[nodiscard]] result<void> compress(const Backend& on, span<const tensor_view> grads) {
    if (auto started = begin_step(on, grads); !started) return started;
    Derived& self = static_cast<Derived&>(*this);
    if constexpr (whole_model) {
      const model_type& model = bind_model(on, grads);
      self.measure(on, model);
      Kernels::plan(on, records_.view(), step_record_.view());
      self.apply(on, model);
    } else {
      auto measure = [&](std::size_t t, std::size_t) { self.measure(on, grads, t); };
      auto apply = [&](std::size_t t, std::size_t) { self.apply(on, grads, t); };
      ops::for_each(on, exec_, largest_first(), measure);
      Kernels::plan(on, records_.view(), step_record_.view());
      ops::for_each(on, exec_, largest_first(), apply);
    }
    issued(on);
    return {};
  }

  /// What the receiving side needs: the compressed tensors as the method sends them (a sparse
  /// method's as sparse sections of up to all their elements), the others dense, and the
  /// configured momentum (none for a method configured without one).
  receiver_layout receiver() const {
    receiver_layout r;
    for (const auto& st : tensors_)
      r.tensors.push_back({st.info, !sparse(st), momentum_ != 0.0, sparse(st) ? st.info.numel : 0});
    r.momentum = momentum_;
    r.kind = momentum_form_;
    return r;
  }
  /// The error buffer (residual) of tensor `id` (unchecked id), in the backend's memory: empty for
  /// a tensor sent whole and for a method that keeps none.
  backend_span<const T, Backend> error_feedback(std::size_t id) const noexcept { return tensors_[id].e.view(); }
  /// The backend value calls without one of their own run on.
  const Backend& backend() const noexcept { return backend_; }
  /// Steps compressed so far (waits for a step in progress).
  std::size_t step() {
    wait();
    return step_;
  }

  /**
   * @brief The outcome and statistics of the last `compress` (waits for it): for a dense method
   * every compressed element counts as kept (density 1); for a sparse one `kept_elements` is what
   * it sent and `density` the kept share of the compressed elements.
   * @return the statistics, or the step's refusal (nothing modified then: see the compressor),
   *         `errc::invalid_argument` before the first `compress`.
   */
  [[nodiscard]] result<step_stats> stats() {
    wait();
    if (last_status_ != errc::ok) return fail(last_status_);
    return last_stats_;
  }

  /// An upper bound of `encode_message`'s output with options `opt` (exact for the codings of one
  /// length; for QSGD's, the fixed-width form's length).
  std::size_t max_message_bytes(const wire::encode_options& opt = {}) const noexcept {
    std::uint64_t total = wire::message_overhead_bytes(opt);
    wire::encode_options packed = opt;
    if (coding_ != wire::value_coding::unspecified) {
      packed.dense_values = coding_;
      packed.values = coding_;
    }
    for (const auto& st : tensors_)
      total += *wire::max_section_bytes(st.info.numel, st.values.size(), !sparse(st),
                                        st.info.compressed ? packed : opt, st.parameters);
    return static_cast<std::size_t>(total);
  }

  /**
   * @brief Encodes the last step (compressed tensors in the compressor's value coding, the others
   * in `opt.dense_values`); waits for the step. @return bytes written, the step's refusal, or the
   * errors of `wire::encode`.
   */
  [[nodiscard]] result<std::size_t> encode_message(const wire::encode_options& opt, span<std::byte> out) {
    wait(true);
    if (last_status_ != errc::ok) return fail(last_status_);
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor_state& st = tensors_[t];
      tensor_message<T> m;
      m.tensor = t;
      m.numel = st.info.numel;
      m.dense = !sparse(st);
      m.coding = coding_of(t);
      m.parameters = st.parameters;
      const std::size_t n = entries(t);
      if constexpr (host_memory) {
        m.values = readonly(st.values.view()).first(n);
        if (!m.dense) m.indices = readonly(st.indices.view()).first(n);
        m.parameters.scales = st.scales.view().data();
      } else {
        m.values = span<const T>(staged_values_.data() + st.staged_offset, n);
        if (!m.dense) m.indices = span<const std::uint32_t>(staged_indices_.data() + st.staged_offset, n);
        m.parameters.scales = staged_scales_.data() + st.staged_scales_offset;
      }
      messages_[t] = m;
    }
    return wire::encode(span<const tensor_message<T>>(messages_.data(), messages_.size()), opt, out);
  }

  /// Tensor `id`'s part of the last step's message, in the backend's memory (waits for the step);
  /// a coding with per-bucket scales has them in `parameters.scales`, in the backend's memory too.
  tensor_message<T, space> message(std::size_t id) {
    wait();
    tensor_message<T, space> m;
    m.tensor = id;
    m.numel = tensors_[id].info.numel;
    m.dense = !sparse(tensors_[id]);
    m.values = readonly(tensors_[id].values.view()).first(entries(id));
    if (!m.dense) m.indices = readonly(tensors_[id].indices.view()).first(entries(id));
    m.coding = coding_of(id);
    m.parameters = tensors_[id].parameters;
    m.parameters.scales = tensors_[id].scales.view().data();
    return m;
  }

  /**
   * @brief The last step's message as views of the backend's memory, for an encoder that runs
   * there (`wire::device_encoder`, `<gradcomp/thrust/wire_encode.hpp>`, where it writes the
   * compressor's coding): every tensor dense (a sparse method's compressed tensors as their
   * positions, with the count in the tensor's record), and the step's verdict (a refused step's
   * refusal).
   * Waits for nothing: the views always hold the data of the step issued last, in the stream's
   * order, so the encoder is set up once and issued after each `compress`.
   */
  wire::device_message<T, space> device_message() const {
    wire::device_message<T, space> m;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      wire::device_section<T, space> s;
      s.tensor = static_cast<std::uint32_t>(t);
      s.numel = static_cast<std::uint32_t>(tensors_[t].info.numel);
      s.dense = !sparse(tensors_[t]);
      s.values = readonly(tensors_[t].values.view());
      if (!s.dense) {
        s.indices = readonly(tensors_[t].indices.view());
        s.kept = record_kept_address(records_.view().data() + t, 0);
      }
      s.coding = coding_of(t);
      m.sections.push_back(s);
    }
    m.verdict = &step_record_.view().data()->status;
    return m;
  }

 protected:
  // Registers a tensor: its record (numel, compressed) in backend memory, its buffers, the order
  // of the tensors by size; `fill(record, info)` sets the method's own registration fields of the
  // record (and allocates what the method keeps besides), `parameters(info)` gives a compressed
  // tensor's coding layout, and `capacity(info)` the entries a sparse tensor's message can hold
  // (its element count unless given). Strong guarantee.
  template <class Fill, class Parameters, class Capacity>
  std::size_t add(std::string name, std::vector<std::size_t> shape, tensor_mode mode, const compression_policy& policy,
                  Fill&& fill, Parameters&& parameters, Capacity&& capacity) {
    tensor_state st;
    st.info = new_tensor_info(tensors_, std::move(name), std::move(shape), mode, policy);
    if (st.info.compressed) st.parameters = parameters(st.info);
    const std::size_t n = st.info.numel;
    const std::size_t entries = sparse(st) ? capacity(st.info) : n;
    wait();
    if (st.info.compressed && error_feedback_) st.e = ops::template allocate<T>(backend_, n);
    st.values = ops::template allocate<T>(backend_, entries);
    if (sparse(st)) st.indices = ops::template allocate<std::uint32_t>(backend_, entries);
    const std::size_t scales = st.info.compressed && st.parameters.bucket != 0
                                   ? static_cast<std::size_t>((n + st.parameters.bucket - 1) / st.parameters.bucket)
                                   : 0;
    st.scales = ops::template allocate<float>(backend_, scales);
    std::vector<Record> host(tensors_.size() + 1);
    if (!tensors_.empty())
      ops::copy_to_host(backend_, readonly(records_.view()), span<Record>(host.data(), tensors_.size()));
    ops::synchronize(backend_);
    host.back().numel = n;
    host.back().compressed = st.info.compressed ? 1 : 0;
    fill(host.back(), st.info);
    auto records = ops::template allocate<Record>(backend_, host.size());
    ops::copy_to_backend(backend_, span<const Record>(host.data(), host.size()), records.view());
    std::vector<Record> staged(host.size());
    std::vector<T> staged_values(host_memory ? 0 : staged_values_.size() + entries);
    std::vector<std::uint32_t> staged_indices(host_memory || !sparse_ ? 0 : staged_values_.size() + entries);
    std::vector<float> staged_scales(host_memory ? 0 : staged_scales_.size() + scales);
    model_type model;
    if constexpr (whole_model) {
      std::vector<std::size_t> numel(tensors_.size() + 1);
      std::vector<detail::model_items> items(tensors_.size() + 1);
      for (std::size_t t = 0; t < tensors_.size(); ++t) {
        numel[t] = tensors_[t].info.numel;
        items[t] = derived().model_items(t, tensors_[t].info);
      }
      numel.back() = n;
      items.back() = derived().model_items(tensors_.size(), st.info);
      model = model_type(span<const std::size_t>(numel.data(), numel.size()),
                         span<const detail::model_items>(items.data(), items.size()));
    }
    std::vector<std::size_t> order(tensors_.size() + 1);
    for (std::size_t t = 0; t < order.size(); ++t) order[t] = t;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return (a < tensors_.size() ? tensors_[a].info.numel : n) > (b < tensors_.size() ? tensors_[b].info.numel : n);
    });
    tensors_.reserve(tensors_.size() + 1);
    messages_.reserve(tensors_.size() + 1);
    // Nothing below throws.
    st.staged_offset = staged_values_.size();
    st.staged_scales_offset = staged_scales_.size();
    records_ = std::move(records);
    staged_records_ = std::move(staged);
    if (!host_memory) {
      staged_values_ = std::move(staged_values);
      staged_indices_ = std::move(staged_indices);
      staged_scales_ = std::move(staged_scales);
    }
    order_ = std::move(order);
    tensors_.push_back(std::move(st));
    messages_.emplace_back();
    if constexpr (whole_model) model_ = std::move(model);
    return tensors_.size() - 1;
  }

  template <class Fill, class Parameters>
  std::size_t add(std::string name, std::vector<std::size_t> shape, tensor_mode mode, const compression_policy& policy,
                  Fill&& fill, Parameters&& parameters) {
    return add(std::move(name), std::move(shape), mode, policy, std::forward<Fill>(fill),
               std::forward<Parameters>(parameters), [](const tensor_info& info) { return info.numel; });
  }

  std::size_t add(std::string name, std::vector<std::size_t> shape, tensor_mode mode,
                  const compression_policy& policy) {
    return add(
        std::move(name), std::move(shape), mode, policy, [](Record&, const tensor_info&) {},
        [](const tensor_info&) { return wire::coding_parameters{}; });
  }

  // The hooks' defaults (see the top of this file).
  own_buffers model_buffers(std::size_t) noexcept { return {}; }
  detail::model_items model_items(std::size_t, const tensor_info& info) const noexcept {
    detail::model_items items;
    items.count[0] = info.numel;
    return items;
  }
  std::size_t step_bound(std::size_t) const noexcept { return no_bound; }
  void finish_stats(step_stats&, const StepRecord&, const Record*) const noexcept {}

  // The start of every step: the gradients checked against the registered tensors, the step in
  // progress waited for, the executor's threads started (errc::resource_unavailable when the
  // system refuses one); nothing is modified when it fails.
  result<void> begin_step(const Backend& on, span<const tensor_view> grads) {
    if (const errc e = detail::check_gradients(tensors_, grads); e != errc::ok) return fail(e);
    wait();
    return ops::start_executor(on, exec_, tensors_.size());
  }

  // The model's table with the step's gradients and every tensor's buffers bound (kernels that
  // do a whole model's work at once; after begin_step). The buffers are bound at every step, so a
  // copy of the compressor works on its own.
  const model_type& bind_model(const Backend& on, span<const tensor_view> grads) {
    model_.bind(on, [&](std::size_t t, auto& entry) {
      tensor_state& st = tensors_[t];
      entry.g = grads[t].data();
      entry.e = st.e.view().data();
      entry.values = st.values.view().data();
      entry.indices = st.indices.view().data();
      entry.scales = st.scales.view().data();
      const own_buffers own = static_cast<Derived&>(*this).model_buffers(t);
      entry.aux[0] = own.aux[0];
      entry.aux[1] = own.aux[1];
      entry.param = own.param;
    });
    return model_;
  }

  // After issuing a step on `on`.
  void issued(const Backend& on) noexcept {
    pending_ = true;
    pending_on_ = on;
    payload_staged_ = false;
  }

  // The tensor ids, largest first (the order the CPU backend's threads take them in).
  span<const std::size_t> largest_first() const noexcept { return span<const std::size_t>(order_.data(), order_.size()); }

  wire::value_coding coding_of(std::size_t t) const noexcept {
    return tensors_[t].info.compressed ? coding_ : wire::value_coding::unspecified;
  }

  // A sparse method's compressed tensor.
  bool sparse(const tensor_state& st) const noexcept { return sparse_ && st.info.compressed; }

  const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }

  // The records as the host reads them (after a wait): in place in host-accessible memory, else
  // the copy the last wait staged.
  const Record* host_records() const noexcept {
    if constexpr (host_memory) return records_.view().data();
    else return staged_records_.data();
  }

  // The entries of tensor t's message in the last step (its element count when dense); the host
  // reads the records after a wait.
  std::size_t entries(std::size_t t) const noexcept {
    if (!sparse(tensors_[t])) return tensors_[t].info.numel;
    if constexpr (host_memory) return record_kept(records_.view()[t], 0);
    else return record_kept(staged_records_[t], 0);
  }

  // Waits for the step in progress and takes its outcome; with `payload`, a backend whose memory
  // the host cannot read also copies the message values in the same synchronisation.
  void wait(bool payload = false) {
    StepRecord verdict;
    if constexpr (host_memory) {
      (void)payload;
      if (!pending_) return;
      ops::synchronize(pending_on_);
      verdict = step_record_.view()[0];
    } else {
      payload = payload && !payload_staged_;
      if (!pending_ && !payload) return;
      const Backend on = pending_ ? pending_on_ : backend_;
      if (pending_) {
        ops::copy_to_host(on, readonly(records_.view()), span<Record>(staged_records_.data(), staged_records_.size()));
        ops::copy_to_host(on, readonly(step_record_.view()), span<StepRecord>(&verdict, 1));
      }
      // A sparse method's counts are in the records: unless the step's plan bounds them, they are
      // on the host before its payload is copied (a second synchronisation, none for a refused
      // step, which has no payload).
      const bool bounded = sparse_ && !tensors_.empty() && derived().step_bound(0) != no_bound;
      bool synchronized = false;
      if (payload && sparse_ && pending_ && !bounded) {
        ops::synchronize(on);
        synchronized = true;
        payload = verdict.status == static_cast<std::int32_t>(errc::ok);
      }
      if (payload)
        for (std::size_t t = 0; t < tensors_.size(); ++t) {
          const tensor_state& st = tensors_[t];
          const std::size_t n = bounded && pending_ && sparse(st) ? derived().step_bound(t) : entries(t);
          ops::copy_to_host(on, readonly(st.values.view()).first(n), span<T>(staged_values_.data() + st.staged_offset, n));
          if (sparse(st))
            ops::copy_to_host(on, readonly(st.indices.view()).first(n),
                              span<std::uint32_t>(staged_indices_.data() + st.staged_offset, n));
          ops::copy_to_host(on, readonly(st.scales.view()),
                            span<float>(staged_scales_.data() + st.staged_scales_offset, st.scales.view().size()));
        }
      if (payload || !synchronized) ops::synchronize(on);
      if (payload) payload_staged_ = true;
      if (!pending_) return;
    }
    pending_ = false;
    last_status_ = static_cast<errc>(verdict.status);
    if (last_status_ != errc::ok) return;
    step_stats s;
    s.step = step_;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor_state& st = tensors_[t];
      s.total_elements += st.info.numel;
      if (st.info.compressed) {
        s.target_elements += st.info.numel;
        s.kept_elements += entries(t);
      } else {
        s.dense_elements += st.info.numel;
      }
    }
    s.density = !sparse_ ? 1.0
                : s.target_elements == 0 ? 0.0
                                         : static_cast<double>(s.kept_elements) / static_cast<double>(s.target_elements);
    derived().finish_stats(s, verdict, host_records());
    last_stats_ = s;
    ++step_;
  }

  template <wire::snapshot_selection Method, bool Seeded>
  friend struct residual_snapshot_access;

  Config cfg_;
  Backend backend_;
  wire::value_coding coding_;
  bool error_feedback_;
  bool sparse_;
  double momentum_ = 0.0;  // the receiver's
  momentum_kind momentum_form_ = momentum_kind::vanilla;
  typename ops::executor exec_;
  std::vector<tensor_state> tensors_;
  buffer<Record> records_;
  buffer<StepRecord> step_record_;
  std::vector<tensor_message<T>> messages_;
  std::vector<std::size_t> order_;  // tensor ids, largest first
  model_type model_;                 // the tensors as one table (kernels that have one)
  std::size_t step_ = 0;
  bool pending_ = false;
  Backend pending_on_{};
  errc last_status_ = errc::invalid_argument;  // no step yet
  step_stats last_stats_{};
  std::vector<Record> staged_records_;
  std::vector<T> staged_values_;
  std::vector<std::uint32_t> staged_indices_;  // a sparse method's, at the values' offsets
  std::vector<float> staged_scales_;
  bool payload_staged_ = false;
};

}  // namespace detail
}  // namespace gradcomp
