// The seed corpus of the JSON-reader fuzz targets (tests/corpus_json/{config,hardware,report}/):
// good_* files are read (and reports drawn); bad_* files each break one rule and must be refused
// with a UsageError naming the file. The fuzzers (scripts/fuzz.sh) mutate these seeds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "model/config.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "roofline/hardware.hpp"

namespace {

namespace fs = std::filesystem;
using namespace latprof;

// names_file: the error names the file (config errors name the model instead).
void check_corpus(const std::string& kind,
                  const std::function<void(const nlohmann::json&, const std::string&)>& read,
                  bool names_file = true) {
  int good = 0, bad = 0;
  for (const auto& e :
       fs::directory_iterator(std::string(LATPROF_TEST_DIR) + "/corpus_json/" + kind)) {
    const std::string p = e.path().string(), name = e.path().filename().string();
    SCOPED_TRACE(name);
    std::ifstream in(p);
    const nlohmann::json j = nlohmann::json::parse(in);
    if (name.starts_with("good_")) {
      EXPECT_NO_THROW(read(j, p));
      ++good;
    } else if (name.starts_with("bad_")) {
      try {
        read(j, p);
        ADD_FAILURE() << "accepted";
      } catch (const UsageError& err) {
        if (names_file) {
          EXPECT_NE(std::string(err.what()).find(p), std::string::npos) << err.what();
        }
      }
      ++bad;
    }
  }
  EXPECT_GE(good, 2);
  EXPECT_GE(bad, 5);
}

TEST(JsonCorpus, ModelConfigs) {
  check_corpus(
      "config", [](const nlohmann::json& j, const std::string& p) { (void)model_from_json(j, p); },
      /*names_file=*/false);
}

TEST(JsonCorpus, HardwareFiles) {
  check_corpus("hardware", [](const nlohmann::json& j, const std::string& p) {
    const HardwareSpec h = hardware_from_json(j, p);
    if (!h.measure) (void)to_ceilings(h);
  });
}

TEST(JsonCorpus, ReportsAndPredictions) {
  check_corpus("report", [](const nlohmann::json& j, const std::string& p) {
    const RunReport r = report_from_json(j, p);
    EXPECT_NE(roofline_svg(r, &r.ceilings).find("</svg>"), std::string::npos);
  });
}

// Extreme but finite ceilings in a report that is otherwise valid: the chart is drawn, fast.
TEST(JsonCorpus, PlotWithExtremeCeilingsIsBounded) {
  std::ifstream in(std::string(LATPROF_TEST_DIR) + "/corpus_json/report/good_run.json");
  RunReport r = report_from_json(nlohmann::json::parse(in), "good_run.json");
  for (const auto& [bw, peak] : std::vector<std::pair<double, double>>{
           {5e-324, 1e308}, {1e308, 5e-324}, {1e308, 1e308}, {5e-324, 5e-324}}) {
    r.ceilings.mem_bw_bytes_per_s = bw;
    r.ceilings.matmul_flops_per_s = peak;
    r.ceilings.vector_flops_per_s = peak;
    Ceilings d = r.ceilings;
    const std::string svg = roofline_svg(r, &d);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    EXPECT_LT(svg.size(), size_t(1) << 20) << "bw " << bw << " peak " << peak;
  }
}

}  // namespace
