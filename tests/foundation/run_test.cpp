// The corpus runner's parts on their own: the batcher (window, parallel prepare, length sort,
// cut by size and tokens) and the ordered writer (input order, error records in place).
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>
#include <thread>

#include "masque/error.hpp"
#include "run/batcher.hpp"
#include "run/ordered_writer.hpp"
#include "run/runner.hpp"

using namespace masque;

namespace {

// prepare(): cost = the text's length; a text starting with '!' fails its record.
class LengthTask final : public Task {
 public:
  void prepare(Item& item) const override {
    if (!item.record.text.empty() && item.record.text[0] == '!')
      throw RecordError("bad record " + item.record.text);
    item.cost = item.record.text.size();
  }
  std::vector<Result> process(std::span<Item* const> batch) const override {
    std::vector<Result> out;
    for (Item* item : batch) {
      if (item->record.text == "boom") throw RecordError("boom breaks its batch");
      Result r;
      r.id = item->record.id;
      r.object["id"] = r.id;
      r.object["text"] = item->record.text;
      r.text = item->record.text;
      out.push_back(std::move(r));
    }
    return out;
  }
};

std::unique_ptr<Item> item(std::uint64_t id, std::string text) {
  auto it = std::make_unique<Item>();
  it->record.id = id;
  it->record.text = std::move(text);
  return it;
}

std::vector<std::unique_ptr<Item>> items_with_costs(const std::vector<std::size_t>& costs) {
  std::vector<std::unique_ptr<Item>> out;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    out.push_back(item(i, std::string(costs[i], 'x')));
    out.back()->cost = costs[i];
  }
  return out;
}

std::vector<Item*> raw(const std::vector<std::unique_ptr<Item>>& items) {
  std::vector<Item*> out;
  for (const auto& i : items) out.push_back(i.get());
  return out;
}

std::vector<std::vector<std::uint64_t>> ids(const std::vector<std::vector<Item*>>& batches) {
  std::vector<std::vector<std::uint64_t>> out;
  for (const auto& b : batches) {
    out.emplace_back();
    for (const Item* i : b) out.back().push_back(i->record.id);
  }
  return out;
}

Result ok_result(std::uint64_t id, const std::string& text) {
  Result r;
  r.id = id;
  r.object["id"] = id;
  r.object["text"] = text;
  r.text = text;
  return r;
}

std::string read_back(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

struct Written {
  std::string out;
  WriterStats stats;
  bool stopped = false;
};

// Puts `results` into a queue in the order given and writes them with an OrderedWriter.
Written write_all(std::vector<Result> results, WriterOptions options) {
  ResultQueue queue;
  const auto total = results.size();
  for (auto& r : results) queue.put(std::move(r));
  queue.close(total);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bytes{0};
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  OrderedWriter writer(queue, out, std::move(options), stop, bytes);
  writer.run();
  Written w{read_back(out), writer.stats(), stop.load()};
  std::fclose(out);
  return w;
}

}  // namespace

TEST_CASE("batcher: sorting by cost is stable", "[run][batcher]") {
  auto items = items_with_costs({3, 1, 2, 1, 3});
  std::vector<Item*> sorted = raw(items);
  sort_by_cost(sorted);
  std::vector<std::uint64_t> order;
  for (const Item* i : sorted) order.push_back(i->record.id);
  CHECK(order == std::vector<std::uint64_t>{1, 3, 2, 0, 4});
}

TEST_CASE("batcher: batches are cut by record count", "[run][batcher]") {
  auto items = items_with_costs({1, 1, 1, 1, 1, 1, 1});
  BatchingOptions o{.max_batch_size = 3, .max_batch_tokens = 1000};
  CHECK(ids(cut_batches(raw(items), o)) ==
        std::vector<std::vector<std::uint64_t>>{{0, 1, 2}, {3, 4, 5}, {6}});
}

TEST_CASE("batcher: batches are cut by padded tokens, and a long record still gets a batch",
          "[run][batcher]") {
  // 2, 2, 3 pads to 3 x 3 = 9 <= 10; adding a 5 would pad to 4 x 5 = 20. 5, 5 is 10.
  auto items = items_with_costs({2, 2, 3, 5, 5, 40});
  BatchingOptions o{.max_batch_size = 100, .max_batch_tokens = 10};
  CHECK(ids(cut_batches(raw(items), o)) ==
        std::vector<std::vector<std::uint64_t>>{{0, 1, 2}, {3, 4}, {5}});
  CHECK(cut_batches({}, o).empty());
}

