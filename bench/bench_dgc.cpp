// The whole compression step of one tensor, and of a whole model, against streaming loops that
// read and write exactly the bytes the step must touch, in one binary:
//   BM_stream_dgc     u = m*u + g; v += u            reads g, u, v; writes u, v: 20 bytes/element
//   BM_dgc_step       dgc_compressor::compress on one tensor (the gradient's signs drawn anew
//                     before each step, untimed): momentum correction, accumulation,
//                     sampled-threshold selection, extraction of the kept entries, momentum
//                     masking (DGC's defaults, no clipping)
//   BM_dgc_step/.../unchecked  the same with dgc_config::check_finite = false: without clipping,
//                     compress then reads each gradient once instead of twice (for trainers
//                     that check their gradients themselves)
//   BM_dgc_pass/.../move_in_pass  the step's fused pass alone (cpu::accumulate_and_select)
//                     moving its candidates out of the accumulator during the pass, against the
//                     same pass moving the selection out afterwards: the two ways that
//                     cpu::candidate_move chooses between by the tensor's size and density
//   BM_stream_ef      v += g                         reads g, v; writes v: 12 bytes/element
//   BM_ef_step        the same with error feedback only (momentum_correction = false)
//   BM_stream_sign    a read of g and e, then v = e + g; e = g
//                                                    reads g, e twice; writes e, v: 24 bytes/element
//   BM_ef_signsgd_step  ef_signsgd_compressor::compress on one tensor (signs drawn anew before
//                     each step, untimed): the L1 pass over p = e + lr*g, then the signs, the
//                     scale and e = p - sent
//   BM_stream_ternary a read of g (the scale must be known first), then v = g + g
//                                                    reads g twice; writes v: 12 bytes/element
//   BM_terngrad_step  terngrad_compressor::compress on one tensor, clipping on (signs drawn anew
//                     before each step, untimed): the sums and largest |g|, then a Philox draw and
//                     a ternary value per element
//   BM_onebit_step    onebit_sgd_compressor::compress on one tensor of 256 columns (signs drawn
//                     anew before each step, untimed): the column sums over v = g + r, then the
//                     column values and r = v - sent; against BM_stream_sign (the same 24 bytes)
//   BM_qsgd_step      qsgd_compressor::compress on one tensor, the defaults (15 levels, buckets of
//                     512, Euclidean norms; signs drawn anew before each step, untimed): each
//                     bucket's norm, then a Philox draw and a level per element; against
//                     BM_stream_ternary (the same 12 bytes)
//   BM_adacomp_step   adacomp_compressor::compress on one tensor, bins of 500 (signs drawn anew
//                     before each step, untimed): each bin's largest |r + g| and its count in two
//                     reads of the bin, then its selection and r = G - sent; against
//                     BM_stream_sign (24 bytes; the step moves 20 and writes only what it sends)
//   BM_stream_codes   a read of the factor elements that checks them, then a byte written per
//                     element from a second read: 9 bytes/element
//   BM_isgq_step      isgq_compressor::compress of a 4096 x 4096 layer whose factors X and Delta
//                     hold n elements together (a batch of n / 8192), dithered with s = 3 and
//                     buckets of 512: the finiteness reads, each bucket's scale and codes (a
//                     Philox block per four elements), the codes packed into the message; against
//                     BM_stream_codes (the step also packs 3 bits per element)
//   BM_saef_step      saef_worker::step around dgc_compressor (exact top-k at density 0.001, no
//                     momentum correction): the worker's momentum M = m M + g, then u = eta M
//                     through the compressor's error feedback and selection; against
//                     BM_stream_dgc (the same 20 bytes per element: g, M and the residual read,
//                     M and the residual written)
// The quantisers' steps report wire_bits_per_element: their last message's section per element.
//   BM_dgc_model      every tensor of ResNet-50 (bench/data/resnet50.txt, 161 tensors, 25.6 M
//                     parameters) in one compress call, DGC's defaults with clipping, 8 workers;
//                     compared with BM_stream_dgc over as many elements; on 1 and 2 threads
//                     (dgc_config::threads), timed by the wall clock
// Names: BM_<component>/float/<backend>/<n>/density:<d> (the model's n is its parameter count).
// bytes_per_second counts the bytes the step must move (20 or 12 per element), the same for the
// step and its reference, so the two rates compare directly. Counters:
//   ratio_to_stream  time of the streaming reference / own time, the reference running on arrays
//                    of the same size before every iteration; the median over iterations (1 = as
//                    fast as touching the bytes once)
//   ratio_to_checked_stream  the same against the streaming reference preceded by a read of the
//                    gradient that checks it (24 or 16 bytes per element): for the steps that
//                    check their gradient (check_finite, or the norm for clipping), which must
//                    read it before their first write so that a bad one leaves the state as it was
//   speedup_move_in_pass  (pass) time of the pass that moves afterwards / time of the one that
//                    moves in the pass, the median over iterations (> 1: moving in the pass wins)
//   moves_by_default (pass) 1 where the default policy moves in the pass at this size and density
//   kept_over_k      selected entries / target
//   message_bytes, compression_ratio  (model) wire size of one step and dense fp32 bytes over it
//
// Quick pass: bench_dgc --benchmark_min_time=0.01 --benchmark_filter='/65536/'
#include <benchmark/benchmark.h>

