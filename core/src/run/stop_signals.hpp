// The signals that stop a run cleanly: the run stops reading, writes only complete records and
// exits 128+N. Every one whose default action ends the process is here, so none can tear a
// record (SIGPIPE is ignored instead: a closed output is reported as a write error).
#pragma once

#include <signal.h>

#include <array>

namespace masque {

inline constexpr std::array<int, 6> kStopSignals = {SIGHUP,  SIGINT,  SIGQUIT,
                                                    SIGTERM, SIGUSR1, SIGUSR2};

// The stop signals, and SIGPIPE when `with_pipe`, as a set for pthread_sigmask.
inline sigset_t stop_signal_set(bool with_pipe) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals) sigaddset(&set, sig);
  if (with_pipe) sigaddset(&set, SIGPIPE);
  return set;
}

}  // namespace masque
