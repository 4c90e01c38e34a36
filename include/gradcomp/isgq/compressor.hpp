/// @file isgq/compressor.hpp
/// @brief Indirect Stochastic Gradient Quantization (docs/algorithms.md, "Indirect Stochastic
/// Gradient Quantization"):
/// `isgq_compressor`, which sends a fully connected layer's weight gradient as its two quantised
/// factors.
///
/// A fully connected layer `Y = X W` (X: B x n_in, the layer's input over a batch of B) has the
/// weight gradient `G = X^T Delta`, with Delta (B x n_out) the error back-propagated to Y. ISGQ
/// quantises X and Delta, B (n_in + n_out) numbers, instead of G's n_in n_out; the receiver
/// rebuilds `X^^T Delta^` and sums it over workers like any other gradient. It pays off when the
/// per-worker batch B is small against n_in n_out / (n_in + n_out).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend.hpp"
#include "cpu_ops.hpp"
#include "../cpu/ops.hpp"
#include "factors.hpp"
#include "../detail/rng.hpp"
#include "../error.hpp"
#include "../span.hpp"
#include "../wire/tensor_message.hpp"
#include "../wire/format.hpp"

namespace gradcomp {

/// How `isgq_compressor` quantises the two factors.
enum class isgq_method : std::uint8_t {
  /// Unbiased: per bucket of a factor, `scale = max |w| / s`; element w (not 0) is sent as the
  /// integer `q = floor(w / scale + u + 1/2)` in [-s, s], with u uniform in (-1/2, 1/2) drawn from
  /// a key the receiver also knows, and rebuilt as `scale (q - u)` (subtractive dither: the error
  /// is uniform within half a step and independent of w). Exact zeros are sent as zeros. With
  /// independent dithers for X and Delta, `E[X^^T Delta^] = X^T Delta`.
  dithered = 0,
  /// Deterministic: each factor's elements are assigned to L evenly spaced levels of its largest
  /// magnitude (exact zeros to a zero of their own), then the levels' values are refitted by
  /// least squares on `||X^^T Delta^ - X^T Delta||_F`, one factor at a time with the other fixed;
  /// the error never increases from one refit to the next.
  min_mse = 1,
};

/// The order of the rebuilt gradient's values in the message (the receiver's weight layout).
enum class isgq_layout : std::uint8_t {
  in_out = 0,  ///< n_in x n_out, row-major: `Y = X W` with W stored in x out.
  out_in = 1,  ///< n_out x n_in, row-major: `Y = X W^T` with W stored out x in (PyTorch's `Linear`).
};

/// Everything that parameterises ISGQ.
struct isgq_config {
  /// The quantiser of both factors.
  isgq_method method = isgq_method::dithered;
  /// `dithered`: s, the levels on each side of 0, in [1, 127]; each element takes
  /// `bit_width(2s + 1)` bits (2 for s = 1). `min_mse`: L, the levels of each factor, 2, 4 or 8;
  /// each element takes `bit_width(L)` bits (the zero code included).
  std::uint32_t levels = 1;
  /// `dithered`: consecutive elements of a factor (row-major) that share a scale, >= 1.
  std::uint32_t bucket = 512;
  /// `min_mse`: refits of each factor (X, then Delta, this many times), >= 0.
  std::uint32_t iterations = 2;
  /// Seed of the dithers; with `rank`, the key of every draw. The key travels in the message, so
  /// a receiver needs no configuration to rebuild the factors.
  std::uint64_t seed = 0x15c0d17e4a9b3f21ull;
  /// This worker's index among the workers: each worker draws its dithers independently.
  std::uint64_t rank = 0;
};

/// A layer registered with `isgq_compressor::add_layer`.
struct isgq_layer_info {
  std::string name;     ///< Name, unique within the compressor.
  std::size_t n_in = 0;   ///< Inputs of the layer (columns of X).
  std::size_t n_out = 0;  ///< Outputs of the layer (columns of Delta).
  isgq_layout layout = isgq_layout::out_in;  ///< The order of the gradient's values in the message.
  std::size_t tensor = 0;  ///< Tensor id of the layer's weight in the messages (`tensor_message::tensor`).
  std::uint64_t steps = 0;  ///< Messages produced for the layer so far (each keys its dithers).
};

/**
 * @brief The sending side of ISGQ (Abdi, Fekri, "Indirect Stochastic Gradient Quantization and
 * its Application in Distributed Deep Learning", AAAI 2020) for the fully connected layers of a
 * model, on one worker.
 *
 * `compress(layer, x, delta, batch)` quantises the layer's input X and back-propagated error Delta
 * and returns a dense `tensor_message` of the layer's weight gradient in the value coding
 * `wire::value_coding::isgq`, whose payload holds the two factors (`tensor_message::payload`).
 * `wire::encode` writes it like any other section; every decoder of the library
 * (`wire::decode_accumulate`, `wire::decode`, the aggregators' `add(bytes)`) rebuilds
 * `X^^T Delta^` into the receiver's accumulator, in binary64 summed over the batch in order, so
 * every receiver gets bitwise the same gradient. Other tensors of the model (biases, layers that
 * are not fully connected) go in the same message from another compressor or dense.
 *
 * Gradients of the mean loss over the batch carry their 1 / B in Delta (or in X): the rebuilt
 * product is then the gradient itself. ISGQ keeps no error: a layer's only state is its step
 * counter, which keys the dithers together with the seed, the rank and the layer's tensor id.
 *
 * X and Delta are read in the backend's memory. The dithered quantiser runs there (one thread per
 * bucket on the Thrust backend, bitwise the CPU's scales and codes), and the host copies the
 * scales and codes into the message (one synchronisation per message); the minimum-MSE fit runs
 * on the host, on copies of the factors where the backend's memory is not the host's. The message
 * is in host memory.
 *
 * @tparam T       float or double: the type of X and Delta.
 * @tparam Backend where X and Delta live and the dithered quantiser runs (docs/backends.md).
 */
template <class T = float, class Backend = cpu_backend>
class isgq_compressor {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "isgq_compressor supports float and double");
  using ops = detail::ops<Backend>;
  using kernels = detail::isgq_ops<Backend>;
  template <class U>
  using buffer = typename ops::template buffer<U>;
  static constexpr bool host_memory = is_host_accessible_v<memory_space_t<Backend>>;