#include <gradcomp/adacomp/compressor.hpp>
#include <gradcomp/cpu/fused_kernels.hpp>
#include <gradcomp/dgc/compressor.hpp>
#include <gradcomp/ef_signsgd/compressor.hpp>
#include <gradcomp/isgq/compressor.hpp>
#include <gradcomp/onebit/compressor.hpp>
#include <gradcomp/qsgd/compressor.hpp>
#include <gradcomp/saef/worker.hpp>
#include <gradcomp/terngrad/compressor.hpp>
#include <gradcomp/wire/encode.hpp>

#include "model_list.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef GRADCOMP_BENCH_DATA_DIR
#define GRADCOMP_BENCH_DATA_DIR "bench/data"
#endif

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<float> gradient(std::size_t n, std::uint64_t seed) {
  std::vector<float> g(n);
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> dist(3.0f);
  for (auto& x : g) x = 1e-3f * dist(rng);
  return g;
}

// True when no value of g is NaN or infinite: one read pass, the library's own (AVX2 where the
// CPU has it, faster than the compiler's loop at baseline flags), so that the checked reference
// reads as fast as this machine lets one thread read.
bool finite_read(const std::vector<float>& g) {
  return gradcomp::detail::cpu::all_finite(gradcomp::span<const float>(g.data(), g.size()));
}

// Streaming loops that read and write exactly the bytes of a DGC step (20 per element) and of
// an error-feedback step (12 per element). With `check`, a read of g that checks it comes first
// (24 and 16 bytes per element): what a step must do that leaves its state untouched when the
// gradient holds a NaN or an infinity, since it has to know before its first write.
struct stream_dgc {
  explicit stream_dgc(std::size_t n, bool check = false) : g(gradient(n, 1)), u(n, 0.0f), v(n, 0.0f), check(check) {}
  void operator()() {
    if (check && !finite_read(g)) return;
    const float m = 0.9f;
    float* up = u.data();
    float* vp = v.data();
    const float* gp = g.data();
    for (std::size_t i = 0, n = g.size(); i < n; ++i) {
      up[i] = m * up[i] + gp[i];
      vp[i] += up[i];
    }
    benchmark::ClobberMemory();
  }
  std::vector<float> g, u, v;
  bool check;
};

struct stream_ef {
  explicit stream_ef(std::size_t n, bool check = false) : g(gradient(n, 1)), v(n, 0.0f), check(check) {}
  void operator()() {
    if (check && !finite_read(g)) return;
    float* vp = v.data();
    const float* gp = g.data();
    for (std::size_t i = 0, n = g.size(); i < n; ++i) vp[i] += gp[i];
    benchmark::ClobberMemory();
  }
  std::vector<float> g, v;
  bool check;
};

