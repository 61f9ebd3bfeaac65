// Tokenizer throughput: masque's bpe (GPT-2), wordpiece (bert-base-uncased) and tokenizer-json
// (the six files of ../shared/tokenizers-json) plugins, one thread, encoding a corpus line by
// line (one record per line, as `masque run` does).
//
//   masque-bench-tokenizers corpus OUT [--mb N]    write a deterministic corpus of about N MB
//   masque-bench-tokenizers run CORPUS [--reps N] [--only NAMES]
//                                                  time the tokenizers, print RESULT lines
//   masque-bench-tokenizers load FOLDER            time loading tokenizer.json, print LOAD
//                                                  (seconds, resident memory it added)
//
// RESULT <name> <median MB/s, wall clock> <median MB/s, thread CPU time> <first-pass MB/s>
//        <tokens> <checksum of all ids>
// bench/tokenizers/run.sh runs this and tiktoken (bench.mjs) on the same corpus and prints the
// table; the checksums show that bpe and tiktoken produced the same ids.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <malloc.h>
#include <unistd.h>

#include "tokenizer_loader.hpp"

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// English-like text: words drawn with a Zipf-like law from bert-base-uncased's whole-word
// entries (roughly in frequency order), capitalized sentence starts, punctuation, numbers,
// some contractions, and one line in twelve in another script or with emoji.
int write_corpus(const std::string& out_path, double megabytes) {
  const std::string vocab =
      read_file(std::string(MASQUE_SHARED_DIR) + "/tokenizers/bert-base-uncased/vocab.txt");
  std::vector<std::string> words;
  std::istringstream in(vocab);
  std::string line;
  int id = 0;
  while (std::getline(in, line)) {
    if (id++ < 1996 || line.rfind("##", 0) == 0 || line.empty()) continue;
    bool alpha = true;
    for (char c : line) alpha &= (c >= 'a' && c <= 'z');
    if (alpha) words.push_back(line);
  }
  static const char* const kOther[] = {"北京欢迎你，今天天气很好。",
                                       "Съешь же ещё этих мягких французских булок.",
                                       "اللغة العربية جميلة جدا",
                                       "Café, naïve, résumé, Zürich — déjà vu!",
                                       "I 😁 love 🦙 llamas and 🚀 rockets ✅",
                                       "Γειά σου Κόσμε!",
                                       "日本語のテキスト、한국어 문장.",
                                       "Cửa Việt, Hà Nội, tiếng Việt."};
  static const char* const kPunct[] = {",", ",", ",", ";", ":", " -", " (", ")"};
  static const char* const kEnd[] = {".", ".", ".", ".", "?", "!", "...", "\""};
  static const char* const kContraction[] = {"'s", "n't", "'re", "'ll", "'ve", "'d", "'m"};
  std::uint64_t rng = 20250101;
  auto uniform = [&](std::uint64_t n) { return splitmix64(rng) % n; };
  auto zipf_word = [&]() -> const std::string& {
    // rank ~ exp(uniform * ln N): density ~ 1/rank
    const double u = static_cast<double>(splitmix64(rng) >> 11) / 9007199254740992.0;
    const auto rank = static_cast<std::size_t>(std::exp(u * std::log(double(words.size())))) - 1;
    return words[std::min(rank, words.size() - 1)];
  };
  const auto target = static_cast<std::size_t>(megabytes * 1e6);
  std::string text;
  text.reserve(target + 4096);
  while (text.size() < target) {
    std::string para;
    const std::uint64_t sentences = 1 + uniform(5);
    for (std::uint64_t s = 0; s < sentences; ++s) {
      if (uniform(12) == 0) {
        para += kOther[uniform(std::size(kOther))];
        para += ' ';
        continue;
      }
      const std::uint64_t n = 4 + uniform(18);
      for (std::uint64_t w = 0; w < n; ++w) {
        std::string word = zipf_word();
        if (w == 0)
          word[0] = static_cast<char>(word[0] - 32);
        else
          para += ' ';
        if (uniform(40) == 0) word = std::to_string(uniform(uniform(2) ? 100 : 100000));
        para += word;
        if (uniform(60) == 0) para += kContraction[uniform(std::size(kContraction))];
        if (w + 1 < n && uniform(10) == 0) para += kPunct[uniform(std::size(kPunct))];
      }
      para += kEnd[uniform(std::size(kEnd))];
      para += ' ';
    }
    para.pop_back();
    text += para;
    text += '\n';
  }
  std::ofstream out(out_path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + out_path);
  std::fprintf(stderr, "wrote %s: %zu bytes\n", out_path.c_str(), text.size());
  return 0;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    lines.emplace_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

struct Pass {
  double seconds = 0, cpu_seconds = 0;
  std::uint64_t tokens = 0, checksum = 0;
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Pass encode_all(const masque::Tokenizer& tok, const std::vector<std::string>& lines) {
  Pass p;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
  const double cpu_start = thread_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& line : lines) {
    const masque::Encoding e = tok.encode(line, false);
    p.tokens += e.ids.size();
    for (masque::TokenId id : e.ids) h = (h ^ static_cast<std::uint32_t>(id)) * 1099511628211ull;
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  p.cpu_seconds = thread_cpu_seconds() - cpu_start;
  p.checksum = h;
  return p;
}

// Resident memory of this process in bytes (/proc/self/statm).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

int load(const std::string& folder) {
  const std::size_t before = resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  auto tok =
      masque::test::make_tokenizer("tokenizer-json", {{"path", folder}}, MASQUE_BUILD_PLUGIN_DIR);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  malloc_trim(0);  // what the tokenizer keeps, not what loading used on the way
  const std::size_t after = resident_bytes();
  std::printf("LOAD %s %.3f %.1f %d\n", folder.c_str(), seconds,
              static_cast<double>(after - before) / 1048576.0, tok->vocab_size());
  return 0;
}

void bench(const char* name, const std::string& plugin, const std::string& folder,
           const std::vector<std::string>& lines, std::size_t bytes, int reps) {
  auto tok = masque::test::make_tokenizer(plugin, {{"path", folder}}, MASQUE_BUILD_PLUGIN_DIR);
  const Pass first = encode_all(*tok, lines);  // empty caches
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const Pass p = encode_all(*tok, lines);
    if (p.checksum != first.checksum) throw std::runtime_error("ids changed between passes");
    wall.push_back(static_cast<double>(bytes) / 1e6 / p.seconds);
    cpu.push_back(static_cast<double>(bytes) / 1e6 / p.cpu_seconds);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("RESULT %s %.2f %.2f %.2f %llu %016llx\n", name, wall[wall.size() / 2],
              cpu[cpu.size() / 2], static_cast<double>(bytes) / 1e6 / first.seconds,
              static_cast<unsigned long long>(first.tokens),
              static_cast<unsigned long long>(first.checksum));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 3 && std::strcmp(argv[1], "corpus") == 0) {
      double mb = 8;
      for (int i = 3; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--mb") == 0) mb = std::stod(argv[i + 1]);
      return write_corpus(argv[2], mb);
    }
    if (argc >= 3 && std::strcmp(argv[1], "load") == 0) return load(argv[2]);
    if (argc >= 3 && std::strcmp(argv[1], "run") == 0) {
      int reps = 5;
      std::string only;  // comma-separated RESULT names; empty: all
      for (int i = 3; i + 1 < argc; ++i) {
        if (std::strcmp(argv[i], "--reps") == 0) reps = std::stoi(argv[i + 1]);
        if (std::strcmp(argv[i], "--only") == 0) {
          only.assign(1, ',');
          only.append(argv[i + 1]);
          only.push_back(',');
        }
      }
      auto wanted = [&](const std::string& name) {
        std::string key(1, ',');
        key.append(name);
        key.push_back(',');
        return only.empty() || only.find(key) != std::string::npos;
      };
      const std::string text = read_file(argv[2]);
      const auto lines = lines_of(text);
      std::size_t bytes = 0;
      for (const auto& l : lines) bytes += l.size();
      const std::string tokenizers = std::string(MASQUE_SHARED_DIR) + "/tokenizers/";
      if (wanted("masque-bpe-gpt2"))
        bench("masque-bpe-gpt2", "bpe", tokenizers + "gpt2", lines, bytes, reps);
      if (wanted("masque-wordpiece-bert-base-uncased"))
        bench("masque-wordpiece-bert-base-uncased", "wordpiece", tokenizers + "bert-base-uncased",
              lines, bytes, reps);
      for (const char* model :
           {"llama3", "qwen3", "deepseek-v3", "gemma3", "phi-3-mini", "t5-small"}) {
        const std::string name = std::string("masque-json-") + model;
        if (wanted(name))
          bench(name.c_str(), "tokenizer-json",
                std::string(MASQUE_SHARED_DIR) + "/tokenizers-json/" + model, lines, bytes, reps);
      }
      return 0;
    }
    std::fprintf(stderr,
                 "usage: %s corpus OUT [--mb N] | run CORPUS [--reps N] [--only NAMES] | load "
                 "FOLDER\n",
                 argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
