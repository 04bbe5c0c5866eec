// The HTML report: self-contained (no network), and loaded in a real headless browser (Debian's
// chromium) without script errors, with its charts drawn. The screenshot is kept in the build
// tree (artifacts/ next to this test binary). Skipped, never failed, when chromium is missing.
#include <gtest/gtest.h>

#include <regex>

#include "cli/cli_util.hpp"
#include "report/html.hpp"
#include "report/report_fixture.hpp"

namespace {

using namespace latprof;

std::string find_browser() {
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + b + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return b;
  }
  return "";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

RunReport report() {
  RunReport r = report_test::make_report();
  r.run.model = "tiny <script>alert(1)</script>";  // escaped, never run
  r.checks.push_back({"warning", "decode", "a check & its message"});
  return r;
}

TEST(Html, SelfContained) {
  const RunReport r = report();
  const std::string h = report_html(r);
  // Only the SVG namespace is a URL; nothing is fetched.
  std::string rest = std::regex_replace(h, std::regex("http://www\\.w3\\.org/2000/svg"), "");
  EXPECT_EQ(rest.find("http:"), std::string::npos);
  EXPECT_EQ(rest.find("https:"), std::string::npos);
  for (const char* s : {" src=", " href=", "url(", "@import"})
    EXPECT_EQ(h.find(s), std::string::npos) << s;
  EXPECT_EQ(h.find("<script>alert"), std::string::npos);
  EXPECT_NE(h.find("tiny &lt;script&gt;"), std::string::npos);
  EXPECT_NE(h.find("id=\"stage-bar\""), std::string::npos);
  EXPECT_NE(h.find("id=\"decode-chart\""), std::string::npos);
  EXPECT_NE(h.find("id=\"percentiles\""), std::string::npos);
  EXPECT_NE(h.find("id=\"roofline\"><svg"), std::string::npos);
  EXPECT_EQ(count(h, "class=\"stage\""), int(r.stages.size()));
  EXPECT_EQ(count(h, "class=\"pt\""), int(r.decode_step_ms.size()));
}

TEST(Html, LoadsInHeadlessChromium) {
  const std::string browser = find_browser();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed (apt-get install -y chromium); the HTML report "
                    "was not checked in a browser";
  const auto html = report_test::artifact_path("report.html");
  const auto png = report_test::artifact_path("report.png");
  const auto dom = report_test::artifact_path("report.dom.html");
  const auto log = report_test::artifact_path("chromium.log");
  std::filesystem::remove(png);
  report_test::write_text(html, report_html(report()));
  // The user-data dir is private: chromium must not share a profile with anything else.
  const auto profile = cli_test::temp_dir("chromium-profile");
  const std::string common = "timeout 60 " + browser +
                             " --headless --no-sandbox --disable-gpu --hide-scrollbars "
                             "--no-first-run --user-data-dir=" +
                             profile.string() +
                             " --enable-logging=stderr --v=0 --window-size=1000,2600 ";
  const std::string url = "file://" + html.string();
  ASSERT_EQ(
      std::system(
          (common + "--dump-dom " + url + " >" + dom.string() + " 2>" + log.string()).c_str()),
      0)
      << cli_test::slurp(log.string());
  const std::string d = cli_test::slurp(dom.string());
  // The inline script ran to its end, no uncaught error, the charts are in the DOM.
  EXPECT_NE(d.find("data-latprof-ready=\"1\""), std::string::npos) << d.substr(0, 400);
  EXPECT_NE(d.find("data-latprof-js-errors=\"0\""), std::string::npos);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(d, m, std::regex("data-latprof-charts=\"([0-9]+)\"")));
  EXPECT_GE(std::stoi(m[1]), 3);  // stage bar, decode chart, roofline
  ASSERT_TRUE(std::regex_search(d, m, std::regex("data-latprof-decode-points=\"([0-9]+)\"")));
  EXPECT_EQ(std::stoi(m[1]), int(report().decode_step_ms.size()));
  EXPECT_NE(d.find("<svg id=\"stage-bar\""), std::string::npos);
  EXPECT_NE(d.find("<svg id=\"decode-chart\""), std::string::npos);
  EXPECT_NE(d.find("<div id=\"roofline\"><svg"), std::string::npos);
  const std::string console = cli_test::slurp(log.string());
  EXPECT_EQ(console.find("Uncaught"), std::string::npos) << console;
  // The screenshot, kept as the test's artifact.
  ASSERT_EQ(std::system((common + "--screenshot=" + png.string() + " " + url + " >>" +
                         log.string() + " 2>&1")
                            .c_str()),
            0)
      << cli_test::slurp(log.string());
  const std::string p = cli_test::slurp(png.string());
  ASSERT_GT(p.size(), 8u) << "no screenshot";
  EXPECT_EQ(p.substr(1, 3), "PNG");
  std::printf("artifacts: %s, %s\n", png.c_str(), html.c_str());
}

}  // namespace