// The bytes of an EF-SignSGD step: a read of g and e (the L1 norm must be known before the first
// sign), then a pass that reads both and writes e and the message (24 bytes per element).
struct stream_sign {
  explicit stream_sign(std::size_t n, bool = false) : g(gradient(n, 1)), e(gradient(n, 3)), v(n, 0.0f) {}
  void operator()() {
    if (!finite_read(g) || !finite_read(e)) return;
    float* ep = e.data();
    float* vp = v.data();
    const float* gp = g.data();
    for (std::size_t i = 0, n = g.size(); i < n; ++i) {
      vp[i] = ep[i] + gp[i];
      ep[i] = gp[i];
    }
    benchmark::ClobberMemory();
  }
  std::vector<float> g, e, v;
};

// The bytes of a TernGrad step: a read of g (its scale must be known before the first value),
// then a pass that reads g again and writes the message (12 bytes per element).
struct stream_ternary {
  explicit stream_ternary(std::size_t n, bool = false) : g(gradient(n, 1)), v(n, 0.0f) {}
  void operator()() {
    if (!finite_read(g)) return;
    float* vp = v.data();
    const float* gp = g.data();
    for (std::size_t i = 0, n = g.size(); i < n; ++i) vp[i] = gp[i] + gp[i];
    benchmark::ClobberMemory();
  }
  std::vector<float> g, v;
};

// A reference loop and the counter that reports the ratio to it.
struct reference {
  const char* counter;
  std::function<void()> run;
};

// Runs `body` every iteration and reports the bytes it must move. Each reference runs before
// each iteration outside the timed region, and its counter is the median over iterations of
// the reference's time over the body's: each pair runs back to back, so a slow phase of a
// shared machine slows both, and the median ignores the iterations that one stall hit alone.
// `prepare`, when given, also runs untimed before each iteration.
template <class Body>
void timed(benchmark::State& state, std::size_t n, std::size_t bytes_per_element, Body&& body,
           const std::vector<reference>& references = {}, const std::function<void()>& prepare = {}) {
  std::vector<std::vector<double>> ratios(references.size());
  std::vector<double> reference_seconds(references.size());
  for (auto _ : state) {
    if (!references.empty() || prepare) {
      state.PauseTiming();
      if (prepare) prepare();
      for (std::size_t r = 0; r < references.size(); ++r) {
        const auto r0 = clock_type::now();
        references[r].run();
        reference_seconds[r] = std::chrono::duration<double>(clock_type::now() - r0).count();
      }
      state.ResumeTiming();
    }
    const auto t0 = clock_type::now();
    body();
    const double body_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    for (std::size_t r = 0; r < references.size(); ++r) ratios[r].push_back(reference_seconds[r] / body_seconds);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n * bytes_per_element));
  for (std::size_t r = 0; r < references.size(); ++r) {
    if (ratios[r].empty()) continue;
    const auto mid = ratios[r].begin() + static_cast<std::ptrdiff_t>(ratios[r].size() / 2);
    std::nth_element(ratios[r].begin(), mid, ratios[r].end());
    state.counters[references[r].counter] = *mid;
  }
}

void bm_stream_dgc(benchmark::State& state, std::size_t n) {
  stream_dgc s(n);
  timed(state, n, 20, s);
}

void bm_stream_ef(benchmark::State& state, std::size_t n) {
  stream_ef s(n);
  timed(state, n, 12, s);
}

// A trainer's gradients change from step to step: before each step (untimed) the benchmarks draw
// the gradient's signs anew, so the accumulator follows a random walk as with real noisy
// gradients (one gradient again and again would make it grow in lockstep).
struct noisy_gradient {
  explicit noisy_gradient(std::size_t n) : values(gradient(n, 2)) {}
  void new_signs() {
    for (auto& x : values) {
      bits ^= bits << 13;
      bits ^= bits >> 7;
      bits ^= bits << 17;
      x = (bits & 1) ? -std::fabs(x) : std::fabs(x);
    }
  }
  std::vector<float> values;
  std::uint64_t bits = 0x9e3779b97f4a7c15ull;
};