 public:
  /// A factor (X or Delta) in the backend's memory.
  using factor_view = backend_span<const T, Backend>;

  /// `add_layer`'s tensor id when none is given: the layer's registration index.
  static constexpr std::size_t registration_order = std::numeric_limits<std::size_t>::max();

  /// Validates `cfg`; throws `gradcomp::error` (`errc::invalid_argument`).
  explicit isgq_compressor(isgq_config cfg, Backend backend = Backend{}) : cfg_(cfg), backend_(backend) {
    if (cfg_.method == isgq_method::dithered) {
      if (cfg_.levels == 0 || cfg_.levels > detail::isgq_max_dither_levels)
        throw error(errc::invalid_argument, "levels must be in [1, 127] for the dithered method");
      if (cfg_.bucket == 0) throw error(errc::invalid_argument, "bucket must be >= 1");
    } else if (cfg_.method == isgq_method::min_mse) {
      if (cfg_.levels != 2 && cfg_.levels != 4 && cfg_.levels != 8)
        throw error(errc::invalid_argument, "levels must be 2, 4 or 8 for the minimum-MSE method");
    } else {
      throw error(errc::invalid_argument, "method must be dithered or min_mse");
    }
  }

  /**
   * @brief Registers a fully connected layer of `n_in` inputs and `n_out` outputs; returns its
   * index. `tensor` is the weight's id in the messages (by default the layer's index). Throws
   * `gradcomp::error`: `errc::invalid_argument` (a zero size), `errc::size_overflow`
   * (n_in n_out of 2^32 or more), `errc::duplicate_tensor` (a name or tensor id registered before).
   */
  std::size_t add_layer(std::string name, std::size_t n_in, std::size_t n_out,
                        isgq_layout layout = isgq_layout::out_in, std::size_t tensor = registration_order) {
    if (n_in == 0 || n_out == 0) throw error(errc::invalid_argument, "a layer has at least one input and output");
    if (n_in > std::numeric_limits<std::uint32_t>::max() / n_out)
      throw error(errc::size_overflow, "n_in * n_out must be below 2^32");
    if (layout != isgq_layout::in_out && layout != isgq_layout::out_in)
      throw error(errc::invalid_argument, "layout must be in_out or out_in");
    if (tensor == registration_order) tensor = layers_.size();
    if (tensor > std::numeric_limits<std::uint32_t>::max()) throw error(errc::size_overflow, "tensor id above 2^32 - 1");
    for (const auto& l : layers_)
      if (l.info.name == name || l.info.tensor == tensor)
        throw error(errc::duplicate_tensor, "a layer name or tensor id registered twice");
    layer_state l;
    l.info = isgq_layer_info{std::move(name), n_in, n_out, layout, tensor, 0};
    layers_.push_back(std::move(l));
    return layers_.size() - 1;
  }

