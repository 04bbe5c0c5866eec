// Bad and odd inputs, end to end: every case runs the latprof binary under `timeout`, so a hang
// fails the test, and must exit with the expected code and say the expected thing on one line.
// Issue 10: no crash, hang, `internal error` or unwanted write on any input. Add a case by adding
// a row to kCases ({D} is this suite's scratch directory, filled by SetUpTestSuite).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_util.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Case {
  const char* name;  // test name suffix
  const char* args;  // after the binary; {D} is the scratch directory
  int code;          // expected exit status
  const char* says;  // a substring of stderr (exit 2) or stdout (exit 0)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.args;
}

// Every row must end within kTimeoutS; 124 (timeout's status) means it hung.
constexpr int kTimeoutS = 30;
const std::string kLong(300, 'a');

// clang-format off
const Case kCases[] = {
    // ---- sizes: overflow and caps (issue 10.2)
    {"RunOutputInt64Max", "run --model tiny -q --output 9223372036854775807", 2, "--output must be between 1 and 1048576"},
    {"RunInputInt64Max", "run --model tiny -q --input 9223372036854775807", 2, "--input must be between 1 and 1048576"},
    {"RunInputOutputWrap", "run --model tiny -q --input 4611686018427387904 --output 4611686018427387904", 2, "--input must be between"},
    {"RunInputHugeBeforePrompt", "run --model tiny -q --input 1048576", 2, "exceeds the model's context of 512"},
    {"RunContextExceeded", "run --model tiny -q --input 400 --output 200", 2, "exceeds the model's context"},
    {"RunInputZero", "run --model tiny -q --input 0", 2, "--input must be between 1"},
    {"RunOutputNegative", "run --model tiny -q --output -5", 2, "--output must be between 1"},
    {"RunBatchZero", "run --model tiny -q --batch 0", 2, "--batch must be between 1 and 4096"},
    {"RunBatchHuge", "run --model tiny -q --batch 9223372036854775807", 2, "--batch must be between"},
    {"RunRepeatNegative", "run --model tiny -q --repeat -1", 2, "--repeat must be between 0"},
    {"RooflineOutputInt64Max", "roofline --model tiny --hw h100-sxm --output 9223372036854775807", 2, "--output must be between 1 and 1048576"},
    {"RooflineInputOutputWrap", "roofline --model tiny --hw h100-sxm --input 9223372036854775000 --output 9223372036854775000", 2, "--input must be between"},
    {"RooflineHugeContextConfig", "roofline --model {D}/huge_ctx.json --hw h100-sxm --output 9000000", 2, "--output must be between"},
    {"CheckInputInt64Max", "check --model tiny --hw h100-sxm --input 9223372036854775807 --tpot-ms 5", 2, "--input must be between"},
    {"CheckClaimNan", "check --model tiny --hw h100-sxm --input 8 --output 4 --tpot-ms nan", 2, "--tpot-ms must be a positive number"},
    {"CheckClaimInf", "check --model tiny --hw h100-sxm --input 8 --output 4 --ttft-ms inf", 2, "--ttft-ms must be a positive number"},
    {"CheckOutputWrap", "check --model tiny --hw h100-sxm --input 100 --output 9223372036854775800 --tpot-ms 5", 2, "--output must be between"},
    // ---- prompt file (10.5)
    {"PromptFileDevZero", "run --model tiny -q --prompt-file /dev/zero", 2, "larger than the cap of 1 MiB"},
    {"PromptFileTooBig", "run --model tiny -q --prompt-file {D}/big_prompt.txt", 2, "larger than the cap of 1 MiB"},
    {"PromptFileDirectory", "run --model tiny -q --prompt-file {D}", 2, "is a directory"},
    {"PromptFileMissing", "run --model tiny -q --prompt-file {D}/missing.txt", 2, "does not exist"},
    {"PromptFileEmpty", "run --model tiny -q --prompt-file {D}/empty.txt", 2, "is empty"},
    {"PromptFileLoop", "run --model tiny -q --prompt-file {D}/loop1", 2, "symbolic-link loop"},
    {"PromptFileFifoNoWriter", "run --model tiny -q --prompt-file {D}/in.fifo", 2, "is empty"},
    // ---- values accepted but wrong
    {"TemperatureNan", "run --model tiny -q --temperature nan", 2, "--temperature must be a finite number"},
    {"TemperatureInf", "run --model tiny -q --temperature inf", 2, "--temperature must be a finite number"},
    {"TemperatureNegative", "run --model tiny -q --temperature -0.5", 2, "--temperature must be a finite number"},
    {"SeedNegative", "run --model tiny -q --seed -1", 2, "must be an integer >= 0"},
    {"TopKNegative", "run --model tiny -q --top-k -1", 2, "--top-k must be >= 0"},
    {"EmptyJson", "run --model tiny -q --json ''", 2, "--json needs a value"},
    {"EmptyModel", "run --model '' -q", 2, "--model needs a value"},
    {"EmptyDtype", "run --model tiny -q --dtype ''", 2, "--dtype needs a value"},
    {"KvDtypeUnknown", "run --model tiny -q --kv-dtype int4", 2, "--kv-dtype 'int4' is not supported; use fp16, bf16 or int8"},
    {"EmptyPrompt", "run --model tiny -q --prompt ''", 2, "--prompt needs a value"},
    {"EmptyHwFile", "roofline --model tiny --hw-file ''", 2, "--hw-file needs a value"},
    {"EmptyPlotOut", "plot {D}/r.json -o ''", 2, "needs a value"},
    {"PromptAndPromptFile", "run --model tiny -q --prompt hi --prompt-file {D}/prompt.txt", 2, "either --prompt or --prompt-file"},
    {"PromptAndInput", "run --model tiny -q --prompt hi --input 5", 2, "--input cannot"},
    {"PromptFileAndInput", "run --model tiny -q --prompt-file {D}/prompt.txt --input 5", 2, "--input cannot"},
    {"DtypeListUnknown", "run --model tiny -q --dtype fp16,fp7", 2, "fp7"},
    {"KvDtypeListUnknown", "run --model tiny -q --kv-dtype fp16,fp8", 2, "--kv-dtype 'fp8' is not supported"},
    {"DtypeAndKvDtypeLists", "run --model tiny -q --dtype fp16,int8 --kv-dtype fp16,int8", 2, "list several in one of them"},
    {"DtypeListMemoryCheckedFirst", "run --model {D}/huge_ctx.json -q --input 1048576 --output 1 --batch 4096 --dtype int8,fp16", 2, "not enough memory for huge-ctx with --dtype int8"},
    {"PromptLongerThanContext", "run --model tiny -q --output 2 --prompt-file {D}/long_prompt.txt", 2, "exceeds the model's context of 512"},
    {"DtypeListCheckedBeforeFirst", "run --model tiny -q --output 2 --dtype int8-w8a8,int8-w4", 2, "int8-w4"},
    // ---- threads (10.7)
    {"RunThreadsNegative", "run --model tiny -q --threads -1", 2, "--threads must be between 0 (all cores) and"},
    {"RunThreadsHuge", "run --model tiny -q --threads 100000", 2, "--threads must be between 0"},
    {"HwThreadsNegative", "hw -q --threads -1", 2, "--threads must be between 0"},
    {"HwThreadsHuge", "hw -q --threads 100000", 2, "--threads must be between 0"},
    {"RunThreadsAboveCores", "run --model tiny -q --threads 4097", 2, "this machine's cores"},
    // ---- output paths (10.4)
    {"TwoExportsSamePath", "run --model tiny -q --json {D}/same.out --csv {D}/same.out", 2, "name the same file"},
    {"TwoExportsSameViaLink", "run --model tiny -q --json {D}/same_link.out --html {D}/same.out", 2, "name the same file"},
    {"DtypeJsonClashesExport", "run --model tiny -q --dtype fp16,int8 --json {D}/d.json --csv {D}/d.int8.json", 2, "name the same file"},
    {"RooflineJsonSvgSame", "roofline --model tiny --hw h100-sxm --json {D}/p.out --svg {D}/p.out", 2, "name the same file"},
    {"CompareJsonMdSame", "compare {D}/r.json {D}/r.json --json {D}/c.out --md {D}/c.out", 2, "name the same file"},
    {"JsonUnderProc", "run --model tiny -q --json /proc/latprof-test.json", 2, "under /proc or /sys"},
    {"CsvUnderSys", "run --model tiny -q --csv /sys/latprof-test.csv", 2, "under /proc or /sys"},
    {"JsonlUnderProcSelf", "run --model tiny -q --jsonl /proc/self/latprof.jsonl", 2, "under /proc or /sys"},
    {"JsonIsDirectory", "run --model tiny -q --json {D}", 2, "is a directory"},
    {"JsonDirMissing", "run --model tiny -q --json {D}/nodir/x.json", 2, "does not exist"},
    {"JsonIsSocket", "run --model tiny -q --json {D}/sock", 2, "is a socket"},
    {"JsonLinkLoop", "run --model tiny -q --json {D}/loop1", 2, "symbolic-link loop"},
    {"JsonNameTooLong", "run --model tiny -q --json {D}/LONG.json", 2, "too long"},
    {"JsonFifoNoReader", "run --model tiny -q --output 2 --warmup 0 --json {D}/out.fifo", 2, "FIFO has no reader"},
    {"CompareJsonIsAnInput", "compare {D}/r.json {D}/r2.json --json {D}/r2.json", 2, "is the input"},
    {"PlotOutIsTheReport", "plot {D}/r2.json -o {D}/r2.json", 2, "is the input"},
    {"PlotOutIsTheReportViaLink", "plot {D}/r2.json -o {D}/r2_link.json", 2, "is the input"},
    {"PlotOutUnderProc", "plot {D}/r.json -o /proc/latprof.svg", 2, "under /proc or /sys"},
    {"HwSaveIsDirectory", "hw -q --save {D}", 2, "is a directory"},
    // ---- model and report paths (10.8)
    {"ModelDirectoryNoConfig", "run --model {D} -q", 2, "has no config.json"},
    {"ModelProcSelfMem", "run --model /proc/self/mem -q", 2, "/proc or /sys file"},
    {"ModelLinkLoop", "run --model {D}/loop1 -q", 2, "symbolic-link loop"},
    {"ModelLinkLoopNoSlash", "run --model loop1 -q", 2, "symbolic-link loop"},
    {"ModelNameTooLong", "run --model {D}/LONG.gguf -q", 2, "too long"},
    {"ModelMissing", "run --model {D}/missing.gguf -q", 2, "does not exist"},
    {"ModelDevNull", "run --model /dev/null -q", 2, "character device"},
    {"ModelFifo", "run --model {D}/in.fifo -q", 2, "a FIFO"},
    {"ModelConfigLoop", "roofline --model {D}/loopA.json --hw h100-sxm", 2, "symbolic-link loop"},
    {"ModelConfigDirectory", "roofline --model {D}/dir.json --hw h100-sxm", 2, "is a directory"},
    {"ReportDirectory", "compare {D}/r.json {D}", 2, "is a directory"},
    {"ReportProcSelfMem", "compare {D}/r.json /proc/self/mem", 2, "/proc or /sys file"},
    {"ReportLinkLoop", "compare {D}/r.json {D}/loop1", 2, "symbolic-link loop"},
    {"ReportNameTooLong", "compare {D}/r.json {D}/LONG.json", 2, "too long"},
    {"ReportDevZero", "plot /dev/zero -o {D}/z.svg", 2, "character device"},
    {"PlotReportFromStdinPipe", "plot /dev/stdin -o {D}/pipe.svg < {D}/r.json", 0, "wrote"},
    {"RooflineFromDirectory", "roofline --from {D}", 2, "is a directory"},
    {"RooflineFromWithJson", "roofline --from {D}/r.json --json {D}/ignored.json", 2, "with --from"},
    // ---- hardware files and plot ceilings (10.6)
    {"HwFileHugeFigure", "roofline --model tiny --hw-file {D}/hw_huge.json", 2, "outside the plausible range"},
    {"HwFileDenormalFigure", "roofline --model tiny --hw-file {D}/hw_denormal.json", 2, "outside the plausible range"},
    {"HwFileDirectory", "roofline --model tiny --hw-file {D}", 2, "is a directory"},
    {"HwFileDevZero", "roofline --model tiny --hw-file /dev/zero", 2, "character device"},
    {"HwFileNotJson", "roofline --model tiny --hw-file {D}/prompt.txt", 2, "not valid JSON"},
    {"PlotHwFileHuge", "plot {D}/r.json --hw-file {D}/hw_huge.json -o {D}/x.svg", 2, "outside the plausible range"},
    {"PlotReportHugeCeiling", "plot {D}/r_huge_ceiling.json -o {D}/x.svg", 2, "outside 0 to 1e19"},
    {"PlotReportDenormalBandwidth", "plot {D}/r_denormal_bw.json -o {D}/x.svg", 0, "wrote"},
    {"PlotReportExtremePoints", "plot {D}/r_extreme_ops.json -o {D}/x.svg", 0, "wrote"},
    {"PlotReportExtremePointsNoInf", "plot {D}/r_extreme_ops.json -o /dev/stdout", 0, "</svg>"},
    {"RooflineJsonToStdout", "roofline --model tiny --hw h100-sxm --input 8 --output 4 --json /dev/stdout", 0, "\"kind\": \"prediction\""},
    {"RooflineJsonToStdoutPipe", "roofline --model tiny --hw h100-sxm --input 8 --output 4 --json /dev/stdout | cat", 0, "\"kind\": \"prediction\""},
    {"RooflineJsonToDevFd", "roofline --model tiny --hw h100-sxm --input 8 --output 4 --json /dev/fd/1", 0, "\"kind\": \"prediction\""},
    // ---- reports and predictions with wrong types or negative values
    {"CompareNegativeTime", "compare {D}/r.json {D}/r_neg_time.json", 2, "stages[0].time_ms is -1"},
    {"CompareStringMetric", "compare {D}/r.json {D}/r_str_metric.json", 2, "'metrics.ttft_ms' is string, expected a number"},
    {"CompareNegativeBatch", "compare {D}/r.json {D}/r_neg_batch.json", 2, "run.batch is -3"},
    {"CompareFractionalTokens", "compare {D}/r.json {D}/r_float_tokens.json", 2, "'run.input_tokens' is number, expected an integer"},
    {"CompareStagesNotList", "compare {D}/r.json {D}/r_stages_obj.json", 2, "'stages' is object, expected an array"},
    {"CompareRowNotObject", "compare {D}/r.json {D}/r_row_num.json", 2, "'stages[1]' is number, expected an object"},
    {"CompareNegativeOpBytes", "compare {D}/r.json {D}/r_neg_bytes.json", 2, "ops[0].bytes is -"},
    {"CompareBadTokenId", "compare {D}/r.json {D}/r_bad_token.json", 2, "run.output_token_ids[0]"},
    {"PlotPredictionStringFlops", "plot {D}/p_str_flops.json -o {D}/x.svg", 2, "'ops[0].flops' is string, expected a number"},
    {"PlotPredictionNegativeFloor", "plot {D}/p_neg_floor.json -o {D}/x.svg", 2, "floor_ms is -2"},
    {"PlotKindNotAString", "plot {D}/p_kind_number.json -o {D}/x.svg", 2, "kind"},
    {"RooflineFromNegative", "roofline --from {D}/r_neg_time.json", 2, "stages[0].time_ms is -1"},
    // ---- and what must still work
    {"RunPromptFile", "run --model tiny -q --output 2 --warmup 0 --prompt-file {D}/prompt.txt", 0, "tokenize"},
    {"RunJsonDevNull", "run --model tiny -q --output 2 --warmup 0 --json /dev/null", 0, "decode"},
    {"PlotToDevNull", "plot {D}/r.json -o /dev/null", 0, "wrote /dev/null"},
    {"RooflineHugeContextOk", "roofline --model {D}/huge_ctx.json --hw h100-sxm --input 1000000 --output 2", 0, "TTFT"},
    {"RooflineMaxOutputFast", "roofline --model {D}/huge_ctx.json --hw h100-sxm --input 8 --output 1048576", 0, "TTFT"},
};
// clang-format on

