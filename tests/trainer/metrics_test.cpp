#include <catch2/catch.hpp>

#include "masque/train/metrics.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::train;
namespace fs = std::filesystem;

TEST_CASE("metrics: one JSON object per line, and a resume drops the lines after its checkpoint") {
  const fs::path file = test::scratch_dir("metrics_resume") / "metrics.jsonl";
  {
    MetricsLog log(file);
    for (int step = 1; step <= 4; ++step) log.write({{"step", step}, {"loss", 1.0 / step}});
    log.write({{"step", 2}, {"valid_loss", 0.7}});
  }
  // A crash tore the last line.
  test::write_file(file, test::read_file(file) + "{\"step\": 5, \"lo");
  {
    MetricsLog log(file, 2);
    log.write({{"step", 3}, {"loss", 0.3}});
  }
  const auto lines = test::read_jsonl(file);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0]["step"] == 1);
  CHECK(lines[1]["step"] == 2);
  CHECK(lines[2]["valid_loss"] == 0.7);
  CHECK(lines[3]["loss"] == 0.3);
}

TEST_CASE("progress: durations read like a clock") {
  CHECK(Progress::format_duration(12.2) == "12s");
  CHECK(Progress::format_duration(362) == "6m02s");
  CHECK(Progress::format_duration(3840) == "1h04m");
  CHECK(Progress::format_duration(-1) == "?");
}