  /// Layers registered.
  std::size_t layers() const noexcept { return layers_.size(); }
  /// What `add_layer` registered, and the layer's step count (throws std::out_of_range for an `id`
  /// at or past `layers()`).
  const isgq_layer_info& layer(std::size_t id) const { return layers_.at(id).info; }
  /// The configuration.
  const isgq_config& config() const noexcept { return cfg_; }

  /**
   * @brief Quantises layer `id`'s factors over a batch of `batch` rows: `x` (batch x n_in) and
   * `delta` (batch x n_out), row-major (one row per example), and returns the layer's message.
   *
   * The message views memory of this compressor, valid until the next `compress` of this layer.
   * The layer's step counter advances only when a message is returned.
   *
   * @return the message, or `errc::unknown_tensor` (no such layer), `errc::invalid_argument`
   *         (batch 0), `errc::size_mismatch` (a factor of another size than batch x n),
   *         `errc::size_overflow` (a factor of 2^32 elements or more), `errc::non_finite_input`
   *         (a NaN or an infinity in x or delta), `errc::state_overflow` (a scale or level beyond
   *         binary32). Nothing is modified on error.
   */
  [[nodiscard]] result<tensor_message<T>> compress(std::size_t id, factor_view x, factor_view delta,
                                                   std::size_t batch) {
    if (id >= layers_.size()) return fail(errc::unknown_tensor);
    layer_state& l = layers_[id];
    const std::size_t n_in = l.info.n_in, n_out = l.info.n_out;
    if (batch == 0) return fail(errc::invalid_argument);
    if (batch > std::numeric_limits<std::uint32_t>::max() / std::max(n_in, n_out)) return fail(errc::size_overflow);
    if (x.size() != batch * n_in || delta.size() != batch * n_out) return fail(errc::size_mismatch);
    if (std::isnan(ops::largest_magnitude(backend_, x)) || std::isnan(ops::largest_magnitude(backend_, delta)))
      return fail(errc::non_finite_input);

    detail::isgq_block b;
    b.batch = static_cast<std::uint32_t>(batch);
    b.n_in = static_cast<std::uint32_t>(n_in);
    b.n_out = static_cast<std::uint32_t>(n_out);
    b.layout = static_cast<std::uint8_t>(l.info.layout);
    b.levels = static_cast<std::uint16_t>(cfg_.levels);
    // The factors' parameters and codes on the host (the layer's scratch, kept between calls).
    std::vector<float>&px = l.x.host_parameters, &pd = l.delta.host_parameters;
    std::vector<std::uint8_t>&cx = l.x.host_codes, &cd = l.delta.host_codes;
    std::vector<double> errors;
    if (cfg_.method == isgq_method::dithered) {
      b.variant = detail::isgq_variant::dithered;
      b.bucket = cfg_.bucket;
      b.stream = static_cast<std::uint32_t>(l.info.tensor);
      b.key = detail::derive_seed(cfg_.seed, cfg_.rank, 0x69736771ull);
      b.step = l.info.steps;
      dither(l.x, x, b, 0, px, cx);
      dither(l.delta, delta, b, 1, pd, cd);
      ops::synchronize(backend_);
      for (const float v : px)
        if (!detail::isgq_finite(v)) return fail(errc::state_overflow);
      for (const float v : pd)
        if (!detail::isgq_finite(v)) return fail(errc::state_overflow);
    } else {
      b.variant = detail::isgq_variant::levels;
      errc e = errc::ok;
      if constexpr (host_memory) {
        e = fit_levels(x, delta, batch, n_in, n_out, px, pd, cx, cd, errors);
      } else {
        std::vector<T> hx(x.size()), hd(delta.size());
        ops::copy_to_host(backend_, x, span<T>(hx.data(), hx.size()));
        ops::copy_to_host(backend_, delta, span<T>(hd.data(), hd.size()));
        ops::synchronize(backend_);
        e = fit_levels(span<const T>(hx.data(), hx.size()), span<const T>(hd.data(), hd.size()), batch, n_in, n_out,
                       px, pd, cx, cd, errors);
      }
      if (e != errc::ok) return fail(e);
    }
    l.payload.resize(static_cast<std::size_t>(b.payload_bytes()));
    detail::isgq_write_payload(b, px.data(), pd.data(), cx.data(), cd.data(), l.payload.data());
    l.errors = std::move(errors);
    ++l.info.steps;
    tensor_message<T> m;
    m.tensor = l.info.tensor;
    m.numel = n_in * n_out;
    m.dense = true;
    m.coding = wire::value_coding::isgq;
    m.payload = span<const std::byte>(l.payload.data(), l.payload.size());
    return m;
  }

