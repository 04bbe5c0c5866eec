// The HTML report: self-contained (no network), and loaded in a real headless browser (Debian's
// chromium) without script errors, with its charts drawn. The screenshot is kept in the build
// tree (artifacts/ next to this test binary). Skipped, never failed, when chromium is missing.
// Load-mode reports (`run --requests`) are measured the same way: histograms, batch and KV charts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
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

// Where the decode steps measured their thread pool's time off the CPUs and some lost any, each of
// those steps has a bar on the decode chart (its step and time in its title), with a key; none
// where no step lost any or the steps did not measure it (-1: CUDA, older reports).
TEST(Html, OffCpuBarsMarkTheStepsThatLostTheirCpus) {
  auto with_offcpu = [](double lost) {
    RunReport r = report();
    r.steps.clear();
    StepRow prefill;
    prefill.prefill_tokens = 8;
    r.steps.push_back(prefill);
    for (size_t i = 0; i < r.decode_step_ms.size(); ++i) {
      StepRow s;
      s.index = int64_t(i) + 1;
      s.decode_tokens = 1;
      s.offcpu_ms = i == 2 ? lost : (lost < 0 ? -1.0 : 0.0);
      r.steps.push_back(s);
    }
    return report_html(r);
  };
  ASSERT_GE(report().decode_step_ms.size(), 3u);
  const std::string h = with_offcpu(5.0);
  EXPECT_EQ(count(h, "class=\"offcpu\""), 1);
  EXPECT_NE(h.find("data-step=\"3\"><title>step 3: 5.00 ms off the CPUs</title>"),
            std::string::npos);
  EXPECT_EQ(count(h, "offcpu-key"), 1);
  for (const double none : {0.0, -1.0}) {
    const std::string n = with_offcpu(none);
    EXPECT_EQ(count(n, "class=\"offcpu\""), 0) << none;
    EXPECT_EQ(count(n, "offcpu-key"), 0) << none;
  }
}

// What a person sees, read back from the page as the browser laid it out: a script appended to a
// copy of the report (the report itself is untouched) measures every chart's plot area, points,
// y-axis ticks and stage bars with getBoundingClientRect and leaves them as JSON in the DOM.
const char* kMeasure = R"(<script>
(function () {
  function box(e) {
    var b = e.getBoundingClientRect();
    return {x: b.left, y: b.top, w: b.width, h: b.height, cx: b.left + b.width / 2,
            cy: b.top + b.height / 2};
  }
  function chart(svg, points) {
    if (!svg) return null;
    var area = svg.querySelector('.plot-area');
    var r = {svg: box(svg), area: area ? box(area) : null, points: [], yticks: []};
    svg.querySelectorAll(points).forEach(function (p) {
      var b = box(p);
      b.ms = p.dataset.ms === undefined ? null : Number(p.dataset.ms);
      b.step = p.dataset.step === undefined ? null : Number(p.dataset.step);
      r.points.push(b);
    });
    svg.querySelectorAll('text.ytick').forEach(function (t) {
      var b = box(t);
      b.value = Number(t.dataset.value);
      r.yticks.push(b);
    });
    return r;
  }
  var out = {decode: chart(document.getElementById('decode-chart'), 'circle.pt'),
             roofline: chart(document.querySelector('#roofline svg'), 'circle.op'),
             bar: box(document.getElementById('stage-bar')), stages: []};
  document.querySelectorAll('#stage-bar rect.stage').forEach(function (e) {
    var b = box(e);
    b.stage = e.dataset.stage;
    out.stages.push(b);
  });
  // Load mode: each chart's plot area and elements, with their data-* attributes.
  function elems(svg, sel) {
    var a = [];
    if (!svg) return a;
    svg.querySelectorAll(sel).forEach(function (e) {
      var b = box(e);
      b.cls = e.getAttribute('class');
      for (var k in e.dataset) b[k] = e.dataset[k];
      a.push(b);
    });
    return a;
  }
  out.load = {};
  ['ttft-hist', 'itl-hist', 'batch-chart', 'kv-chart'].forEach(function (id) {
    var svg = document.getElementById(id);
    if (!svg) return;
    var area = svg.querySelector('.plot-area');
    out.load[id] = {area: area ? box(area) : null, data: Object.assign({}, svg.dataset),
                    bins: elems(svg, 'rect.bin:not(.overflow)'), overflow: elems(svg, 'rect.overflow'),
                    bars: elems(svg, 'rect.dec, rect.pre'), lines: elems(svg, 'polyline.kv'),
                    markers: elems(svg, 'line.marker'), yticks: elems(svg, 'text.ytick')};
  });
  var cb = document.getElementById('class-bar');
  out.classbar = cb ? box(cb) : null;
  out.classes = elems(cb, 'rect.latency-class');
  var pre = document.createElement('pre');
  pre.id = 'latprof-measure';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>)";

struct Page {
  std::string dom;
  nlohmann::json seen;  // kMeasure's output
};

std::string chromium_common(const std::string& browser) {
  // The user-data dir is private: chromium must not share a profile with anything else.
  const auto profile = cli_test::temp_dir("chromium-profile");
  return "timeout 60 " + browser +
         " --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
         "--user-data-dir=" +
         profile.string() + " --enable-logging=stderr --v=0 --window-size=1000,2600 ";
}

// Loads the report with the measuring script in headless chromium; the page and the DOM are
// kept as artifacts under `tag`.
Page render(const std::string& browser, const RunReport& r, const std::string& tag) {
  std::string h = report_html(r);
  const size_t body = h.rfind("</body>");
  h.insert(body, kMeasure);
  const auto html = report_test::artifact_path(tag + ".measured.html");
  const auto dom = report_test::artifact_path(tag + ".measured.dom.html");
  const auto log = report_test::artifact_path(tag + ".chromium.log");
  report_test::write_text(html, h);
  Page p;
  const std::string cmd = chromium_common(browser) + "--dump-dom file://" + html.string() + " >" +
                          dom.string() + " 2>" + log.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cli_test::slurp(log.string());
  p.dom = cli_test::slurp(dom.string());
  const std::string open = "<pre id=\"latprof-measure\">";
  const size_t a = p.dom.find(open), b = p.dom.find("</pre>", a);
  if (a == std::string::npos || b == std::string::npos) {
    ADD_FAILURE() << tag << ": the measuring script left nothing: " << p.dom.substr(0, 400);
    return p;
  }
  std::string text = p.dom.substr(a + open.size(), b - a - open.size());
  for (const auto& [from, to] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}})
    text = std::regex_replace(text, std::regex(from), to);
  p.seen = nlohmann::json::parse(text);
  return p;
}

