// Error types shared by the core, the CLI and plugins. The CLI maps them to exit codes.
#pragma once

#include <stdexcept>
#include <string>

#include <boost/config.hpp>

namespace masque {

// A bad pipeline, parameter, file or command line: nothing ran (exit code 2).
class BOOST_SYMBOL_VISIBLE ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One input record cannot be processed (bad UTF-8, too long, empty...). The record gets an
// error object in its place and the run goes on (exit code 1 at the end).
class BOOST_SYMBOL_VISIBLE RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Anything else that stops a run after it started (exit code 3).
class BOOST_SYMBOL_VISIBLE RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit codes of the masque executable (documented in --help and README).
enum ExitCode : int {
  kExitOk = 0,
  kExitRecordsFailed = 1,
  kExitUsage = 2,
  kExitRuntime = 3,
};

}  // namespace masque