  /**
   * @brief `min_mse`: the squared error `||X^^T Delta^ - X^T Delta||_F^2` of layer `id`'s last
   * message after the initial level assignment and after each refit (X's, then Delta's, for each
   * iteration), with the levels' values in binary64; never increasing. The message carries the
   * values rounded to binary32. Empty for the dithered method and before the first message.
   * Throws std::out_of_range for an `id` at or past `layers()`.
   */
  span<const double> errors(std::size_t id) const {
    const auto& e = layers_.at(id).errors;
    return span<const double>(e.data(), e.size());
  }

 private:
  // A factor's scales and codes in the backend's memory (the dithered quantiser's output), and
  // its parameters and codes on the host, where the message is packed.
  struct factor_buffers {
    buffer<float> scales;
    buffer<std::uint8_t> codes;
    std::vector<float> host_parameters;
    std::vector<std::uint8_t> host_codes;
  };
  struct layer_state {
    isgq_layer_info info;
    std::vector<std::byte> payload;
    std::vector<double> errors;
    factor_buffers x, delta;
  };

  // Factor f (0: X, 1: Delta) dithered on the backend into `room` (grown as needed), its scales
  // and codes copied to the host (complete after the next synchronisation).
  void dither(factor_buffers& room, factor_view w, const detail::isgq_block& b, std::uint32_t f,
              std::vector<float>& scales, std::vector<std::uint8_t>& codes) {
    const std::size_t count = (w.size() + cfg_.bucket - 1) / cfg_.bucket;
    if (room.scales.view().size() != count) room.scales = ops::template allocate<float>(backend_, count);
    if (room.codes.view().size() != w.size()) room.codes = ops::template allocate<std::uint8_t>(backend_, w.size());
    kernels::dither(backend_, w, cfg_.bucket, cfg_.levels, b.key, b.step, b.stream, f, room.scales.view(),
                    room.codes.view());
    scales.resize(count);
    codes.resize(w.size());
    ops::copy_to_host(backend_, readonly(room.scales.view()), span<float>(scales.data(), scales.size()));
    ops::copy_to_host(backend_, readonly(room.codes.view()), span<std::uint8_t>(codes.data(), codes.size()));
  }

  // The minimum-MSE levels of both factors and their codes (L for an exact zero); the errors of
  // the assignment and of each refit.
  errc fit_levels(span<const T> x, span<const T> delta, std::size_t batch, std::size_t n_in, std::size_t n_out,
                  std::vector<float>& px, std::vector<float>& pd, std::vector<std::uint8_t>& cx,
                  std::vector<std::uint8_t>& cd, std::vector<double>& errors) const {
    px.clear();
    pd.clear();
    const std::vector<double> xd(x.begin(), x.end()), dd(delta.begin(), delta.end());
    detail::isgq_level_factor fx = detail::isgq_assign_levels(x.data(), x.size(), cfg_.levels);
    detail::isgq_level_factor fd = detail::isgq_assign_levels(delta.data(), delta.size(), cfg_.levels);
    auto error = [&] {
      return detail::isgq_product_error(detail::isgq_level_values(fx), detail::isgq_level_values(fd), xd, dd, batch,
                                        n_in, n_out);
    };
    errors.push_back(error());
    for (std::uint32_t it = 0; it < cfg_.iterations; ++it) {
      detail::isgq_refit(fx, x.data(), batch, n_in, detail::isgq_level_values(fd), dd, n_out);
      errors.push_back(error());
      detail::isgq_refit(fd, delta.data(), batch, n_out, detail::isgq_level_values(fx), xd, n_in);
      errors.push_back(error());
    }
    for (int f = 0; f < 2; ++f) {
      const detail::isgq_level_factor& lf = f == 0 ? fx : fd;
      std::vector<float>& p = f == 0 ? px : pd;
      for (const double v : lf.value) {
        const float rounded = static_cast<float>(v);
        if (!std::isfinite(rounded)) return errc::state_overflow;
        p.push_back(rounded);
      }
    }
    cx = std::move(fx.level);
    cd = std::move(fd.level);
    return errc::ok;
  }

  isgq_config cfg_;
  Backend backend_;
  std::vector<layer_state> layers_;
};

}  // namespace gradcomp
