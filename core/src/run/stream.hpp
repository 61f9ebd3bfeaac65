// --stream: the text of lm-generate and seq2seq records written as the tokens are chosen, in
// input order. One StreamSink per process (installed by the CLI before the task is made): the
// tasks' ModelStepper reports each record's chosen tokens, the task says how ids become text,
// and the ordered writer hands over each finished record. The record at the head of the output
// (the next one in input order) is written as it grows; the others wait in memory until they
// reach the head. Text is written one token behind the decoder (a later token can change how
// the earlier ones read, e.g. a UTF-8 character split over byte tokens), and the finished
// record's own text completes the line, so the output equals a run without --stream.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "io/output.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

class StreamSink {
 public:
  using Detokenize = std::function<std::string(std::span<const TokenId>)>;

  // The sink of this process, or nullptr (no --stream).
  static StreamSink* active();
  // Makes `sink` the process's sink (nullptr: none). The caller keeps it alive.
  static void install(StreamSink* sink);

  // Set by the task: how a record's ids read as text (its target tokenizer).
  void set_detokenize(Detokenize detokenize);
  // Set by the ordered writer when it starts: where text goes (the run's output) and the id of
  // the first record it writes; nullptr when it ends.
  void attach(OutputWriter* out, std::uint64_t first_record);

  // Decoders that keep one hypothesis per record report the tokens each step chose, one per
  // record of `records` (record ids).
  void tokens(std::span<const std::uint64_t> records, std::span<const TokenId> tokens);
  // The ordered writer: record `id` is finished and `line` (its text and '\n') is what a run
  // without --stream writes for it. False when the output failed.
  bool finish(std::uint64_t id, const std::string& line);
  // True when the record at the head has text written but is not finished (the run stopped
  // in the middle of it).
  bool head_in_part();

 private:
  struct Record {
    std::vector<TokenId> tokens;
    std::string written;  // the text written so far
  };
  // Writes the head record's new stable text.
  bool emit_head();

  std::mutex mutex_;
  Detokenize detokenize_;
  OutputWriter* out_ = nullptr;
  std::uint64_t head_ = 0;
  std::map<std::uint64_t, Record> records_;
  bool unfinished_ = false;  // finish() failed after part of the head's text was written
};

}  // namespace masque
