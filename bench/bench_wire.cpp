// Throughput and size of wire format v1 messages: encode, decode, validate and
// decode-and-accumulate for every index coding, against a plain reference that writes raw u32
// indices and fp32 values (64 bits per element, no coding and no checks) and scatter-adds them.
//
// Each message carries one sparse tensor of n elements keeping n * density of them: positions
// drawn uniformly without replacement from a fixed seed, values Gaussian. Names follow
//   BM_<component>/<index coding>_<value coding>/cpu/<n>/density:<d>
// e.g. BM_wire_encode/rice_fp32/cpu/1048576/density:0.001. `bytes_per_second` counts message
// bytes (produced by encoders, consumed by decoders). Counters:
//   bits_per_index    index payload bits per kept element
//   bits_per_element  whole section (header, indices, values) bits per kept element
//   size_to_raw       message bytes / (8 bytes * kept), the raw u32 + fp32 size
//   GB_per_s_message  message bytes per second / 1e9 (decode-and-accumulate and scatter-add)
//   ratio_to_memcpy   time of a memcpy of the same message bytes / time of the component
//   ratio_to_raw_scatter_add
//                     time of the raw u32 + fp32 scatter-add of the same kept elements (no
//                     decoding, no checks) / time of the component
// The ratios are medians over iterations of references timed in the same iteration as the
// component (manual timing: the references are not counted in the reported time); above 1 the
// component is the faster. Every component is timed against both references. One iteration of
// these benchmarks is `runs` runs of the component back to back (the counter `runs`; about 20
// microseconds of work), so `Time` is that of `runs` runs; bytes_per_second and
// items_per_second (runs per second) count every run.
// BM_wire_decode_accumulate_scratch uses the overload of decode_accumulate that takes index
// scratch memory (positions decoded once); BM_wire_decode_accumulate the one without (positions
// kept on the stack up to wire::decode_accumulate_stack_positions, decoded twice beyond).
//
// BM_crc32c/<path>/<bytes> checksums a buffer on one path (tables: slicing-by-8; instructions:
// the CPU's CRC-32C instructions, as crc32c() chooses them) and BM_wire_dense_* encode or
// decode-and-accumulate one dense section; their ratio_to_memcpy is against a memcpy of the same
// bytes (the buffer, or the whole message).
//
// A quick pass over everything: bench_wire --benchmark_min_time=0.01 (Google Benchmark 1.7 wants
// a plain number of seconds there; 1.8 also takes "0.01s"). One component:
//   bench_wire --benchmark_filter='BM_wire_decode_accumulate/automatic'
#include <benchmark/benchmark.h>

#include <gradcomp/error.hpp>
#include <gradcomp/span.hpp>
#include <gradcomp/wire/tensor_message.hpp>
#include <gradcomp/wire/crc32c.hpp>
#include <gradcomp/wire/decode.hpp>
#include <gradcomp/wire/encode.hpp>
#include <gradcomp/wire/format.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace wire = gradcomp::wire;

// ---------------------------------------------------------------------------------------------
// Inputs: one sparse tensor per (n, density), built once and shared by every benchmark.
// ---------------------------------------------------------------------------------------------

struct dataset {
  std::uint32_t numel = 0;
  std::vector<std::uint32_t> indices;  // strictly increasing, below numel
  std::vector<float> values;           // standard normal
};

// Exactly k distinct positions below n, sorted, from a fixed seed.
std::vector<std::uint32_t> sorted_unique_positions(std::uint32_t n, std::size_t k,
                                                   std::mt19937_64& rng) {
  std::uniform_int_distribution<std::uint32_t> pos(0, n - 1);
  std::vector<std::uint32_t> idx;
  idx.reserve(k);
  while (idx.size() < k) {
    const std::size_t missing = k - idx.size();
    for (std::size_t j = 0; j < missing; ++j) idx.push_back(pos(rng));
    std::sort(idx.begin(), idx.end());
    idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  }
  return idx;
}

