// What latprof does to the paths it writes (issue 10.3, 10.4): symbolic links followed with the
// link kept, devices and FIFOs written in place, JSON Lines appended whole by concurrent
// processes, nothing written when one output of a run is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cli/cli_util.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace {

namespace fs = std::filesystem;
using cli_test::latprof;

fs::path scratch(const std::string& name) {
  const fs::path d = cli_test::temp_dir("outputs") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

TEST(OutputPaths, SymlinkIsFollowedAndKept) {
  const fs::path d = scratch("symlink");
  fs::create_symlink("target.json", d / "link.json");  // dangling: the target is created
  auto r = latprof("run --model tiny -q --input 8 --output 2 --warmup 0 --json " +
                   (d / "link.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  ASSERT_TRUE(fs::is_regular_file(d / "target.json"));
  EXPECT_EQ(nlohmann::json::parse(cli_test::slurp((d / "target.json").string()))["run"]["model"],
            "tiny");
  // Again, over the existing target: replaced through the link, the link stays.
  ::chmod((d / "target.json").c_str(), 0600);
  r = latprof("roofline --model tiny --hw h100-sxm --input 8 --output 4 --json " +
              (d / "link.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(d / "link.json"));
  EXPECT_EQ(nlohmann::json::parse(cli_test::slurp((d / "target.json").string()))["kind"],
            "prediction");
  struct stat st {};
  ASSERT_EQ(::stat((d / "target.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the replaced file keeps its permissions";
  // No temporary files are left beside it.
  int n = 0;
  for (const auto& e : fs::directory_iterator(d)) n += e.path().filename().string()[0] == '.';
  EXPECT_EQ(n, 0);
}

TEST(OutputPaths, DevNullStaysADevice) {
  const auto r = latprof(
      "roofline --model tiny --hw h100-sxm --input 8 --output 4 --json "
      "/dev/null --svg /dev/null");
  ASSERT_EQ(r.code, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced by a regular file";
}

// /dev/stdout is a link to /proc/self/fd/1: the document goes to this process's stdout (a file
// here), and the link stays (before issue 10, a rename replaced /dev/stdout for everyone).
TEST(OutputPaths, DevStdoutWritesToStdout) {
  if (!fs::is_symlink("/dev/stdout")) GTEST_SKIP() << "/dev/stdout is not a symbolic link here";
  const auto r = latprof(
      "roofline --model tiny --hw h100-sxm --input 8 --output 4 --json "
      "/dev/stdout");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"kind\": \"prediction\""), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_symlink("/dev/stdout"));
}

TEST(OutputPaths, FifoWithAReaderGetsTheDocument) {
  const fs::path d = scratch("fifo");
  const fs::path f = d / "chart.fifo";
  ASSERT_EQ(::mkfifo(f.c_str(), 0644), 0);
  // The reader end is open before latprof starts (so its non-blocking open finds a reader), and
  // is drained while latprof writes (the chart is larger than a pipe's buffer).
  const int rfd = ::open(f.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rfd, 0);
  auto run = std::async(std::launch::async, [&] {
    return latprof("roofline --model tiny --hw h100-sxm --input 8 --output 4 --svg " + f.string());
  });
  std::string got;
  char buf[65536];
  for (;;) {
    const bool done = run.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
    const ssize_t n = ::read(rfd, buf, sizeof buf);
    if (n > 0) {
      got.append(buf, size_t(n));
      continue;
    }
    if (done) {
      // latprof exited: take what is left, then stop.
      for (ssize_t m; (m = ::read(rfd, buf, sizeof buf)) > 0;) got.append(buf, size_t(m));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::close(rfd);
  const auto r = run.get();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(got.starts_with("<?xml")) << got.substr(0, 80);
  EXPECT_TRUE(fs::is_fifo(f));
}

// Reports may come through a pipe (`cat r.json | latprof compare a.json /dev/stdin`, or a
// shell's <(command)).
TEST(OutputPaths, ReportFromAPipe) {
  const fs::path d = scratch("pipe");
  const std::string p = (d / "p.json").string();
  ASSERT_EQ(latprof("roofline --model tiny --hw h100-sxm --input 8 --output 4 --json " + p).code,
            0);
  const std::string out = (d / "out").string(), err = (d / "err").string();
  const std::string cmd =
      "cat " + p + " | " + cli_test::bin() + " compare " + p + " /dev/stdin >" + out + " 2>" + err;
  const int st = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cli_test::slurp(err);
  EXPECT_NE(cli_test::slurp(out).find("stdin: tiny"), std::string::npos) << cli_test::slurp(out);
}

TEST(OutputPaths, RefusedOutputMeansNothingWritten) {
  const fs::path d = scratch("nothing");
  const auto r = latprof("run --model tiny -q --input 8 --output 2 --json " +
                         (d / "ok.json").string() + " --csv /proc/latprof-test.csv");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/proc"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "ok.json"));
  EXPECT_TRUE(r.out.empty()) << "the run went ahead: " << r.out;
}

TEST(OutputPaths, DtypeListRefusedBeforeAnyRun) {
  // int8 and int8-w8a8 alone would run; int4 cannot: the list is refused before either runs.
  const auto r = latprof("run --model tiny -q --input 8 --output 2 --dtype int8,int8-w8a8,int4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("'int4'"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "int8 ran before the list was checked:\n" << r.out;
}

// Two processes append 300 lines each at once: all 600 lines arrive whole.
TEST(OutputPaths, ConcurrentJsonlAppendsLoseNothing) {
  const fs::path d = scratch("jsonl");
  const std::string path = (d / "runs.jsonl").string();
  constexpr int kLines = 300;
  const std::string pad(700, 'x');  // longer lines make torn writes likelier
  pid_t kids[2];
  for (int p = 0; p < 2; ++p) {
    kids[p] = ::fork();
    ASSERT_GE(kids[p], 0);
    if (kids[p] == 0) {
      try {
        for (int i = 0; i < kLines; ++i)
          latprof::append_line_atomic(path,
                                      nlohmann::json{{"p", p}, {"i", i}, {"pad", pad}}.dump());
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
  }
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  const auto lines = lines_of(cli_test::slurp(path));
  ASSERT_EQ(lines.size(), size_t(2 * kLines));
  std::set<std::pair<int, int>> seen;
  for (const auto& l : lines) {
    const auto j = nlohmann::json::parse(l);  // throws on a torn line
    seen.insert({j["p"].get<int>(), j["i"].get<int>()});
  }
  EXPECT_EQ(seen.size(), size_t(2 * kLines));
}

TEST(OutputPaths, JsonlAppendRepairsAMissingNewline) {
  const fs::path d = scratch("jsonl-nl");
  const std::string path = (d / "runs.jsonl").string();
  std::ofstream(path) << "{\"a\":1}";  // no trailing newline
  latprof::append_line_atomic(path, "{\"b\":2}");
  EXPECT_EQ(cli_test::slurp(path), "{\"a\":1}\n{\"b\":2}\n");
}

TEST(OutputPaths, TwoRunsAppendingJsonlAtOnce) {
  const fs::path d = scratch("jsonl-cli");
  const std::string path = (d / "runs.jsonl").string();
  const std::string args = "run --model tiny -q --input 8 --output 2 --warmup 0 --jsonl " + path;
  auto a = std::async(std::launch::async, [&] { return latprof(args); });
  auto b = std::async(std::launch::async, [&] { return latprof(args); });
  const auto ra = a.get(), rb = b.get();
  ASSERT_EQ(ra.code, 0) << ra.err;
  ASSERT_EQ(rb.code, 0) << rb.err;
  const auto lines = lines_of(cli_test::slurp(path));
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
}

TEST(OutputPaths, CheckWritableRules) {
  const fs::path d = scratch("rules");
  EXPECT_NO_THROW(latprof::check_writable((d / "new.json").string(), "--json"));
  EXPECT_NO_THROW(latprof::check_writable("/dev/null", "--json"));
  EXPECT_THROW(latprof::check_writable(d.string(), "--json"), latprof::UsageError);
  EXPECT_THROW(latprof::check_writable("/proc/self/status", "--json"), latprof::UsageError);
  EXPECT_THROW(latprof::check_writable("", "--json"), latprof::UsageError);
  EXPECT_THROW(latprof::check_distinct_outputs(
                   {{"--json", (d / "a").string()}, {"--csv", (d / "." / "a").string()}}),
               latprof::UsageError);
  EXPECT_NO_THROW(
      latprof::check_distinct_outputs({{"--json", "/dev/null"}, {"--csv", "/dev/null"}}));
}

}  // namespace
