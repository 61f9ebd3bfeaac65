// Intra-op threads of the calling thread.
//
// masque usually runs several batches in parallel on worker threads, each worker using ONE
// oneDNN/OpenMP thread (Debian's libdnnl runs on GNU OpenMP, whose threads sleep and wake per
// small op: two intra-op threads can be much slower than one on small models). A worker that
// wants more calls set_thread_count(n) once. The setting is per calling thread (OpenMP's
// nthreads-var). Layers key their cached oneDNN primitives by this count, because a primitive
// must run with the thread count it was created with. Whatever the count, ops below about half
// a millisecond of work (and matmuls of fewer than 16 rows over less than 4 MB of weights) run
// on the calling thread alone.
#pragma once

#include <functional>

namespace masque {

// Sets the number of intra-op threads used by ops called from this thread (n >= 1).
void set_thread_count(int n);
// The number of intra-op threads ops called from this thread will use.
int thread_count();

// Sets the calling thread's intra-op thread count for a scope and restores it afterwards.
class ThreadScope {
 public:
  explicit ThreadScope(int n);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_;
};

// Runs two independent jobs of about equal work (a bidirectional RNN's two directions) at the
// same time, each on one intra-op thread, when the calling thread has two or more; else `first`
// then `second`. An exception from either is rethrown after both have ended.
void run_pair(const std::function<void()>& first, const std::function<void()>& second);

}  // namespace masque
