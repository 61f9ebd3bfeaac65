// A fixed set of worker threads, each running oneDNN with its own intra-op thread count.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace masque {

class ThreadPool {
 public:
  // `workers` threads; each sets its OpenMP/oneDNN thread count to `intra_threads` and blocks
  // SIGINT/SIGTERM/SIGPIPE so that signals reach the main thread.
  ThreadPool(int workers, int intra_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void submit(std::function<void()> job);
  // Jobs waiting or running.
  std::size_t pending() const;

 private:
  void work(int intra_threads);
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::size_t running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace masque
