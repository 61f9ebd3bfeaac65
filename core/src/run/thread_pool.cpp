#include "run/thread_pool.hpp"

#include <omp.h>
#include <pthread.h>
#include <signal.h>

#include "run/stop_signals.hpp"

namespace masque {

ThreadPool::ThreadPool(int workers, int intra_threads) {
  const sigset_t block = stop_signal_set(true);
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &block, &old);  // inherited by the new threads
  for (int i = 0; i < workers; ++i)
    threads_.emplace_back([this, intra_threads] { work(intra_threads); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

std::size_t ThreadPool::pending() const {
  std::lock_guard lock(mutex_);
  return jobs_.size() + running_;
}

void ThreadPool::work(int intra_threads) {
  omp_set_num_threads(intra_threads);
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      ++running_;
    }
    job();
    std::lock_guard lock(mutex_);
    --running_;
  }
}

}  // namespace masque
