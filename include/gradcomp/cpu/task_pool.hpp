// A fixed set of worker threads that run the items of one job at a time, for compressors that
// spread their tensors over threads. The calling thread works too, so a pool of `threads` uses
// threads - 1 workers. Running a job allocates nothing. Which thread runs an item is not fixed;
// callers make every item's result independent of it (each thread has its own scratch memory).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace gradcomp {
namespace detail {
namespace cpu {

// Tests only: a pool refuses to start more worker threads than this (0: no limit), as the system
// does when it refuses one (std::thread throws std::system_error), so that the refusal's path can
// be tested without exhausting the system's threads.
inline std::atomic<std::size_t>& worker_thread_limit() noexcept {
  static std::atomic<std::size_t> limit{0};
  return limit;
}

class task_pool {
 public:
  // Starts threads - 1 workers. When the system refuses one, the workers already started are
  // stopped and joined, and the std::system_error is rethrown.
  explicit task_pool(std::size_t threads) {
    workers_.reserve(threads > 1 ? threads - 1 : 0);  // emplace_back below never reallocates
    try {
      const std::size_t limit = worker_thread_limit().load(std::memory_order_relaxed);
      for (std::size_t w = 1; w < threads; ++w) {
        if (limit != 0 && workers_.size() >= limit)
          throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                                  "gradcomp: worker thread refused (worker_thread_limit)");
        workers_.emplace_back([this, w] { work(w); });
      }
    } catch (...) {
      stop();
      throw;
    }
  }
  task_pool(const task_pool&) = delete;
  task_pool& operator=(const task_pool&) = delete;
  ~task_pool() { stop(); }

  std::size_t threads() const noexcept { return workers_.size() + 1; }

  // Calls f(item, thread) for every item in [0, count), thread in [0, threads()), and returns
  // when all calls have returned. f must not throw.
  template <class F>
  void run(std::size_t count, F& f) {
    if (workers_.empty() || count <= 1) {
      for (std::size_t i = 0; i < count; ++i) f(i, std::size_t(0));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = [](void* ctx, std::size_t item, std::size_t thread) { (*static_cast<F*>(ctx))(item, thread); };
      ctx_ = &f;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      busy_ = workers_.size();
      ++generation_;
    }
    wake_.notify_all();
    drain(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
  }

 private:
  // Wakes every worker to return, and joins them.
  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void drain(std::size_t thread) {
    for (std::size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < count_;
         i = next_.fetch_add(1, std::memory_order_relaxed))
      fn_(ctx_, i, thread);
  }

  void work(std::size_t thread) {
    std::size_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain(thread);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --busy_;
      }
      done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stop_ = false;
  std::size_t generation_ = 0;
  std::size_t busy_ = 0;
  void (*fn_)(void*, std::size_t, std::size_t) = nullptr;
  void* ctx_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
};

// Holds a task_pool created on first use. Copies start without one, and an object assigned to
// drops its own (threads are never copied); get(threads) always returns a pool of exactly
// `threads` threads, replacing one of another size, so the pool always matches the owner's
// configuration and the scratch memory sized for it.
class lazy_task_pool {
 public:
  lazy_task_pool() = default;
  lazy_task_pool(const lazy_task_pool&) noexcept {}
  lazy_task_pool& operator=(const lazy_task_pool& other) noexcept {
    if (this != &other) pool_.reset();
    return *this;
  }
  lazy_task_pool(lazy_task_pool&&) noexcept = default;
  lazy_task_pool& operator=(lazy_task_pool&&) noexcept = default;

  // Throws std::system_error when the system refuses a thread (and holds no pool then).
  task_pool& get(std::size_t threads) {
    if (!pool_ || pool_->threads() != threads) {
      pool_.reset();
      pool_ = std::make_unique<task_pool>(threads);
    }
    return *pool_;
  }
  // Threads of the current pool, 0 before the first get.
  std::size_t threads() const noexcept { return pool_ ? pool_->threads() : 0; }

 private:
  std::unique_ptr<task_pool> pool_;
};

}  // namespace cpu
}  // namespace detail
}  // namespace gradcomp