// timed() against the plain streaming loop Stream, and where the step checks its gradient, also
// against the loop after a checking read.
template <class Stream, class Body>
void timed_against_streams(benchmark::State& state, std::size_t n, std::size_t bytes_per_element,
                           bool check_finite, Body&& body, const std::function<void()>& prepare) {
  Stream plain(n);
  std::vector<reference> refs = {{"ratio_to_stream", std::ref(plain)}};
  std::unique_ptr<Stream> checked;
  if (check_finite) {
    checked = std::make_unique<Stream>(n, true);
    refs.push_back({"ratio_to_checked_stream", std::ref(*checked)});
  }
  timed(state, n, bytes_per_element, body, refs, prepare);
}

void bm_step(benchmark::State& state, std::size_t n, double density, bool correction, bool check_finite) {
  gradcomp::dgc_config cfg;
  cfg.momentum_correction = correction;
  cfg.check_finite = check_finite;
  cfg.schedule = gradcomp::warmup_schedule::constant(density);
  gradcomp::dgc_compressor<float> c(cfg);
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  noisy_gradient g(n);
  const std::vector<gradcomp::span<const float>> grads = {gradcomp::span<const float>(g.values.data(), n)};
  auto new_signs = [&] { g.new_signs(); };
  double kept = 0.0, target = 0.0;
  bool ok = true;
  auto body = [&] {
    const auto issued = c.compress(grads);
    const auto r = issued ? c.stats() : gradcomp::fail(issued.error());
    ok &= static_cast<bool>(r);
    if (r) {
      kept += static_cast<double>(r->kept_elements);
      target += static_cast<double>(r->target_elements);
    }
  };
  if (correction)
    timed_against_streams<stream_dgc>(state, n, 20, check_finite, body, new_signs);
  else
    timed_against_streams<stream_ef>(state, n, 12, check_finite, body, new_signs);
  if (!ok) state.SkipWithError("compress failed");
  state.counters["kept_over_k"] = target > 0 ? kept / target : 0.0;
}

void bm_stream_sign(benchmark::State& state, std::size_t n) {
  stream_sign s(n);
  timed(state, n, 24, s);
}

// One step of the dense quantiser `c` (one tensor of n elements registered) per iteration, its
// signs drawn anew before each step (untimed), against the streaming loop Stream of
// `bytes_per_element`; wire_bits_per_element: the last step's section (header, parameters, codes).
template <class Stream, class C>
void quantiser_step(benchmark::State& state, std::size_t n, C& c, std::size_t bytes_per_element) {
  noisy_gradient g(n);
  const std::vector<gradcomp::span<const float>> grads = {gradcomp::span<const float>(g.values.data(), n)};
  bool ok = true;
  auto body = [&] {
    const auto issued = c.compress(grads);
    ok &= issued && c.stats();
  };
  timed_against_streams<Stream>(state, n, bytes_per_element, false, body, [&] { g.new_signs(); });
  std::vector<std::byte> msg(c.max_message_bytes());
  const auto bytes = c.encode_message({}, gradcomp::span<std::byte>(msg.data(), msg.size()));
  if (!ok || !bytes) state.SkipWithError("compress failed");
  state.counters["wire_bits_per_element"] =
      bytes ? 8.0 * static_cast<double>(*bytes - gradcomp::wire::message_header_bytes) / static_cast<double>(n) : 0.0;
}

void bm_ef_signsgd_step(benchmark::State& state, std::size_t n) {
  gradcomp::ef_signsgd_config cfg;
  cfg.learning_rate = 0.01;
  gradcomp::ef_signsgd_compressor<float> c(cfg);
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  quantiser_step<stream_sign>(state, n, c, 24);
}

void bm_stream_ternary(benchmark::State& state, std::size_t n) {
  stream_ternary s(n);
  timed(state, n, 12, s);
}

void bm_terngrad_step(benchmark::State& state, std::size_t n) {
  gradcomp::terngrad_compressor<float> c(gradcomp::terngrad_config{});
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  quantiser_step<stream_ternary>(state, n, c, 12);
}