bool inside(const nlohmann::json& pt, const nlohmann::json& area, double tol = 0.5) {
  return pt["cx"].get<double>() >= area["x"].get<double>() - tol &&
         pt["cx"].get<double>() <= area["x"].get<double>() + area["w"].get<double>() + tol &&
         pt["cy"].get<double>() >= area["y"].get<double>() - tol &&
         pt["cy"].get<double>() <= area["y"].get<double>() + area["h"].get<double>() + tol;
}

// The decode chart shows every finite step, inside its plot area, at heights in the order and
// proportion of the data, under a y axis whose ticks cover the data.
void expect_decode_chart_shows(const nlohmann::json& c, const std::vector<double>& data,
                               const std::string& tag) {
  SCOPED_TRACE(tag);
  ASSERT_TRUE(c.is_object());
  ASSERT_TRUE(c["area"].is_object());
  std::vector<double> v;
  for (double x : data)
    if (std::isfinite(x)) v.push_back(x);
  const auto& pts = c["points"];
  ASSERT_EQ(pts.size(), v.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    EXPECT_TRUE(inside(pts[i], c["area"]))
        << "step " << pts[i]["step"] << " (" << v[i]
        << " ms) is drawn outside the plot area: " << pts[i].dump() << " area " << c["area"].dump();
    EXPECT_GT(pts[i]["w"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(pts[i]["ms"].get<double>(), v[i]);
    if (i) {
      EXPECT_GT(pts[i]["cx"].get<double>(), pts[i - 1]["cx"].get<double>());
    }
  }
  // Screen height is one straight line of the value, higher values higher up.
  const size_t lo = size_t(std::min_element(v.begin(), v.end()) - v.begin());
  const size_t hi = size_t(std::max_element(v.begin(), v.end()) - v.begin());
  const double ylo = pts[lo]["cy"].get<double>(), yhi = pts[hi]["cy"].get<double>();
  if (v[hi] > v[lo]) {
    EXPECT_LT(yhi, ylo - 1) << "the largest value is not drawn above the smallest";
    for (size_t i = 0; i < v.size(); ++i) {
      const double want = ylo + (v[i] - v[lo]) / (v[hi] - v[lo]) * (yhi - ylo);
      EXPECT_NEAR(pts[i]["cy"].get<double>(), want, 1.0) << "step " << i + 1;
    }
  }
  // The y ticks cover the data: one at or below the smallest value, one at or above the largest,
  // and the ticks are drawn where their values lie on that line.
  double tmin = 1e300, tmax = -1e300;
  for (const auto& t : c["yticks"]) {
    tmin = std::min(tmin, t["value"].get<double>());
    tmax = std::max(tmax, t["value"].get<double>());
  }
  EXPECT_LE(tmin, v[lo]);
  EXPECT_GE(tmax, v[hi]) << "the y axis stops below the data";
  if (v[hi] > v[lo] && c["yticks"].size() >= 2) {
    const double per = (yhi - ylo) / (v[hi] - v[lo]);
    for (const auto& t : c["yticks"]) {
      // A tick label's centre sits ~4 px below its value's line (baseline offset).
      const double want = ylo + (t["value"].get<double>() - v[lo]) * per;
      EXPECT_NEAR(t["cy"].get<double>(), want, 6.0) << "tick " << t["value"];
    }
  }
}

TEST(Html, ChartsShowAllTheirData) {
  const std::string browser = find_browser();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed (apt-get install -y chromium); the charts were not "
                    "checked in a browser";
  struct Case {
    const char* tag;
    std::vector<double> steps;
  };
  std::vector<Case> cases;
  cases.push_back({"fixture", report_test::make_report().decode_step_ms});  // ~0.03 ms
  std::vector<double> ms40, ms10, flat;
  for (int k = 0; k < 31; ++k) {
    ms40.push_back(40 + 6.0 * k / 30 + (k == 17 ? 0.4 : 0));  // tinyllama-1.1b: 40-46 ms
    ms10.push_back(12 + 0.5 * k + (k == 5 ? 60 : 0));         // tens of ms, one spike
    flat.push_back(k == 9 ? std::nan("") : 7.25);             // all equal, one not a number
  }
  cases.push_back({"steps-40-46ms", ms40});
  cases.push_back({"steps-tens-of-ms", ms10});
  cases.push_back({"steps-flat", flat});
  cases.push_back({"one-step", {0.5}});
  for (const auto& c : cases) {
    RunReport r = report_test::make_report();
    r.decode_step_ms = c.steps;
    const Page p = render(browser, r, c.tag);
    if (!p.seen.is_object()) continue;
    expect_decode_chart_shows(p.seen["decode"], c.steps, c.tag);
    // Every roofline point inside its plot area.
    const auto& rf = p.seen["roofline"];
    ASSERT_TRUE(rf.is_object() && rf["area"].is_object()) << c.tag;
    EXPECT_GT(rf["points"].size(), 0u) << c.tag;
    for (const auto& pt : rf["points"])
      EXPECT_TRUE(inside(pt, rf["area"])) << c.tag << ": roofline point outside: " << pt.dump();
    // The stage bar: one rectangle per stage, widths in proportion to the stages' times.
    ASSERT_EQ(p.seen["stages"].size(), r.stages.size()) << c.tag;
    double total_ms = 0, total_w = 0;
    for (size_t i = 0; i < r.stages.size(); ++i) {
      total_ms += r.stages[i].time_ms;
      total_w += p.seen["stages"][i]["w"].get<double>();
    }
    EXPECT_NEAR(total_w, p.seen["bar"]["w"].get<double>(), 1.0) << c.tag;
    for (size_t i = 0; i < r.stages.size(); ++i)
      EXPECT_NEAR(p.seen["stages"][i]["w"].get<double>() / total_w, r.stages[i].time_ms / total_ms,
                  0.005)
          << c.tag << " " << r.stages[i].name;
  }
}

// A box lies inside the plot area (tolerance in px).
bool contained(const nlohmann::json& b, const nlohmann::json& area, double tol = 0.6) {
  const double x = b["x"].get<double>(), y = b["y"].get<double>();
  const double ax = area["x"].get<double>(), ay = area["y"].get<double>();
  return x >= ax - tol && y >= ay - tol &&
         x + b["w"].get<double>() <= ax + area["w"].get<double>() + tol &&
         y + b["h"].get<double>() <= ay + area["h"].get<double>() + tol;
}

double num(const nlohmann::json& v) {
  return v.is_string() ? std::stod(v.get<std::string>()) : v.get<double>();
}

// The load-mode page as laid out: no script error; every histogram bin, batch bar and the KV
// line inside its plot area; bar heights in proportion to counts and tokens; the bins hold every
// sample; the y ticks reach the tallest bar; the class bar's widths are the classes' means.
TEST(Html, LoadModeChartsRender) {
  const std::string browser = find_browser();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed (apt-get install -y chromium); the load-mode "
                    "charts were not checked in a browser";
  report_test::LoadFixture plain, tail;
  tail.requests = 40;
  tail.itl_spike_ms = 500;
  for (const auto& [tag, lf] :
       {std::pair<std::string, report_test::LoadFixture>{"load", plain}, {"load-itl-tail", tail}}) {
    SCOPED_TRACE(tag);
    const RunReport r = report_test::make_load_report(lf);
    const Page p = render(browser, r, tag);
    if (!p.seen.is_object()) continue;
    EXPECT_NE(p.dom.find("data-latprof-ready=\"1\""), std::string::npos);
    EXPECT_NE(p.dom.find("data-latprof-js-errors=\"0\""), std::string::npos);
    const auto& L = p.seen["load"];
    for (const char* id : {"ttft-hist", "itl-hist", "batch-chart", "kv-chart"}) {
      ASSERT_TRUE(L.contains(id) && L[id]["area"].is_object()) << id << " is not drawn";
      const auto& c = L[id];
      for (const char* k : {"bins", "bars", "lines", "markers"})
        for (const auto& e : c[k])
          EXPECT_TRUE(contained(e, c["area"]))
              << id << ": " << k << " outside the plot: " << e.dump() << " " << c["area"].dump();
    }
    // Histograms: heights in proportion to the counts, every sample in a bin (or the overflow).
    for (const char* id : {"ttft-hist", "itl-hist"}) {
      const auto& c = L[id];
      ASSERT_GT(c["bins"].size(), 0u) << id;
      int64_t sum = 0, most = 0;
      const double per = c["bins"][0]["h"].get<double>() / num(c["bins"][0]["count"]);
      for (const auto& b : c["bins"]) {
        const int64_t n = int64_t(num(b["count"]));
        sum += n;
        most = std::max(most, n);
        EXPECT_NEAR(b["h"].get<double>(), per * double(n), 1.0) << id << " " << b.dump();
        EXPECT_GT(b["w"].get<double>(), 0) << id;
      }
      for (const auto& b : c["overflow"]) sum += int64_t(num(b["count"]));
      EXPECT_EQ(sum, int64_t(num(c["data"]["samples"]))) << id;
      double top = 0;
      for (const auto& t : c["yticks"]) top = std::max(top, num(t["value"]));
      EXPECT_GE(top, double(most)) << id << ": the y axis stops below the tallest bin";
      EXPECT_EQ(c["markers"].size(), 2u) << id;  // p50 and p99
    }
    EXPECT_EQ(L["itl-hist"]["overflow"].size(), lf.itl_spike_ms > 0 ? 1u : 0u);
    // Batch composition: heights in proportion to tokens, decode bars on the x axis.
    const auto& b = L["batch-chart"];
    ASSERT_GT(b["bars"].size(), 0u);
    const double per = b["bars"][0]["h"].get<double>() / num(b["bars"][0]["tokens"]);
    const double bottom = b["area"]["y"].get<double>() + b["area"]["h"].get<double>();
    for (const auto& e : b["bars"]) {
      EXPECT_NEAR(e["h"].get<double>(), per * num(e["tokens"]), 1.0) << e.dump();
      EXPECT_GE(e["w"].get<double>(), 0.9) << "a step is narrower than a pixel";
    }
    // Decode bars stand on the x axis, prefill bars on their step's decode bar (or the axis).
    std::map<std::string, double> dec_top;  // step -> top of its decode bar
    size_t dec = 0, pre = 0;
    for (const auto& e : b["bars"]) {
      const double y = e["y"].get<double>(), h = e["h"].get<double>();
      if (e["cls"] == "dec") {
        ++dec;
        EXPECT_NEAR(y + h, bottom, 0.6) << e.dump();
        dec_top[e["step"].get<std::string>()] = y;
      }
    }
    for (const auto& e : b["bars"]) {
      if (e["cls"] != "pre") continue;
      ++pre;
      const auto it = dec_top.find(e["step"].get<std::string>());
      EXPECT_NEAR(e["y"].get<double>() + e["h"].get<double>(),
                  it == dec_top.end() ? bottom : it->second, 0.6)
          << e.dump();
    }
    size_t want_dec = 0, want_pre = 0;
    for (const StepRow& st : r.steps) {
      want_dec += st.decode_tokens > 0;
      want_pre += st.prefill_tokens > 0;
    }
    EXPECT_EQ(dec, want_dec);
    EXPECT_EQ(pre, want_pre);
    // KV use: one line, as wide as the steps span.
    ASSERT_EQ(L["kv-chart"]["lines"].size(), 1u);
    EXPECT_GT(L["kv-chart"]["lines"][0]["w"].get<double>(), 100);
    // The class bar: one rectangle per class, widths in proportion to the means.
    ASSERT_EQ(p.seen["classes"].size(), 4u);
    double total_ms = 0, total_w = 0;
    for (const auto& e : p.seen["classes"]) {
      total_ms += num(e["ms"]);
      total_w += e["w"].get<double>();
    }
    EXPECT_NEAR(total_w, p.seen["classbar"]["w"].get<double>(), 1.0);
    for (const auto& e : p.seen["classes"])
      EXPECT_NEAR(e["w"].get<double>() / total_w, num(e["ms"]) / total_ms, 0.005) << e.dump();
  }
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
  const std::string common = chromium_common(browser);
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
