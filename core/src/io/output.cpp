#include "io/output.hpp"

#include <cerrno>
#include <cstring>

#include "masque/error.hpp"

namespace masque {

OutputFormat parse_output_format(const std::string& name) {
  if (name == "jsonl" || name == "json") return OutputFormat::jsonl;
  if (name == "text" || name == "plain") return OutputFormat::text;
  if (name == "tsv") return OutputFormat::tsv;
  if (name == "nbest") return OutputFormat::nbest;
  throw ConfigError("--format: expected jsonl, text, tsv or nbest, got '" + name + "'");
}

Result error_result(std::uint64_t id, const std::string& message) {
  Result r;
  r.id = id;
  r.error = message;
  r.object = nlohmann::ordered_json::object();
  r.object["id"] = id;
  r.object["error"] = message;
  return r;
}

namespace {

std::string escape_tsv(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\t')
      out += "\\t";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\\')
      out += "\\\\";
    else
      out += c;
  }
  return out;
}

std::string cell(const nlohmann::ordered_json& v) {
  if (v.is_string()) return escape_tsv(v.get<std::string>());
  if (v.is_null()) return "";
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string render(const Result& result, OutputFormat format,
                   const std::vector<std::string>& tsv_columns) {
  const std::string id = std::to_string(result.id);
  switch (format) {
    case OutputFormat::jsonl:
      return result.object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    case OutputFormat::text:
      if (!result.error.empty()) return "\n";  // keep one line per record; the error is on stderr
      return result.text + "\n";
    case OutputFormat::tsv: {
      std::string line = id;
      if (!result.error.empty()) {
        line.append("\terror\t").append(escape_tsv(result.error)).append("\n");
        return line;
      }
      for (const auto& c : tsv_columns) {
        auto it = result.object.find(c);
        line.append("\t").append(it == result.object.end() ? std::string() : cell(*it));
      }
      line.append("\n");
      return line;
    }
    case OutputFormat::nbest: {
      // Marian/Moses n-best lines: id ||| text ||| score, escaped as TSV cells so that each
      // hypothesis is one line (a generated text may hold newlines; --resume reads lines).
      std::string out;
      auto add = [&](const std::string& text, const std::string& score) {
        out.append(id).append(" ||| ").append(escape_tsv(text)).append(" ||| ");
        out.append(escape_tsv(score)).append("\n");
      };
      if (!result.error.empty())
        add("", "error: " + result.error);
      else if (result.nbest.empty())
        add(result.text, "0");
      char score[64];
      for (const auto& h : result.nbest) {
        std::snprintf(score, sizeof score, "%.6f", h.score);
        add(h.text, score);
      }
      return out;
    }
  }
  return "";
}

bool OutputWriter::write(const std::string& bytes) {
  if (!error_.empty()) return false;
  if (std::fwrite(bytes.data(), 1, bytes.size(), out_) != bytes.size()) {
    error_ = std::strerror(errno);
    return false;
  }
  if (unbuffered_) return flush();
  return true;
}

bool OutputWriter::flush() {
  if (!error_.empty()) return false;
  if (std::fflush(out_) != 0) {
    error_ = std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace masque