void bm_onebit_step(benchmark::State& state, std::size_t n) {
  gradcomp::onebit_sgd_compressor<float> c(gradcomp::onebit_sgd_config{});
  c.add_tensor("w", {n / 256, 256}, gradcomp::tensor_mode::compressed);
  quantiser_step<stream_sign>(state, n, c, 24);
}

void bm_qsgd_step(benchmark::State& state, std::size_t n) {
  gradcomp::qsgd_compressor<float> c(gradcomp::qsgd_config{});
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  quantiser_step<stream_ternary>(state, n, c, 12);
}

// ISGQ's step over factors of n elements: a read that checks them, then a code byte per element.
struct stream_codes {
  explicit stream_codes(std::size_t n, bool = false) : g(gradient(n, 1)), codes(n, 0) {}
  void operator()() {
    if (!finite_read(g)) return;
    const float* gp = g.data();
    std::uint8_t* cp = codes.data();
    for (std::size_t i = 0, n = g.size(); i < n; ++i) cp[i] = static_cast<std::uint8_t>(gp[i] > 0.0f);
    benchmark::ClobberMemory();
  }
  std::vector<float> g;
  std::vector<std::uint8_t> codes;
};

void bm_stream_codes(benchmark::State& state, std::size_t n) {
  stream_codes s(n);
  timed(state, n, 9, s);
}

void bm_isgq_step(benchmark::State& state, std::size_t n) {
  constexpr std::size_t width = 4096;
  const std::size_t batch = n / (2 * width);
  gradcomp::isgq_config cfg;
  cfg.levels = 3;
  gradcomp::isgq_compressor<float> c(cfg);
  c.add_layer("fc", width, width);
  // Inputs after a ReLU (half exact zeros) and back-propagated errors.
  std::vector<float> x = gradient(batch * width, 2), d = gradient(batch * width, 3);
  for (std::size_t i = 0; i < x.size(); i += 2) x[i] = 0.0f;
  bool ok = true;
  std::size_t payload = 0;
  timed_against_streams<stream_codes>(state, n, 9, false, [&] {
    const auto m = c.compress(0, gradcomp::span<const float>(x.data(), x.size()),
                              gradcomp::span<const float>(d.data(), d.size()), batch);
    ok &= static_cast<bool>(m);
    payload = m ? m->payload.size() : 0;
  }, {});
  if (!ok) state.SkipWithError("compress failed");
  state.counters["wire_bits_per_element"] = 8.0 * static_cast<double>(payload) / static_cast<double>(n);
}

void bm_saef_step(benchmark::State& state, std::size_t n) {
  gradcomp::dgc_config cfg;
  cfg.momentum_correction = false;
  cfg.momentum_masking = false;
  cfg.selection = gradcomp::selection_method::exact_topk;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.001);
  gradcomp::dgc_compressor<float> c(cfg);
  c.add_tensor("w", {n}, gradcomp::tensor_mode::compressed);
  gradcomp::saef_config scfg;
  scfg.learning_rate = 0.1;
  gradcomp::saef_worker<gradcomp::dgc_compressor<float>> w(c, scfg);
  noisy_gradient g(n);
  const std::vector<gradcomp::span<const float>> grads = {gradcomp::span<const float>(g.values.data(), n)};
  bool ok = true;
  timed_against_streams<stream_dgc>(state, n, 20, false, [&] { ok &= static_cast<bool>(w.step(grads)); },
                                    [&] { g.new_signs(); });
  if (!ok) state.SkipWithError("step failed");
}

void bm_adacomp_step(benchmark::State& state, std::size_t n) {
  gradcomp::adacomp_compressor<float> c(gradcomp::adacomp_config{});
  c.add_tensor("w", {n}, 500, gradcomp::tensor_mode::compressed);
  quantiser_step<stream_sign>(state, n, c, 24);
}