class BadInputs : public ::testing::TestWithParam<Case> {
 public:
  static fs::path dir;

  static void write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
  }
  static json load(const std::string& name) {
    return json::parse(cli_test::slurp((dir / name).string()));
  }
  static void save(const std::string& name, const json& j) { write(name, j.dump()); }

  static void SetUpTestSuite() {
    dir = cli_test::temp_dir("bad-inputs");
    // A directory left by an earlier process with this pid would make the links below fail
    // (and skip the suite): start from an empty one, and remove it at the end.
    fs::remove_all(dir);
    fs::create_directories(dir);
    write("prompt.txt", "The quick brown fox jumps over the lazy dog.");
    write("empty.txt", "");
    write("big_prompt.txt", std::string((size_t(1) << 20) + 1, 'x'));
    {
      std::string words;
      for (int i = 0; i < 20000; ++i) words += "token" + std::to_string(i) + " ";
      write("long_prompt.txt", words);  // far more tokens than tiny's context, under the cap
    }
    fs::create_directories(dir / "dir.json");
    fs::create_symlink("loop2", dir / "loop1");
    fs::create_symlink("loop1", dir / "loop2");
    fs::create_symlink("loopB.json", dir / "loopA.json");
    fs::create_symlink("loopA.json", dir / "loopB.json");
    fs::create_symlink("same.out", dir / "same_link.out");
    ::mkfifo((dir / "in.fifo").c_str(), 0644);
    ::mkfifo((dir / "out.fifo").c_str(), 0644);
    {
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      const std::string p = (dir / "sock").string();
      ASSERT_LT(p.size(), sizeof a.sun_path);
      std::memcpy(a.sun_path, p.c_str(), p.size());
      ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
      ::close(s);  // the socket file stays
    }
    // A model config with a context far beyond the token cap (roofline only).
    json cfg = json::parse(cli_test::slurp(std::string(LATPROF_TEST_DIR) + "/../models/tiny.json"));
    cfg["name"] = "huge-ctx";
    cfg["max_seq_len"] = int64_t(1) << 22;  // the config reader's own cap
    save("huge_ctx.json", cfg);
    // Hardware files with extreme but finite figures.
    json hw = json::parse(
        cli_test::slurp(std::string(LATPROF_TEST_DIR) + "/../models/hardware/h100-sxm.json"));
    hw["fp16_tensor_flops_per_s"] = 1e308;
    save("hw_huge.json", hw);
    hw["fp16_tensor_flops_per_s"] = 989.5e12;
    hw["mem_bw_bytes_per_s"] = 5e-324;
    save("hw_denormal.json", hw);
    // A real report and a prediction, then broken copies.
    const auto r = cli_test::latprof("run --model tiny -q --input 8 --output 4 --warmup 0 --json " +
                                     (dir / "r.json").string());
    ASSERT_EQ(r.code, 0) << r.err;
    const auto p =
        cli_test::latprof("roofline --model tiny --hw h100-sxm --input 8 --output 4 --json " +
                          (dir / "p.json").string());
    ASSERT_EQ(p.code, 0) << p.err;
    const json good = load("r.json");
    save("r2.json", good);
    fs::create_symlink("r2.json", dir / "r2_link.json");
    auto mutate = [&](const std::string& name, const std::function<void(json&)>& f,
                      const json& base) {
      json j = base;
      f(j);
      save(name, j);
    };
    mutate(
        "r_neg_time.json", [](json& j) { j["stages"][0]["time_ms"] = -1; }, good);
    mutate(
        "r_str_metric.json", [](json& j) { j["metrics"]["ttft_ms"] = "fast"; }, good);
    mutate(
        "r_neg_batch.json", [](json& j) { j["run"]["batch"] = -3; }, good);
    mutate(
        "r_float_tokens.json", [](json& j) { j["run"]["input_tokens"] = 2.5; }, good);
    mutate(
        "r_stages_obj.json",
        [](json& j) {
          j["stages"] = json::object({{"a", 1}});
        },
        good);
    mutate(
        "r_row_num.json", [](json& j) { j["stages"][1] = 7; }, good);
    mutate(
        "r_neg_bytes.json", [](json& j) { j["ops"][0]["bytes"] = -1e9; }, good);
    mutate(
        "r_bad_token.json", [](json& j) { j["run"]["output_token_ids"][0] = -4; }, good);
    mutate(
        "r_huge_ceiling.json", [](json& j) { j["ceilings"]["matmul_flops_per_s"] = 1e308; }, good);
    mutate(
        "r_denormal_bw.json",
        [](json& j) {
          j["ceilings"]["mem_bw_bytes_per_s"] = 5e-324;
          j["ceilings"]["matmul_flops_per_s"] = 1e19;
          j["ceilings"]["vector_flops_per_s"] = 4.9e-324;
        },
        good);
    mutate(
        "r_extreme_ops.json",
        [](json& j) {
          j["ops"][0]["flops"] = 1e300;
          j["ops"][0]["time_ms"] = 5e-324;
          j["ops"][1]["flops"] = 5e-324;
          j["ops"][1]["bytes"] = 1e300;
        },
        good);
    const json pred = load("p.json");
    mutate(
        "p_str_flops.json", [](json& j) { j["ops"][0]["flops"] = "many"; }, pred);
    mutate(
        "p_neg_floor.json", [](json& j) { j["ops"][0]["floor_ms"] = -2; }, pred);
    mutate(
        "p_kind_number.json", [](json& j) { j["kind"] = 3; }, pred);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
fs::path BadInputs::dir;

std::string expand(std::string s, const std::string& d) {
  for (size_t at; (at = s.find("{D}")) != std::string::npos;) s.replace(at, 3, d);
  for (size_t at; (at = s.find("LONG")) != std::string::npos;) s.replace(at, 4, kLong);
  return s;
}

TEST_P(BadInputs, ExitsWithCodeAndMessage) {
  const Case& c = GetParam();
  // Run from the scratch directory (for the names without a slash), under a timeout.
  const std::string args = expand(c.args, dir.string());
  const auto r = cli_test::latprof_in(dir.string(), kTimeoutS, args);
  ASSERT_NE(r.code, 124) << "hung (killed after " << kTimeoutS << " s): latprof " << args;
  EXPECT_EQ(r.code, c.code) << "latprof " << args << "\nstderr: " << r.err;
  const std::string& text = c.code == 0 ? r.out : r.err;
  EXPECT_NE(text.find(c.says), std::string::npos) << "latprof " << args << "\nexpected: " << c.says
                                                  << "\nstdout: " << r.out << "\nstderr: " << r.err;
  if (c.code == 2) {
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_TRUE(r.err.starts_with("latprof: error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Issue10, BadInputs, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

}  // namespace
