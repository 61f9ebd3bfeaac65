// Corpus input parsing and output rendering.
#include <catch2/catch.hpp>

#include <cstdio>

#include "io/output.hpp"
#include "io/records.hpp"
#include "masque/error.hpp"

using namespace masque;

namespace {
std::vector<Record> read_all(const std::string& text, InputOptions options = {}) {
  std::FILE* f = fmemopen(const_cast<char*>(text.data()), text.size(), "rb");
  if (text.empty()) f = std::fopen("/dev/null", "rb");
  RecordReader reader(f, options);
  std::vector<Record> out;
  Record r;
  while (reader.next(r)) out.push_back(r);
  std::fclose(f);
  return out;
}
}  // namespace

TEST_CASE("text records: one per line, ids from 0, empty lines kept, CRLF stripped", "[records]") {
  auto recs = read_all("a\n\nb c\r\nlast");
  REQUIRE(recs.size() == 4);
  CHECK(recs[0].id == 0);
  CHECK(recs[1].text.empty());
  CHECK(recs[1].error.empty());
  CHECK(recs[2].text == "b c");
  CHECK(recs[3].text == "last");
  CHECK(recs[3].id == 3);
  CHECK(read_all("").empty());
  CHECK(read_all("\n").size() == 1);
}

TEST_CASE("a line longer than the limit becomes an error record without being kept", "[records]") {
  InputOptions o;
  o.max_record_bytes = 10;
  std::string big(200000, 'x');
  auto recs = read_all("ok\n" + big + "\nafter\n", o);
  REQUIRE(recs.size() == 3);
  CHECK(recs[1].error.find("200001 bytes, longer than the limit of 10") != std::string::npos);
  CHECK(recs[1].text.empty());
  CHECK(recs[2].text == "after");
}

TEST_CASE("invalid UTF-8 is an error record, or replaced when asked", "[records]") {
  std::string bad =
      "ab\xff"
      "c\xe4\xb8"
      "d\xed\xa0\x80";
  auto recs = read_all(bad + "\n");
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].error.find("invalid UTF-8 at byte 2") != std::string::npos);
  InputOptions o;
  o.replace_invalid_utf8 = true;
  auto fixed = read_all(bad + "\n", o);
  CHECK(fixed[0].error.empty());
  CHECK(fixed[0].text ==
        "ab\xEF\xBF\xBD"
        "c\xEF\xBF\xBD"
        "d\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(is_valid_utf8("北京 ok"));
  CHECK_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  CHECK_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  CHECK(read_all(std::string("a\0b\n", 4))[0].text == std::string("a\0b", 3));
}

TEST_CASE("jsonl records: a chosen field, ids arrays, bad lines become error records",
          "[records]") {
  InputOptions o;
  o.format = InputFormat::jsonl;
  o.field = "src";
  auto recs = read_all(R"({"src": "hello", "order": [1, 0]}
{"ids": [1, 2, 3]}
not json
[1, 2]
{"src": 5}
{"other": "x"}
{"ids": [-1]}
)",
                       o);
  REQUIRE(recs.size() == 7);
  CHECK(recs[0].text == "hello");
  CHECK(recs[0].fields["order"] == nlohmann::ordered_json({1, 0}));
  CHECK(*recs[1].ids == std::vector<TokenId>{1, 2, 3});
  CHECK(recs[2].error.find("invalid JSON") == 0);
  CHECK(recs[3].error.find("expected a JSON object") == 0);
  CHECK(recs[4].error == "field 'src' must be a string");
  CHECK(recs[5].error.find("no 'src' field") == 0);
  CHECK(recs[6].error.find("non-negative") != std::string::npos);
}

TEST_CASE("tsv records: header or --columns, wrong column counts fail the record", "[records]") {
  InputOptions o;
  o.format = InputFormat::tsv;
  o.field = "source";
  auto recs = read_all("source\tprefix\nabc\tx\nbad\n", o);
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].text == "abc");
  CHECK(recs[0].fields["prefix"] == "x");
  CHECK(recs[1].error.find("expected 2 tab-separated columns (source, prefix), got 1") == 0);
  o.columns = {"source", "prefix"};
  auto no_header = read_all("abc\tx\n", o);
  REQUIRE(no_header.size() == 1);
  CHECK(no_header[0].text == "abc");
}

TEST_CASE("ids records", "[records]") {
  InputOptions o;
  o.format = InputFormat::ids;
  auto recs = read_all("1 2  3\n\n4 x\n", o);
  REQUIRE(recs.size() == 3);
  CHECK(*recs[0].ids == std::vector<TokenId>{1, 2, 3});
  CHECK(recs[1].ids->empty());
  CHECK(recs[2].error.find("expected space-separated") == 0);
}

TEST_CASE("output rendering", "[records]") {
  Result r;
  r.id = 7;
  r.object = {{"id", 7}, {"text", "a\tb"}, {"score", -1.5}};
  r.text = "a\tb";
  r.nbest = {{"x y", -0.25}, {"x z", -1.0}};
  CHECK(render(r, OutputFormat::jsonl, {}) == "{\"id\":7,\"text\":\"a\\tb\",\"score\":-1.5}\n");
  CHECK(render(r, OutputFormat::text, {}) == "a\tb\n");
  CHECK(render(r, OutputFormat::tsv, {"text", "score"}) == "7\ta\\tb\t-1.5\n");
  CHECK(render(r, OutputFormat::nbest, {}) == "7 ||| x y ||| -0.250000\n7 ||| x z ||| -1.000000\n");
  Result e = error_result(3, "bad");
  CHECK(render(e, OutputFormat::jsonl, {}) == "{\"id\":3,\"error\":\"bad\"}\n");
  CHECK(render(e, OutputFormat::tsv, {"text"}) == "3\terror\tbad\n");
}