// One tensor's fused pass (cpu::accumulate_and_select as compress runs it: vanilla momentum
// correction, masking, the sampled threshold, a guide carried from step to step) with a given
// policy for moving the candidates out of the accumulator.
struct fused_pass {
  fused_pass(std::size_t n, std::size_t k, gradcomp::detail::cpu::candidate_move move)
      : u(n, 0.0f),
        v(n, 0.0f),
        idx(k),
        values(k),
        workspace(gradcomp::detail::cpu::accumulate_and_select_workspace_bytes<float>(cfg, n, k)),
        move(move) {}
  bool operator()(const std::vector<float>& g, std::uint64_t seed) {
    using gradcomp::span;
    const auto r = gradcomp::detail::cpu::accumulate_and_select<float>(
        gradcomp::momentum_kind::vanilla, 0.9f, 1.0f, span<const float>(g.data(), g.size()),
        span<float>(u.data(), u.size()), span<float>(v.data(), v.size()), idx.size(), cfg, seed,
        span<std::uint32_t>(idx.data(), idx.size()), span<float>(values.data(), values.size()), true,
        span<std::byte>(workspace.data(), workspace.size()), &guide, move);
    return static_cast<bool>(r);
  }
  gradcomp::sampled_threshold_config cfg{};
  std::vector<float> u, v;
  std::vector<std::uint32_t> idx;
  std::vector<float> values;
  std::vector<std::byte> workspace;
  gradcomp::detail::cpu::step_guide<float> guide{};
  gradcomp::detail::cpu::candidate_move move;
};

// The fused pass moving its candidates out while their block is in the L1 cache (and only the
// mispredicted ones afterwards), against the same pass that leaves them in and moves the
// selection out afterwards (the reference, run on its own arrays before every iteration with
// the same gradient and seed). Both give bitwise the same state; the benchmark checks it.
void bm_pass(benchmark::State& state, std::size_t n, double density) {
  const std::size_t k = gradcomp::kept_count(n, density);
  noisy_gradient g(n);
  fused_pass in_pass(n, k, gradcomp::detail::cpu::candidate_move::always);
  fused_pass after(n, k, gradcomp::detail::cpu::candidate_move::never);
  std::uint64_t seed = 1;
  bool ok = true;
  timed(state, n, 20, [&] { ok &= in_pass(g.values, seed); },
        {{"speedup_move_in_pass", [&] { ok &= after(g.values, seed); }}},
        [&] {
          g.new_signs();
          ++seed;
        });
  if (!ok) {
    state.SkipWithError("accumulate_and_select failed");
    return;
  }
  if (in_pass.u != after.u || in_pass.v != after.v || in_pass.idx != after.idx)
    state.SkipWithError("moving in the pass changed the result");
  state.counters["moves_by_default"] =
      gradcomp::detail::cpu::moves_in_pass<float>(gradcomp::detail::cpu::candidate_move::by_size_and_density, n, k) ? 1.0 : 0.0;
}

using gradcomp_bench::load_model;
using gradcomp_bench::model_numel;
using gradcomp_bench::tensor_spec;

const std::vector<tensor_spec>& resnet50() {
  static const std::vector<tensor_spec> model = load_model(GRADCOMP_BENCH_DATA_DIR "/resnet50.txt");
  return model;
}

void bm_model(benchmark::State& state, double density, std::size_t threads) {
  const auto& model = resnet50();
  gradcomp::dgc_config cfg;
  cfg.threads = threads;
  cfg.schedule = gradcomp::warmup_schedule::constant(density);
  cfg.clip_norm = 5.0;
  cfg.num_workers = 8;
  gradcomp::dgc_compressor<float> c(cfg);
  std::vector<std::vector<float>> grads;
  std::vector<gradcomp::span<const float>> views;
  for (std::size_t t = 0; t < model.size(); ++t) {
    c.add_tensor(model[t].name, model[t].shape);
    grads.push_back(gradient(model[t].numel, 100 + t));
    views.emplace_back(grads.back().data(), grads.back().size());
  }
  const std::size_t n = model_numel(model);
  bool ok = true;
  // Clipping needs the norm of every gradient before the first update: the checked stream is
  // the one that reads the bytes this step must read.
  stream_dgc plain(n), checked(n, true);
  timed(state, n, 20, [&] { ok &= c.compress(views) && c.stats(); },
        {{"ratio_to_stream", std::ref(plain)}, {"ratio_to_checked_stream", std::ref(checked)}});
  if (!ok) {
    state.SkipWithError("compress failed");
    return;
  }
  gradcomp::wire::encode_options opt;
  opt.checksum = true;
  std::vector<std::byte> buf(c.max_message_bytes(opt));
  const auto bytes = c.encode_message(opt, gradcomp::span<std::byte>(buf.data(), buf.size()));
  if (!bytes) {
    state.SkipWithError("encode failed");
    return;
  }
  state.counters["message_bytes"] = static_cast<double>(*bytes);
  state.counters["compression_ratio"] = 4.0 * static_cast<double>(n) / static_cast<double>(*bytes);
}

