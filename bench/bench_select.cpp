// Top-k selection on the CPU: gradcomp's exact top-k and sampled-threshold selection against what
// a C++ user would otherwise write, side by side in one binary:
//   BM_stream_read   one pass that reads every value (an OR of their bits, on AVX2 vectors with
//                    four accumulators where the CPU has AVX2): the memory-bandwidth floor of any
//                    selection that must look at every element
//   BM_nth_element   copy |v|, std::nth_element for the k-th magnitude, then one pass collecting
//                    the indices at or above it (the fastest way to get top-k indices with the
//                    standard library)
//   BM_partial_sort  std::partial_sort of an index array by |v| (heap of k, then one scan)
//   BM_sort          std::sort of an index array by |v|, take the first k (at 2^26 one iteration
//                    only: it takes many seconds)
//   BM_exact_topk    gradcomp::exact_topk (radix select on magnitude keys)
//   BM_sampled_threshold  gradcomp::sampled_threshold_select (DGC's defaults: 1% strided sample,
//                    adaptation loop), a new seed every iteration as in training
// Names: BM_<component>/float/<backend>/<n>/density:<d>/<distribution>, backend "cpu" for
// gradcomp and "std" for the standard library. Inputs: Gaussian values, or heavy-tailed ones
// (Student-t with 2 degrees of freedom), generated once per size.
//
// bytes_per_second counts the 4n input bytes. Counters, from the same run (each benchmark of an
// input runs after the references registered before it):
//   speedup_vs_nth_element  time of BM_nth_element on the same input / own time
//   ratio_to_stream         time of BM_stream_read on the same input / own time (1 = one pass)
//   speedup_vs_exact_topk   (sampled) time of BM_exact_topk on the same input / own time
//   kept_over_k             (sampled) mean selected count / k
//
// Quick pass: bench_select --benchmark_min_time=0.01 --benchmark_filter='/65536/'
#include <benchmark/benchmark.h>

#include <gradcomp/backend.hpp>
#include <gradcomp/detail/simd.hpp>
#include <gradcomp/dgc/warmup_schedule.hpp>
#include <gradcomp/select/exact_topk.hpp>
#include <gradcomp/select/sampled_threshold.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>


namespace {

using clock_type = std::chrono::steady_clock;

enum class distribution { gaussian, heavy };

const char* name_of(distribution d) { return d == distribution::gaussian ? "gaussian" : "heavy"; }

// One input per (n, distribution), generated once and shared.
const std::vector<float>& input(std::size_t n, distribution d) {
  static std::map<std::pair<std::size_t, int>, std::vector<float>> cache;
  auto& v = cache[{n, static_cast<int>(d)}];
  if (v.empty()) {
    v.resize(n);
    std::mt19937_64 rng(0x5e1ec7 + n + static_cast<std::size_t>(d));
    if (d == distribution::gaussian) {
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (auto& x : v) x = dist(rng);
    } else {
      std::student_t_distribution<float> dist(2.0f);
      for (auto& x : v) x = dist(rng);
    }
  }
  return v;
}

// Mean seconds per iteration of the reference benchmarks, by "<n>/<density>/<distribution>".
std::map<std::string, double>& reference_seconds(const std::string& which) {
  static std::map<std::string, std::map<std::string, double>> refs;
  return refs[which];
}

struct params {
  std::size_t n;
  double density;
  distribution dist;
  std::size_t k() const { return gradcomp::kept_count(n, density); }
  std::string key() const {
    return std::to_string(n) + "/" + std::to_string(density) + "/" + name_of(dist);
  }
};

// Runs `body` for every iteration, times the loop itself, records the mean under `record` and
// reports the speed-up against each reference in `against` already measured on the same input.
template <class Body>
void timed(benchmark::State& state, const params& p, const char* record,
           std::vector<std::pair<const char*, const char*>> against, Body body) {
  const auto start = clock_type::now();
  for (auto _ : state) body();
  const double seconds =
      std::chrono::duration<double>(clock_type::now() - start).count() / double(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(p.n * sizeof(float)));
  state.counters["k"] = static_cast<double>(p.k());
  if (record) reference_seconds(record)[p.key()] = seconds;
  for (const auto& [ref, counter] : against) {
    const auto& m = reference_seconds(ref);
    if (auto it = m.find(p.key()); it != m.end()) state.counters[counter] = it->second / seconds;
  }
}

// The OR of the bits of v[0, n): the least work that still reads every element.
std::uint32_t or_of_bits(const float* v, std::size_t n) {
  std::uint32_t acc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    acc |= bits;
  }
  return acc;
}

#if GRADCOMP_HAVE_AVX2_KERNELS
// The same on AVX2 vectors with four independent accumulators, as wide as the library's kernels
// read, so that the reference is limited by the memory system alone.
GRADCOMP_TARGET_AVX2 std::uint32_t or_of_bits_avx2(const float* v, std::size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = _mm256_or_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
    b = _mm256_or_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 8)));
    c = _mm256_or_si256(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 16)));
    d = _mm256_or_si256(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 24)));
  }
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d)));
  std::uint32_t acc = or_of_bits(v + i, n - i);
  for (const std::uint32_t lane : lanes) acc |= lane;
  return acc;
}
#endif

// At the SIMD level the library's kernels use (the same dispatch, GRADCOMP_CPU_SIMD included).
void bm_stream_read(benchmark::State& state, params p) {
  const auto& v = input(p.n, p.dist);
  timed(state, p, "stream", {}, [&] {
    std::uint32_t acc = 0;
#if GRADCOMP_HAVE_AVX2_KERNELS
    if (gradcomp::detail::cpu::use_avx2()) acc = or_of_bits_avx2(v.data(), p.n);
    else
#endif
      acc = or_of_bits(v.data(), p.n);
    benchmark::DoNotOptimize(acc);
  });
}