const dataset& get_dataset(std::uint32_t n, double density) {
  static std::map<std::pair<std::uint32_t, double>, std::unique_ptr<dataset>> cache;
  auto& slot = cache[{n, density}];
  if (!slot) {
    slot = std::make_unique<dataset>();
    std::mt19937_64 rng(0x6772616463'6f6d70ull ^ (static_cast<std::uint64_t>(n) * 1000003u) ^
                        static_cast<std::uint64_t>(density * 1e6));
    const auto k = static_cast<std::size_t>(std::llround(static_cast<double>(n) * density));
    slot->numel = n;
    slot->indices = sorted_unique_positions(n, k, rng);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    slot->values.resize(k);
    for (auto& v : slot->values) v = normal(rng);
  }
  return *slot;
}

gradcomp::tensor_message<float> sparse_message(const dataset& d) {
  gradcomp::tensor_message<float> m;
  m.tensor = 0;
  m.numel = d.numel;
  m.dense = false;
  m.indices = gradcomp::as_const_span(d.indices);
  m.values = gradcomp::as_const_span(d.values);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

struct sizes {
  double kept = 0;
  double index_bytes = 0;
  double section_bytes = 0;
  double message_bytes = 0;
};

// `runs`: runs of the component per iteration.
void set_counters(benchmark::State& state, const sizes& s, bool rate_counter, int runs = 1) {
  const double k = std::max(1.0, s.kept);
  state.counters["bits_per_index"] = 8.0 * s.index_bytes / k;
  state.counters["bits_per_element"] = 8.0 * s.section_bytes / k;
  state.counters["size_to_raw"] = s.message_bytes / (8.0 * k);
  if (rate_counter)
    state.counters["GB_per_s_message"] =
        benchmark::Counter(s.message_bytes * runs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * runs *
                          static_cast<std::int64_t>(s.message_bytes));
}

// ---------------------------------------------------------------------------------------------
// Reference: the uncoded DGC wire, k raw u32 indices then k raw fp32 values, copied with memcpy,
// without headers, validation or checksum.
// ---------------------------------------------------------------------------------------------

sizes raw_sizes(const dataset& d) {
  sizes s;
  s.kept = static_cast<double>(d.indices.size());
  s.index_bytes = 4.0 * s.kept;
  s.section_bytes = 8.0 * s.kept;
  s.message_bytes = 8.0 * s.kept;
  return s;
}

std::vector<std::byte> raw_message(const dataset& d) {
  const std::size_t k = d.indices.size();
  std::vector<std::byte> buf(8 * k);
  if (k != 0) {
    std::memcpy(buf.data(), d.indices.data(), 4 * k);
    std::memcpy(buf.data() + 4 * k, d.values.data(), 4 * k);
  }
  return buf;
}

void BM_raw_encode(benchmark::State& state, std::uint32_t n, double density) {
  const dataset& d = get_dataset(n, density);
  const std::size_t k = d.indices.size();
  std::vector<std::byte> buf(8 * k);
  for (auto _ : state) {
    std::memcpy(buf.data(), d.indices.data(), 4 * k);
    std::memcpy(buf.data() + 4 * k, d.values.data(), 4 * k);
    benchmark::DoNotOptimize(buf.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, raw_sizes(d), false);
}

void BM_raw_decode(benchmark::State& state, std::uint32_t n, double density) {
  const dataset& d = get_dataset(n, density);
  const std::size_t k = d.indices.size();
  const std::vector<std::byte> buf = raw_message(d);
  std::vector<std::uint32_t> idx(k);
  std::vector<float> val(k);
  for (auto _ : state) {
    std::memcpy(idx.data(), buf.data(), 4 * k);
    std::memcpy(val.data(), buf.data() + 4 * k, 4 * k);
    benchmark::DoNotOptimize(idx.data());
    benchmark::DoNotOptimize(val.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, raw_sizes(d), false);
}

// Adds the k raw (u32 index, fp32 value) pairs of `buf` (all indices, then all values) into `acc`.
void scatter_add_raw(const std::vector<std::byte>& buf, std::size_t k, float* acc) {
  const std::byte* ip = buf.data();
  const std::byte* vp = buf.data() + 4 * k;
  for (std::size_t j = 0; j < k; ++j) {
    std::uint32_t i;
    float v;
    std::memcpy(&i, ip + 4 * j, 4);
    std::memcpy(&v, vp + 4 * j, 4);
    acc[i] += v;
  }
}

void BM_raw_scatter_add(benchmark::State& state, std::uint32_t n, double density) {
  const dataset& d = get_dataset(n, density);
  const std::vector<std::byte> buf = raw_message(d);
  std::vector<float> acc(n, 0.0f);
  for (auto _ : state) {
    scatter_add_raw(buf, d.indices.size(), acc.data());
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, raw_sizes(d), true);
}

// ---------------------------------------------------------------------------------------------
// CRC-32C against memcpy of the same bytes.
// ---------------------------------------------------------------------------------------------

// A piece of code timed beside the benchmark's own body in every iteration: `counter` names the
// counter it gives (ratio_to_<name>), `run` is the code.
struct reference {
  const char* counter;
  std::function<void()> run;
};

// Times `body` against `refs` in every iteration, with manual timing so that the references cost
// nothing in the reported time: each iteration runs every reference and then the body `runs`
// times in a row (enough runs for about 20 microseconds of body, so that the clock's own cost is
// negligible for small messages) and reports the time of those runs. Each counter
// ratio_to_<name> is the median over iterations of reference time / body time; above 1 the body
// is the faster. bytes_per_second counts `bytes` per run of the body, items_per_second runs.
template <class Body>
int timed_against(benchmark::State& state, std::size_t bytes, const std::vector<reference>& refs,
                  Body&& body) {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  body();  // warm caches and branch predictors before sizing the inner loop
  const auto once = clock::now();
  body();
  const double warm = std::max(seconds(once), 1e-9);
  const int runs = static_cast<int>(std::clamp(20e-6 / warm, 1.0, 1000.0));
  std::vector<std::vector<double>> ratios(refs.size());
  for (auto _ : state) {
    std::vector<double> ref_time(refs.size());
    for (std::size_t r = 0; r < refs.size(); ++r) {
      const auto t0 = clock::now();
      for (int j = 0; j < runs; ++j) refs[r].run();
      benchmark::ClobberMemory();
      ref_time[r] = seconds(t0);
    }
    const auto t0 = clock::now();
    for (int j = 0; j < runs; ++j) body();
    benchmark::ClobberMemory();
    const double t = seconds(t0);
    state.SetIterationTime(t);
    for (std::size_t r = 0; r < refs.size(); ++r) ratios[r].push_back(ref_time[r] / t);
  }
  const auto total_runs = static_cast<std::int64_t>(state.iterations()) * runs;
  state.SetBytesProcessed(total_runs * static_cast<std::int64_t>(bytes));
  state.SetItemsProcessed(total_runs);
  state.counters["runs"] = runs;
  for (std::size_t r = 0; r < refs.size(); ++r) {
    auto& v = ratios[r];
    if (v.empty()) continue;
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    state.counters[std::string("ratio_to_") + refs[r].counter] = *mid;
  }
  return runs;
}

// The memcpy reference: `bytes` bytes copied between two buffers of its own.
reference memcpy_of(std::size_t bytes) {
  auto src = std::make_shared<std::vector<std::byte>>(bytes, std::byte{1});
  auto dst = std::make_shared<std::vector<std::byte>>(bytes);
  return {"memcpy", [src, dst] {
            std::memcpy(dst->data(), src->data(), src->size());
            benchmark::DoNotOptimize(dst->data());
          }};
}

// The raw reference: the dataset's k (u32, fp32) pairs scatter-added into an accumulator of its own.
reference raw_scatter_add_of(const dataset& d) {
  auto buf = std::make_shared<std::vector<std::byte>>(raw_message(d));
  auto acc = std::make_shared<std::vector<float>>(d.numel, 0.0f);
  const std::size_t k = d.indices.size();
  return {"raw_scatter_add", [buf, acc, k] {
            scatter_add_raw(*buf, k, acc->data());
            benchmark::DoNotOptimize(acc->data());
          }};
}

// The two references of every sparse benchmark: memcpy of the message bytes, and the raw
// u32 + fp32 scatter-add of the same kept elements.
std::vector<reference> sparse_references(std::size_t message_bytes, const dataset& d) {
  return {memcpy_of(message_bytes), raw_scatter_add_of(d)};
}

template <class Body>
void timed_against_memcpy(benchmark::State& state, std::size_t bytes, Body&& body) {
  timed_against(state, bytes, {memcpy_of(bytes)}, std::forward<Body>(body));
}

// ---------------------------------------------------------------------------------------------
// Wire format benchmarks
// ---------------------------------------------------------------------------------------------

struct wire_case {
  std::uint32_t numel;
  double density;
  wire::index_coding indices;
  wire::value_coding values;
  bool checksum;
};

// Encodes the case's message; fills `s` from the message itself (the coding `automatic` chose).
bool encode_case(const wire_case& c, const dataset& d, std::vector<std::byte>& msg, sizes& s,
                 std::string& why) {
  const auto m = sparse_message(d);
  const gradcomp::span<const gradcomp::tensor_message<float>> sections(&m, 1);
  wire::encode_options opt;
  opt.indices = c.indices;
  opt.values = c.values;
  opt.checksum = c.checksum;
  msg.assign(wire::max_encoded_bytes(sections, opt).value(), std::byte{0});
  const auto n = wire::encode(sections, opt, gradcomp::span<std::byte>(msg.data(), msg.size()));
  if (!n) {
    why = std::string("encode failed: ") + gradcomp::to_string(n.error());
    return false;
  }
  msg.resize(*n);
  const auto exact = wire::encoded_bytes(sections, opt);
  if (!exact || *exact != *n) {
    why = "encoded_bytes disagrees with encode";
    return false;
  }
  const gradcomp::span<const std::byte> view(msg.data(), msg.size());
  const auto h = wire::validate(view);
  if (!h) {
    why = std::string("validate failed: ") + gradcomp::to_string(h.error());
    return false;
  }
  s = sizes{};
  s.kept = static_cast<double>(d.indices.size());
  s.message_bytes = static_cast<double>(msg.size());
  (void)wire::for_each_section(view, [&](const wire::section_header& sh) {
    s.index_bytes += static_cast<double>(sh.index_bytes);
    s.section_bytes += static_cast<double>(sh.bytes);
  });
  return true;
}

// Decodes the message and compares it with the input (outside the timed loops).
bool roundtrip_ok(const std::vector<std::byte>& msg, const dataset& d, std::string& why) {
  const gradcomp::span<const std::byte> view(msg.data(), msg.size());
  std::vector<std::uint32_t> idx(d.indices.size());
  std::vector<float> val(d.values.size());
  bool ok = true;
  const auto h = wire::for_each_section(view, [&](const wire::section_header& sh) {
    const auto r = wire::decode_section<float>(view, sh, gradcomp::span<std::uint32_t>(idx),
                                               gradcomp::span<float>(val));
    ok = ok && r && *r == d.indices.size();
  });
  if (!h || !ok) {
    why = "decode failed";
    return false;
  }
  if (idx != d.indices) {
    why = "decoded indices differ";
    return false;
  }
  for (std::size_t j = 0; j < val.size(); ++j) {
    const float x = d.values[j];
    if (!(std::fabs(val[j] - x) <= std::fabs(x) * (1.0f / 128.0f) + 1e-6f)) {
      why = "decoded values differ";
      return false;
    }
  }
  return true;
}

void BM_wire_encode(benchmark::State& state, wire_case c) {
  const dataset& d = get_dataset(c.numel, c.density);
  std::vector<std::byte> msg;
  sizes s;
  std::string why;
  if (!encode_case(c, d, msg, s, why) || !roundtrip_ok(msg, d, why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const auto m = sparse_message(d);
  const gradcomp::span<const gradcomp::tensor_message<float>> sections(&m, 1);
  wire::encode_options opt;
  opt.indices = c.indices;
  opt.values = c.values;
  opt.checksum = c.checksum;
  std::vector<std::byte> out(wire::max_encoded_bytes(sections, opt).value());
  const gradcomp::span<std::byte> out_view(out.data(), out.size());
  bool failed = false;
  const int runs = timed_against(state, msg.size(), sparse_references(msg.size(), d), [&] {
    failed |= !wire::encode(sections, opt, out_view);
    benchmark::DoNotOptimize(out.data());
  });
  if (failed) state.SkipWithError("encode failed in the timed loop");
  set_counters(state, s, false, runs);
}

void BM_wire_decode(benchmark::State& state, wire_case c) {
  const dataset& d = get_dataset(c.numel, c.density);
  std::vector<std::byte> msg;
  sizes s;
  std::string why;
  if (!encode_case(c, d, msg, s, why) || !roundtrip_ok(msg, d, why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const gradcomp::span<const std::byte> view(msg.data(), msg.size());
  std::vector<std::uint32_t> idx(d.indices.size());
  std::vector<float> val(d.values.size());
  const gradcomp::span<std::uint32_t> idx_view(idx);
  const gradcomp::span<float> val_view(val);
  bool failed = false;
  const int runs = timed_against(state, msg.size(), sparse_references(msg.size(), d), [&] {
    // The non-allocating path: header, checksum and section headers, then each section's
    // payload checked and decoded into caller memory.
    const auto h = wire::for_each_section(view, [&](const wire::section_header& sh) {
      failed |= !wire::decode_section<float>(view, sh, idx_view, val_view);
    });
    failed |= !h;
    benchmark::DoNotOptimize(idx.data());
    benchmark::DoNotOptimize(val.data());
  });
  if (failed) state.SkipWithError("decode failed in the timed loop");
  set_counters(state, s, false, runs);
}

void BM_wire_validate(benchmark::State& state, wire_case c) {
  const dataset& d = get_dataset(c.numel, c.density);
  std::vector<std::byte> msg;
  sizes s;
  std::string why;
  if (!encode_case(c, d, msg, s, why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const gradcomp::span<const std::byte> view(msg.data(), msg.size());
  bool failed = false;
  const int runs = timed_against(state, msg.size(), sparse_references(msg.size(), d), [&] {
    const auto h = wire::validate(view);
    failed |= !h;
    benchmark::DoNotOptimize(h);
  });
  if (failed) state.SkipWithError("validate failed in the timed loop");
  set_counters(state, s, false, runs);
}

// Decode-and-accumulate into a dense float buffer; with `use_scratch`, through the overload that
// takes caller scratch memory for the positions (decoded once), else through the one without
// (positions kept on the stack while they fit, decoded twice beyond).
void run_decode_accumulate(benchmark::State& state, const wire_case& c, bool use_scratch) {
  const dataset& d = get_dataset(c.numel, c.density);
  std::vector<std::byte> msg;
  sizes s;
  std::string why;
  if (!encode_case(c, d, msg, s, why) || !roundtrip_ok(msg, d, why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const gradcomp::span<const std::byte> view(msg.data(), msg.size());
  std::vector<float> acc(d.numel, 0.0f);
  std::vector<std::uint32_t> scratch(use_scratch ? d.indices.size() : 0);
  const gradcomp::span<float> dest[1] = {gradcomp::span<float>(acc)};
  const gradcomp::span<const gradcomp::span<float>> dests(dest, 1);
  const gradcomp::span<std::uint32_t> scratch_view(scratch);
  // The overload with the caller's scratch, or the one a caller without scratch uses.
  auto apply = [&] {
    return use_scratch ? wire::decode_accumulate<float>(view, dests, scratch_view)
                       : wire::decode_accumulate<float>(view, dests);
  };
  {  // one application, checked against the input
    const auto h = apply();
    bool ok = static_cast<bool>(h);
    for (std::size_t j = 0; ok && j < d.indices.size(); ++j)
      ok = std::fabs(acc[d.indices[j]] - d.values[j]) <= std::fabs(d.values[j]) / 128.0f + 1e-6f;
    if (!ok) {
      state.SkipWithError("decode_accumulate gave wrong sums");
      return;
    }
  }
  bool failed = false;
  const int runs = timed_against(state, msg.size(), sparse_references(msg.size(), d), [&] {
    const auto h = apply();
    failed |= !h;
    benchmark::DoNotOptimize(acc.data());
  });
  if (failed) state.SkipWithError("decode_accumulate failed in the timed loop");
  set_counters(state, s, true, runs);
}

void BM_wire_decode_accumulate(benchmark::State& state, wire_case c) {
  run_decode_accumulate(state, c, false);
}

void BM_wire_decode_accumulate_scratch(benchmark::State& state, wire_case c) {
  run_decode_accumulate(state, c, true);
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

std::string density_label(double density) {
  return density == 0.001 ? "0.001" : density == 0.01 ? "0.01" : std::to_string(density);
}

std::string suffix(std::uint32_t n, double density) {
  return "/cpu/" + std::to_string(n) + "/density:" + density_label(density);
}

void BM_crc32c(benchmark::State& state, std::size_t bytes, bool instructions) {
  std::vector<std::byte> src(bytes);
  std::mt19937_64 rng(11);
  for (auto& b : src) b = static_cast<std::byte>(rng());
  gradcomp::detail::cpu::simd_override().store(
      instructions ? -1 : static_cast<int>(gradcomp::detail::cpu::simd_level::portable));
  if (instructions && gradcomp::detail::active_crc32c_path() == gradcomp::detail::crc32c_path::tables) {
    state.SkipWithError("this CPU has no CRC-32C instructions");
    gradcomp::detail::cpu::simd_override().store(-1);
    return;
  }
  std::uint32_t sink = 0;
  timed_against_memcpy(state, bytes, [&] { sink ^= gradcomp::crc32c(gradcomp::span<const std::byte>(src.data(), bytes)); });
  benchmark::DoNotOptimize(sink);
  gradcomp::detail::cpu::simd_override().store(-1);
}

// One dense fp32 tensor of n values as a message in `coding`, with or without a checksum:
// encode, and decode-and-accumulate into a dense buffer, against memcpy of the message bytes.
struct dense_case {
  std::size_t n;
  wire::value_coding coding;
  bool checksum;
};

const std::vector<float>& dense_values(std::size_t n) {
  static std::map<std::size_t, std::vector<float>> cache;
  auto& v = cache[n];
  if (v.empty()) {
    std::mt19937_64 rng(n);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    v.resize(n);
    for (auto& x : v) x = normal(rng);
  }
  return v;
}

std::vector<std::byte> dense_message(const dense_case& c, const std::vector<float>& values) {
  gradcomp::tensor_message<float> m;
  m.numel = c.n;
  m.dense = true;
  m.values = gradcomp::span<const float>(values.data(), values.size());
  wire::encode_options opt;
  opt.dense_values = c.coding;
  opt.checksum = c.checksum;
  return wire::encode(gradcomp::span<const gradcomp::tensor_message<float>>(&m, 1), opt);
}

void BM_wire_dense_encode(benchmark::State& state, dense_case c) {
  const auto& values = dense_values(c.n);
  gradcomp::tensor_message<float> m;
  m.numel = c.n;
  m.dense = true;
  m.values = gradcomp::span<const float>(values.data(), c.n);
  wire::encode_options opt;
  opt.dense_values = c.coding;
  opt.checksum = c.checksum;
  const gradcomp::span<const gradcomp::tensor_message<float>> sections(&m, 1);
  std::vector<std::byte> out(wire::max_encoded_bytes(sections, opt).value());
  const std::size_t bytes = dense_message(c, values).size();
  bool failed = false;
  timed_against_memcpy(state, bytes, [&] {
    failed |= !wire::encode(sections, opt, gradcomp::span<std::byte>(out.data(), out.size()));
  });
  if (failed) state.SkipWithError("encode failed");
}

void BM_wire_dense_decode_accumulate(benchmark::State& state, dense_case c) {
  const auto msg = dense_message(c, dense_values(c.n));
  std::vector<float> acc(c.n, 0.0f);
  const gradcomp::span<float> dest[1] = {gradcomp::span<float>(acc)};
  bool failed = false;
  timed_against_memcpy(state, msg.size(), [&] {
    failed |= !wire::decode_accumulate<float>(gradcomp::span<const std::byte>(msg.data(), msg.size()),
                                              gradcomp::span<const gradcomp::span<float>>(dest, 1));
  });
  if (failed) state.SkipWithError("decode_accumulate failed");
}

int register_all() {
  // Dense sections: the demo MLP's whole gradient (535,818 values) and 2^24 values (64 MiB).
  for (const std::size_t n : {std::size_t(535818), std::size_t(1) << 24})
    for (const auto coding : {wire::value_coding::fp32, wire::value_coding::fp16, wire::value_coding::bf16})
      for (const bool checksum : {false, true}) {
        const std::string name = std::string(wire::to_string(coding)) + (checksum ? "_crc32c" : "") + "/cpu/" +
                                 std::to_string(n);
        const dense_case dc{n, coding, checksum};
        benchmark::RegisterBenchmark(("BM_wire_dense_encode/" + name).c_str(), BM_wire_dense_encode, dc)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("BM_wire_dense_decode_accumulate/" + name).c_str(),
                                     BM_wire_dense_decode_accumulate, dc)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
  // The demo MLP's dense fp32 message (2,143,492 bytes) and a 64 MiB buffer, out of every cache.
  for (const std::size_t bytes : {std::size_t(2143492), std::size_t(64) << 20}) {
    benchmark::RegisterBenchmark(("BM_crc32c/tables/" + std::to_string(bytes)).c_str(), BM_crc32c, bytes, false)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_crc32c/instructions/" + std::to_string(bytes)).c_str(), BM_crc32c, bytes,
                                 true)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  const std::uint32_t sizes_n[] = {1u << 20, 1u << 24};
  const double densities[] = {0.001, 0.01};
  struct coding {
    const char* label;
    wire::index_coding indices;
    wire::value_coding values;
    bool checksum;
  };
  const coding codings[] = {
      {"raw_u32_fp32", wire::index_coding::raw_u32, wire::value_coding::fp32, false},
      {"delta_varint_fp32", wire::index_coding::delta_varint, wire::value_coding::fp32, false},
      {"rice_fp32", wire::index_coding::rice, wire::value_coding::fp32, false},
      {"bitmap_fp32", wire::index_coding::bitmap, wire::value_coding::fp32, false},
      {"automatic_fp32", wire::index_coding::automatic, wire::value_coding::fp32, false},
      {"automatic_fp16", wire::index_coding::automatic, wire::value_coding::fp16, false},
      {"automatic_bf16", wire::index_coding::automatic, wire::value_coding::bf16, false},
      {"automatic_fp32_crc32c", wire::index_coding::automatic, wire::value_coding::fp32, true},
  };
  using wire_fn = void (*)(benchmark::State&, wire_case);
  std::vector<std::pair<const char*, wire_fn>> components = {
      {"BM_wire_encode/", &BM_wire_encode},
      {"BM_wire_decode/", &BM_wire_decode},
      {"BM_wire_validate/", &BM_wire_validate},
      {"BM_wire_decode_accumulate/", &BM_wire_decode_accumulate},
      {"BM_wire_decode_accumulate_scratch/", &BM_wire_decode_accumulate_scratch},
  };
  for (const auto n : sizes_n) {
    for (const double density : densities) {
      const std::string tail = suffix(n, density);
      benchmark::RegisterBenchmark(("BM_raw_encode/u32_fp32" + tail).c_str(), BM_raw_encode, n,
                                   density);
      benchmark::RegisterBenchmark(("BM_raw_decode/u32_fp32" + tail).c_str(), BM_raw_decode, n,
                                   density);
      benchmark::RegisterBenchmark(("BM_raw_scatter_add/u32_fp32" + tail).c_str(),
                                   BM_raw_scatter_add, n, density);
      for (const auto& comp : components) {
        for (const auto& c : codings) {
          const wire_case wc{n, density, c.indices, c.values, c.checksum};
          benchmark::RegisterBenchmark((std::string(comp.first) + c.label + tail).c_str(),
                                       comp.second, wc)
              ->UseManualTime();
        }
      }
    }
  }
  return 0;
}

const int registered = register_all();

}  // namespace