const bool registered = [] {
  auto density_name = [](double d) { return d == 0.001 ? std::string("0.001") : std::string("0.01"); };
  for (std::size_t n : {std::size_t(1) << 16, std::size_t(1) << 20, std::size_t(1) << 24, std::size_t(1) << 26}) {
    const std::string size = std::to_string(n);
    benchmark::RegisterBenchmark(("BM_stream_dgc/float/reference/" + size).c_str(), bm_stream_dgc, n)
        ->Unit(benchmark::kMillisecond);
    for (double d : {0.001, 0.01})
      benchmark::RegisterBenchmark(("BM_dgc_step/float/cpu/" + size + "/density:" + density_name(d)).c_str(),
                                   bm_step, n, d, true, true)
          ->Unit(benchmark::kMillisecond);
    for (double d : {0.001, 0.01})
      benchmark::RegisterBenchmark(
          ("BM_dgc_step/float/cpu/" + size + "/density:" + density_name(d) + "/unchecked").c_str(), bm_step, n,
          d, true, false)
          ->Unit(benchmark::kMillisecond);
    for (double d : {0.001, 0.01})
      benchmark::RegisterBenchmark(
          ("BM_dgc_pass/float/cpu/" + size + "/density:" + density_name(d) + "/move_in_pass").c_str(), bm_pass,
          n, d)
          ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_stream_ef/float/reference/" + size).c_str(), bm_stream_ef, n)
        ->Unit(benchmark::kMillisecond);
    for (double d : {0.001, 0.01})
      benchmark::RegisterBenchmark(("BM_ef_step/float/cpu/" + size + "/density:" + density_name(d)).c_str(),
                                   bm_step, n, d, false, true)
          ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_stream_sign/float/reference/" + size).c_str(), bm_stream_sign, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_ef_signsgd_step/float/cpu/" + size).c_str(), bm_ef_signsgd_step, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_stream_ternary/float/reference/" + size).c_str(), bm_stream_ternary, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_terngrad_step/float/cpu/" + size).c_str(), bm_terngrad_step, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_onebit_step/float/cpu/" + size).c_str(), bm_onebit_step, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_qsgd_step/float/cpu/" + size).c_str(), bm_qsgd_step, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_adacomp_step/float/cpu/" + size).c_str(), bm_adacomp_step, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_saef_step/float/cpu/" + size).c_str(), bm_saef_step, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_stream_codes/float/reference/" + size).c_str(), bm_stream_codes, n)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_isgq_step/float/cpu/" + size).c_str(), bm_isgq_step, n)
        ->Unit(benchmark::kMillisecond);
  }
  try {
    (void)resnet50();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dgc: %s; BM_dgc_model not registered\n", e.what());
    return true;
  }
  const std::string model_size = std::to_string(model_numel(resnet50()));
  benchmark::RegisterBenchmark(("BM_stream_dgc/float/reference/" + model_size).c_str(), bm_stream_dgc,
                               model_numel(resnet50()))
      ->Unit(benchmark::kMillisecond);
  for (std::size_t threads : {1, 2})
    benchmark::RegisterBenchmark(
        ("BM_dgc_model/float/cpu/" + model_size + "/density:0.001/resnet50/threads:" + std::to_string(threads))
            .c_str(),
        bm_model, 0.001, threads)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  return true;
}();

}  // namespace
