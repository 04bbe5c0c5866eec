// Values in model files that latprof cannot honour are refused with exit code 2 and one line that
// names the tensor or field: weights holding NaN or infinity (in every stored type, GGUF and
// safetensors), and config fields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cli/cli_util.hpp"
#include "support/model_writer.hpp"

namespace {

using namespace latprof::testing;

cli_test::Result run_model(const std::string& path, const std::string& extra = "") {
  return cli_test::latprof("run --model '" + path +
                           "' --input 4 --output 2 --repeat 1 --warmup 0 -q " + extra);
}

void expect_refused(const cli_test::Result& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << " in " << r.err;
}

TEST(NonFiniteWeights, GgufEveryTypeAndDtype) {
  const std::string dir = temp_dir("nan-gguf");
  for (uint32_t type : {0u, 1u, 30u}) {  // F32, F16, BF16
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -INFINITY}) {
      TinyLlama m = make_tiny_llama(2);
      m.weights["layers.1.w_up"][77] = bad;  // [128, 64]: row 1, column 13
      const std::string p = dir + "/t" + std::to_string(type) + ".gguf";
      write_file(p, tiny_gguf_bytes(m, type));
      for (const char* dtype : {"fp16", "int8"}) {
        SCOPED_TRACE(std::to_string(type) + " " + dtype);
        expect_refused(run_model(p, std::string("--dtype ") + dtype),
                       {p, "blk.1.ffn_up.weight", "NaN or infinity", "row 1, column 13"});
      }
    }
  }
  // Q8_0: a block scale that is infinite.
  TinyLlama m = make_tiny_llama(2);
  GgufWriter g = tiny_gguf(m, 8);
  GgufWriter::Tensor* t = g.find_tensor("blk.0.attn_v.weight");
  ASSERT_NE(t, nullptr);
  const uint16_t inf16 = 0x7c00;
  std::memcpy(&t->data[34 * 3], &inf16, 2);  // 2 blocks per row: row 1, block 1
  const std::string p = dir + "/q8.gguf";
  write_file(p, g.bytes());
  expect_refused(run_model(p), {"blk.0.attn_v.weight", "NaN or infinity", "row 1, column 32"});
  // A norm vector (always F32).
  m.weights["layers.0.ffn_norm"][3] = std::numeric_limits<float>::quiet_NaN();
  write_file(p, tiny_gguf_bytes(m, 1));
  expect_refused(run_model(p), {"blk.0.ffn_norm.weight", "NaN or infinity", "column 3"});
  // A finite F32 value beyond FP16's range: FP16 refuses it, INT8 takes it.
  m = make_tiny_llama(2);
  m.weights["layers.0.wo"][5] = 1e6f;
  write_file(p, tiny_gguf_bytes(m, 0));
  expect_refused(run_model(p), {"blk.0.attn_output.weight", "FP16's range", "--dtype int8"});
  EXPECT_EQ(run_model(p, "--dtype int8").code, 0);
}

TEST(NonFiniteWeights, Safetensors) {
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    SCOPED_TRACE(dtype);
    TinyLlama m = make_tiny_llama(4);
    m.weights["output"][1000] = INFINITY;
    const std::string dir = temp_dir(std::string("nan-st-") + dtype);
    write_tiny_hf(m, dir, dtype);
    const int64_t cols = m.shapes["output"][1];
    expect_refused(run_model(dir), {"lm_head.weight", "NaN or infinity",
                                    "row " + std::to_string(1000 / cols) + ", column " +
                                        std::to_string(1000 % cols)});
  }
  // The same checkpoint without the bad value runs.
  const std::string ok = temp_dir("nan-st-ok");
  write_tiny_hf(make_tiny_llama(4), ok, "F16");
  EXPECT_EQ(run_model(ok).code, 0) << run_model(ok).err;
}

}  // namespace
