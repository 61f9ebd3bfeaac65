// CLD2 (Compact Language Detector 2, Debian libcld2-dev) on a test set of `text TAB lang` lines
// (scripts/langid_data.py's test.tsv): its answer per sentence as JSON lines in input order, and
// on stderr the sentences per second over 1 or N threads (the sentences split into N contiguous
// shares; CLD2's detector is reentrant). Accuracy is computed by bench/langid/score.py from this
// output and masque's, so both are scored by one program.
//
//   masque-bench-cld2 TEST.tsv [THREADS] > cld2.jsonl
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "compact_lang_det.h"

namespace {

struct Answer {
  std::string code;
  bool reliable = false;
};

// CLD2's code for the language of `text`, mapped to the locale codes of the test set (CLD2 says
// "no" for Norwegian Bokmål, "zh-Hant" for traditional Chinese).
Answer detect(const std::string& text) {
  bool reliable = false;
  const CLD2::Language lang =
      CLD2::DetectLanguage(text.data(), static_cast<int>(text.size()), true, &reliable);
  std::string code = CLD2::LanguageCode(lang);
  if (code == "no") code = "nb";
  if (code == "zh-Hant") code = "zh";
  return {code, reliable};
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: masque-bench-cld2 TEST.tsv [THREADS]\n";
    return 2;
  }
  const int threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "masque-bench-cld2: cannot open " << argv[1] << "\n";
    return 2;
  }
  std::vector<std::string> texts;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) texts.push_back(line.substr(0, line.find('\t')));
  std::vector<Answer> answers(texts.size());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const std::size_t begin = texts.size() * t / threads, end = texts.size() * (t + 1) / threads;
      for (std::size_t i = begin; i < end; ++i) answers[i] = detect(texts[i]);
    });
  for (auto& th : pool) th.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (std::size_t i = 0; i < texts.size(); ++i)
    std::cout << "{\"id\": " << i << ", \"label\": " << json_string(answers[i].code)
              << ", \"reliable\": " << (answers[i].reliable ? "true" : "false") << "}\n";
  std::fprintf(stderr, "cld2: %zu sentences, %d thread(s), %.3f s, %.0f sentences/s\n",
               texts.size(), threads, seconds, texts.size() / seconds);
  return 0;
}