void bm_nth_element(benchmark::State& state, params p) {
  const auto& v = input(p.n, p.dist);
  const std::size_t k = p.k();
  std::vector<float> mag(p.n);
  std::vector<std::uint32_t> out(k);
  timed(state, p, "nth_element", {}, [&] {
    for (std::size_t i = 0; i < p.n; ++i) mag[i] = std::fabs(v[i]);
    std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k - 1), mag.end(),
                     std::greater<float>());
    const float t = mag[k - 1];
    std::size_t c = 0;
    for (std::size_t i = 0; i < p.n && c < k; ++i)
      if (std::fabs(v[i]) >= t) out[c++] = static_cast<std::uint32_t>(i);
    benchmark::DoNotOptimize(out.data());
  });
}

void bm_partial_sort(benchmark::State& state, params p) {
  const auto& v = input(p.n, p.dist);
  const std::size_t k = p.k();
  std::vector<std::uint32_t> idx(p.n);
  timed(state, p, nullptr, {{"nth_element", "speedup_vs_nth_element"}}, [&] {
    std::iota(idx.begin(), idx.end(), 0u);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                      [&](std::uint32_t a, std::uint32_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    benchmark::DoNotOptimize(idx.data());
  });
}

void bm_sort(benchmark::State& state, params p) {
  const auto& v = input(p.n, p.dist);
  std::vector<std::uint32_t> idx(p.n);
  timed(state, p, nullptr, {{"nth_element", "speedup_vs_nth_element"}}, [&] {
    std::iota(idx.begin(), idx.end(), 0u);
    std::sort(idx.begin(), idx.end(),
              [&](std::uint32_t a, std::uint32_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
    benchmark::DoNotOptimize(idx.data());
  });
}

void bm_exact_topk(benchmark::State& state, params p) {
  const auto& v = input(p.n, p.dist);
  const std::size_t k = p.k();
  const gradcomp::cpu_backend cpu;
  std::vector<std::uint32_t> out(k);
  std::vector<std::byte> ws(gradcomp::exact_topk_workspace_bytes<float>(cpu, p.n, k).value());
  bool ok = true;
  timed(state, p, "exact_topk",
        {{"nth_element", "speedup_vs_nth_element"}, {"stream", "ratio_to_stream"}}, [&] {
    auto r = gradcomp::exact_topk(cpu, gradcomp::span<const float>(v.data(), v.size()), k,
                                  gradcomp::span<std::uint32_t>(out.data(), out.size()),
                                  gradcomp::span<std::byte>(ws.data(), ws.size()));
    ok &= r && *r == k;
    benchmark::DoNotOptimize(out.data());
  });
  if (!ok) state.SkipWithError("exact_topk failed");
}

void bm_sampled(benchmark::State& state, params p) {
  const auto& v = input(p.n, p.dist);
  const std::size_t k = p.k();
  const gradcomp::cpu_backend cpu;
  const gradcomp::sampled_threshold_config cfg;
  std::vector<std::uint32_t> out(k);
  std::vector<std::byte> ws(gradcomp::sampled_threshold_workspace_bytes<float>(cpu, cfg, p.n, k).value());
  double kept = 0.0;
  std::uint64_t seed = 1;
  bool ok = true;
  timed(state, p, nullptr,
        {{"nth_element", "speedup_vs_nth_element"},
         {"exact_topk", "speedup_vs_exact_topk"},
         {"stream", "ratio_to_stream"}},
        [&] {
          auto r = gradcomp::sampled_threshold_select(
              cpu, gradcomp::span<const float>(v.data(), v.size()), k, cfg, seed++,
              gradcomp::span<std::uint32_t>(out.data(), out.size()),
              gradcomp::span<std::byte>(ws.data(), ws.size()));
          ok &= static_cast<bool>(r);
          if (r) kept += static_cast<double>(r->count);
          benchmark::DoNotOptimize(out.data());
        });
  if (!ok) state.SkipWithError("sampled_threshold_select failed");
  state.counters["kept_over_k"] = kept / double(state.iterations()) / double(k);
}

// Registration order matters: the references of an input run before what is compared to them.
const bool registered = [] {
  for (std::size_t n : {std::size_t(1) << 16, std::size_t(1) << 20, std::size_t(1) << 24, std::size_t(1) << 26})
    for (double density : {0.001, 0.01})
      for (distribution dist : {distribution::gaussian, distribution::heavy}) {
        const params p{n, density, dist};
        const std::string tail = "/float/%s/" + std::to_string(n) + "/density:" +
                                 (density == 0.001 ? std::string("0.001") : std::string("0.01")) + "/" +
                                 name_of(dist);
        auto name = [&](const char* component, const char* backend) {
          std::string s = std::string("BM_") + component + tail;
          return s.replace(s.find("%s"), 2, backend);
        };
        benchmark::RegisterBenchmark(name("stream_read", "reference").c_str(), bm_stream_read, p)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(name("nth_element", "std").c_str(), bm_nth_element, p)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(name("partial_sort", "std").c_str(), bm_partial_sort, p)->Unit(benchmark::kMillisecond);
        auto* sort = benchmark::RegisterBenchmark(name("sort", "std").c_str(), bm_sort, p);
        sort->Unit(benchmark::kMillisecond);
        if (n > (std::size_t(1) << 24)) sort->Iterations(1);
        benchmark::RegisterBenchmark(name("exact_topk", "cpu").c_str(), bm_exact_topk, p)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(name("sampled_threshold", "cpu").c_str(), bm_sampled, p)->Unit(benchmark::kMillisecond);
      }
  return true;
}();

}  // namespace