TEST_CASE("batcher: fewer batches than workers are halved until each worker has one",
          "[run][batcher]") {
  auto items = items_with_costs({1, 1, 2, 2, 3, 3, 4});
  BatchingOptions o{.max_batch_size = 32, .max_batch_tokens = 1000, .workers = 2};
  CHECK(ids(cut_batches(raw(items), o)) ==
        std::vector<std::vector<std::uint64_t>>{{0, 1, 2}, {3, 4, 5, 6}});
  o.workers = 4;  // the most padded tokens halved each time: {3..6} (16), then {5, 6} (8)
  CHECK(ids(cut_batches(raw(items), o)) ==
        std::vector<std::vector<std::uint64_t>>{{0, 1, 2}, {3, 4}, {5}, {6}});
  o.workers = 20;  // never below one record per batch
  CHECK(cut_batches(raw(items), o).size() == 7);
  o.max_batch_size = 3;  // enough batches already: cut as before
  o.workers = 2;
  CHECK(ids(cut_batches(raw(items), o)) ==
        std::vector<std::vector<std::uint64_t>>{{0, 1, 2}, {3, 4, 5}, {6}});
}

TEST_CASE("batcher: a window fills at read_ahead, is prepared in parallel, sorted and cut",
          "[run][batcher]") {
  LengthTask task;
  ThreadPool pool(2, 1);
  std::vector<Result> errors;
  std::mutex m;
  BatchingOptions o{.max_batch_size = 2, .max_batch_tokens = 1000, .read_ahead = 6};
  Batcher batcher(task, o, pool, [&](Result r) {
    std::lock_guard lock(m);
    errors.push_back(std::move(r));
  });
  CHECK(batcher.window_size() == 6);
  const std::vector<std::string> texts{"cccc", "a", "!x", "bbb", "dd", "e"};
  for (std::size_t i = 0; i < texts.size(); ++i)
    CHECK(batcher.add(item(i, texts[i])) == (i + 1 == texts.size()));
  WindowCut cut = batcher.cut();
  CHECK(batcher.empty());
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].id == 2);
  CHECK(errors[0].error == "bad record !x");
  // Sorted by length (a, e, dd, bbb, cccc), two per batch; the failed record is left out.
  CHECK(ids(cut.batches) == std::vector<std::vector<std::uint64_t>>{{1, 5}, {4, 3}, {0}});
  CHECK(cut.items->size() == texts.size());
}

TEST_CASE("batcher: read_ahead 0 means 16 x max_batch_size", "[run][batcher]") {
  CHECK(BatchingOptions{.max_batch_size = 4}.window() == 64);
  CHECK(BatchingOptions{.max_batch_size = 4, .read_ahead = 5}.window() == 5);
}

TEST_CASE("process_batch: a record that breaks its batch fails alone", "[run][batcher]") {
  LengthTask task;
  std::vector<std::unique_ptr<Item>> items;
  items.push_back(item(7, "a"));
  items.push_back(item(8, "boom"));
  items.push_back(item(9, "c"));
  std::vector<Result> results = process_batch(task, raw(items));
  REQUIRE(results.size() == 3);
  CHECK(results[0].id == 7);
  CHECK(results[0].error.empty());
  CHECK(results[1].id == 8);
  CHECK(results[1].error == "boom breaks its batch");
  CHECK(results[2].text == "c");
}

TEST_CASE("ordered writer: results completed out of order come out in input order",
          "[run][writer]") {
  ResultQueue queue;
  std::atomic<bool> stop{false};
  // Three producers finish in reverse order of their records.
  std::vector<std::thread> producers;
  for (int k = 2; k >= 0; --k)
    producers.emplace_back([&queue, k] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * (2 - k)));
      std::vector<Result> batch;
      batch.push_back(ok_result(2 * k, "r" + std::to_string(2 * k)));
      batch.push_back(ok_result(2 * k + 1, "r" + std::to_string(2 * k + 1)));
      queue.put(std::move(batch));
    });
  queue.close(6);
  std::vector<std::uint64_t> taken;
  Result r;
  for (std::uint64_t next = 0; queue.take(r, next, stop); ++next) taken.push_back(r.id);
  for (auto& t : producers) t.join();
  CHECK(taken == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("ordered writer: error records are written in their record's place", "[run][writer]") {
  std::vector<Result> results;
  results.push_back(ok_result(2, "two"));
  results.push_back(error_result(1, "record one failed"));
  results.push_back(ok_result(0, "zero"));
  Written text = write_all(std::move(results), {.format = OutputFormat::text});
  CHECK(text.out == "zero\n\ntwo\n");
  CHECK(text.stats.records == 3);
  CHECK(text.stats.failed == 1);
  CHECK_FALSE(text.stats.stopped_on_failure);

  results.clear();
  results.push_back(ok_result(1, "one"));
  results.push_back(error_result(0, "bad"));
  Written json = write_all(std::move(results), {.format = OutputFormat::jsonl});
  CHECK(json.out == "{\"id\":0,\"error\":\"bad\"}\n{\"id\":1,\"text\":\"one\"}\n");
}

TEST_CASE("ordered writer: fail_fast stops after the first failed record", "[run][writer]") {
  std::vector<Result> results;
  results.push_back(ok_result(0, "zero"));
  results.push_back(error_result(1, "failed"));
  results.push_back(ok_result(2, "two"));
  Written w = write_all(std::move(results), {.format = OutputFormat::text, .fail_fast = true});
  CHECK(w.out == "zero\n\n");
  CHECK(w.stats.stopped_on_failure);
  CHECK(w.stopped);
}
