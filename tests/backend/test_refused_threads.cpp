// A worker thread the system refuses: the pool stops the workers it had started (it used to
// destroy its condition variable under them, and the caller hung), and every compressor's
// `compress` returns errc::resource_unavailable with nothing modified, on a new compressor and
// on a copy in the middle of a run (copies start without threads). The refusal is made by
// gradcomp::detail::cpu::worker_thread_limit(), which throws what std::thread throws.
#include <atomic>
#include <cstddef>
#include <system_error>
#include <vector>

#include <doctest/doctest.h>

#include <gradcomp/cpu/task_pool.hpp>
#include <gradcomp/gradcomp.hpp>

#include "backend/conformance.hpp"

namespace {

using gradcomp::detail::cpu::worker_thread_limit;

// Sets the limit for its lifetime.
struct thread_limit {
  explicit thread_limit(std::size_t n) { worker_thread_limit().store(n); }
  ~thread_limit() { worker_thread_limit().store(0); }
  thread_limit(const thread_limit&) = delete;
  thread_limit& operator=(const thread_limit&) = delete;
};

// The conformance model's gradients of step s as views, compressed; the error when refused.
template <class C>
gradcomp::errc compress_step(C& c, std::size_t s, std::vector<std::vector<float>>& keep) {
  keep = gradcomp_test::conformance_gradients<float>(s);
  std::vector<gradcomp::span<const float>> views;
  for (const auto& g : keep) views.emplace_back(g.data(), g.size());
  const auto r = c.compress(views);
  return r ? gradcomp::errc::ok : r.error();
}

// `make()` builds a compressor with 4 threads. A refused thread fails its first step and a
// copy's, which then run as the twin that was never refused: the same messages and snapshot.
template <class Make>
void check_refusal(Make make) {
  auto tested = make();
  auto twin = make();
  for (const auto& x : gradcomp_test::conformance_model()) {
    tested.add_tensor(x.name, x.shape);
    twin.add_tensor(x.name, x.shape);
  }
  const gradcomp::cpu_backend cpu;
  std::vector<std::vector<float>> grads;
  {
    const thread_limit refuse(2);
    CHECK(compress_step(tested, 0, grads) == gradcomp::errc::resource_unavailable);
    CHECK(tested.stats().error() == gradcomp::errc::invalid_argument);  // no step was issued
  }
  CHECK(gradcomp_test::compress_and_encode(tested, cpu, 0) == gradcomp_test::compress_and_encode(twin, cpu, 0));
  auto copy = tested;  // without threads: its next step starts them
  {
    const thread_limit refuse(1);
    CHECK(compress_step(copy, 1, grads) == gradcomp::errc::resource_unavailable);
    CHECK(compress_step(tested, 1, grads) == gradcomp::errc::ok);  // its threads were started
  }
  const auto expected = gradcomp_test::compress_and_encode(twin, cpu, 1);
  CHECK(gradcomp_test::compress_and_encode(copy, cpu, 1) == expected);
  CHECK(gradcomp::save_snapshot(copy) == gradcomp::save_snapshot(twin));
}

}  // namespace

TEST_CASE("task_pool: a refused worker thread stops those started and rethrows, without hanging") {
  for (const std::size_t limit : {1u, 3u, 6u}) {
    CAPTURE(limit);
    const thread_limit refuse(limit);
    bool thrown = false;
    try {
      gradcomp::detail::cpu::task_pool pool(8);
    } catch (const std::system_error& e) {
      thrown = true;
      CHECK((e.code() == std::errc::resource_unavailable_try_again));
    }
    CHECK(thrown);
  }
  // Without the limit, a pool of the same size runs every item once.
  gradcomp::detail::cpu::task_pool pool(8);
  std::vector<std::atomic<int>> ran(1000);
  auto f = [&](std::size_t item, std::size_t) { ran[item].fetch_add(1); };
  pool.run(ran.size(), f);
  for (const auto& r : ran) CHECK(r.load() == 1);
}

// A maker of Compressor with `cfg` and 4 threads.
template <class Compressor, class Config>
auto with_threads(Config cfg) {
  cfg.threads = 4;
  return [cfg] { return Compressor(cfg); };
}

TEST_CASE("a refused worker thread: every compressor's compress returns resource_unavailable, nothing modified") {
  gradcomp::dgc_config dgc;
  dgc.num_workers = 4;
  gradcomp::ef_signsgd_config ef;
  ef.learning_rate = 0.02;
  SUBCASE("dgc") { check_refusal(with_threads<gradcomp::dgc_compressor<float>>(dgc)); }
  SUBCASE("ef_signsgd") { check_refusal(with_threads<gradcomp::ef_signsgd_compressor<float>>(ef)); }
  SUBCASE("terngrad") {
    check_refusal(with_threads<gradcomp::terngrad_compressor<float>>(gradcomp::terngrad_config{}));
  }
  SUBCASE("onebit_sgd") {
    check_refusal(with_threads<gradcomp::onebit_sgd_compressor<float>>(gradcomp::onebit_sgd_config{}));
  }
  SUBCASE("qsgd") { check_refusal(with_threads<gradcomp::qsgd_compressor<float>>(gradcomp::qsgd_config{})); }
  SUBCASE("adacomp") { check_refusal(with_threads<gradcomp::adacomp_compressor<float>>(gradcomp::adacomp_config{})); }
}
