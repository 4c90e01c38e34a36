// "No allocation per call": the hot-path calls, given their workspace, never reach the global
// allocator. This file replaces the global operator new / delete of the test binary with versions
// that count the allocations made while a counting scope is open (and otherwise behave as usual).
#include <gradcomp/dgc/compressor.hpp>
#include <gradcomp/select/exact_topk.hpp>
#include <gradcomp/select/sampled_threshold.hpp>
#include <gradcomp/wire/encode.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "support/inputs.hpp"

namespace {

std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};

void* allocate(std::size_t size, std::size_t alignment) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else {
    p = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

// Allocations made by f() on any thread.
template <class F>
std::size_t allocations_during(F&& f) {
  allocations.store(0);
  counting.store(true);
  f();
  counting.store(false);
  return allocations.load();
}

}  // namespace

// Every form is replaced, so that all memory comes from malloc and goes back to free (a sanitizer
// checks that new and delete match).
void* operator new(std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void* operator new[](std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void* operator new(std::size_t size, std::align_val_t a) { return allocate(size, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t size, std::align_val_t a) { return allocate(size, static_cast<std::size_t>(a)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return allocate(size, alignof(std::max_align_t));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& t) noexcept { return operator new(size, t); }
void* operator new(std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return allocate(size, static_cast<std::size_t>(a));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return operator new(size, a, t);
}
// GCC inlines these into the tests and, from -O1 on, takes the free() of memory from the
// replaced operator new for a mismatch (-Wmismatched-new-delete): both are this file's malloc and
// free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using gradcomp::span;
using namespace gradcomp_test;

TEST_CASE("no allocation: the counting allocator sees allocations") {
  // The check below would pass vacuously if the replacement were not in effect.
  const std::size_t n = allocations_during([] {
    std::vector<int> v(100);
    v[0] = 1;
  });
  CHECK(n >= 1);
}

TEST_CASE("no allocation: selection with a workspace") {
  const auto v = random_vector<float>(1 << 18, dist::student_t, 5);
  const span<const float> values(v.data(), v.size());
  const gradcomp::cpu_backend cpu;
  for (const std::size_t k : {std::size_t(262), std::size_t(2621)}) {
    CAPTURE(k);
    std::vector<std::uint32_t> out(k);
    const gradcomp::sampled_threshold_config cfg;
    std::vector<std::byte> ws(std::max(gradcomp::exact_topk_workspace_bytes<float>(cpu, v.size(), k).value(),
                                       gradcomp::sampled_threshold_workspace_bytes<float>(cpu, cfg, v.size(), k).value()));
    bool ok = true;
    const std::size_t n = allocations_during([&] {
      for (std::uint64_t seed = 0; seed < 3; ++seed) {
        ok &= static_cast<bool>(gradcomp::exact_topk(cpu, values, k, span<std::uint32_t>(out.data(), k),
                                                     span<std::byte>(ws.data(), ws.size())));
        ok &= static_cast<bool>(gradcomp::sampled_threshold_select(cpu, values, k, cfg, seed,
                                                                   span<std::uint32_t>(out.data(), k),
                                                                   span<std::byte>(ws.data(), ws.size())));
      }
    });
    CHECK(ok);
    CHECK(n == 0);
  }
}

TEST_CASE("no allocation: dgc_compressor::compress and encode_message after the first step") {
  for (const std::size_t threads : {std::size_t(1), std::size_t(2)}) {
    for (const bool clip : {false, true}) {
      CAPTURE(threads);
      CAPTURE(clip);
      gradcomp::dgc_config cfg;
      cfg.threads = threads;
      cfg.clip_norm = clip ? 1.0 : 0.0;
      cfg.num_workers = 4;
      // Warm-up densities change from step to step, so later steps take every selection path.
      cfg.schedule = gradcomp::warmup_schedule::from_list({0.25, 0.05, 0.01, 0.001}, gradcomp::schedule_unit::step);
      gradcomp::dgc_compressor<float> c(cfg);
      const std::vector<std::vector<std::size_t>> shapes = {{256, 300}, {64, 1000}, {300}, {3, 3}};
      std::vector<std::vector<float>> grads;
      std::vector<span<const float>> views;
      for (std::size_t t = 0; t < shapes.size(); ++t) {
        std::string name = "t";  // two steps: GCC 12 warns falsely (-Wrestrict) on "t" + to_string(t)
        name += std::to_string(t);
        c.add_tensor(name, shapes[t]);
        std::size_t n = 1;
        for (auto d : shapes[t]) n *= d;
        grads.push_back(random_vector<float>(n, dist::gaussian, 40 + t));
        views.emplace_back(grads.back().data(), n);
      }
      gradcomp::wire::encode_options opt;
      std::vector<std::byte> message(c.max_message_bytes(opt));
      REQUIRE(c.compress(views));  // the first call may start the compressor's threads
      bool ok = true;
      const std::size_t n = allocations_during([&] {
        for (int step = 0; step < 6; ++step) {
          ok &= static_cast<bool>(c.compress(views));
          ok &= static_cast<bool>(c.encode_message(opt, span<std::byte>(message.data(), message.size())));
        }
      });
      CHECK(ok);
      CHECK(n == 0);
    }
  }
}

TEST_CASE("no allocation: dgc_aggregator receiving encoded messages, and finish") {
  gradcomp::dgc_config cfg;
  cfg.schedule = gradcomp::warmup_schedule::constant(0.01);
  gradcomp::dgc_compressor<float> c(cfg);
  const std::vector<std::vector<std::size_t>> shapes = {{256, 300}, {64, 1000}, {300}};
  std::vector<std::vector<float>> grads;
  std::vector<span<const float>> views;
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    c.add_tensor(std::string(1, static_cast<char>('a' + t)), shapes[t]);
    std::size_t n = 1;
    for (auto d : shapes[t]) n *= d;
    grads.push_back(random_vector<float>(n, dist::gaussian, 70 + t));
    views.emplace_back(grads.back().data(), n);
  }
  gradcomp::dgc_aggregator<float> agg(c);
  for (const bool checksum : {false, true}) {
    CAPTURE(checksum);
    gradcomp::wire::encode_options opt;
    opt.checksum = checksum;
    std::vector<std::byte> message(c.max_message_bytes(opt));
    REQUIRE(c.compress(views));
    const auto bytes = c.encode_message(opt, span<std::byte>(message.data(), message.size()));
    REQUIRE(bytes);
    const span<const std::byte> msg(message.data(), *bytes);
    bool ok = true;
    const std::size_t n = allocations_during([&] {
      for (int step = 0; step < 3; ++step) {
        agg.begin();
        for (int worker = 0; worker < 4; ++worker) ok &= static_cast<bool>(agg.add(msg));
        ok &= static_cast<bool>(agg.finish(4));
      }
    });
    CHECK(ok);
    CHECK(n == 0);
  }
}
