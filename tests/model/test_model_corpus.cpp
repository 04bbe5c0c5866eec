// The seed corpus of the fuzz targets (tests/corpus/, written by scripts/make-fuzz-corpus.py):
// good_* files parse, bad_* files raise a UsageError naming the file, nothing crashes. Also
// every prefix of each good file is handled.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.hpp"
#include "model/gguf.hpp"
#include "model/mmap_file.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer_vocab.hpp"

namespace {

using namespace latprof;
namespace fs = std::filesystem;

void parse_any(const uint8_t* d, size_t n, const std::string& path) {
  if (path.ends_with(".gguf")) {
    const auto f = gguf::parse(d, n, path);
    for (const auto& t : f.tensors) gguf::to_file_tensor(f, t);
    tokenizer_from_gguf(f);
  } else {
    const auto f = safetensors::parse(d, n, path);
    for (const auto& t : f.tensors) safetensors::to_file_tensor(f, t);
  }
}

TEST(FuzzCorpus, GoodFilesParseBadFilesAreUsageErrors) {
  int good = 0, bad = 0;
  for (const auto& e : fs::directory_iterator(LATPROF_TEST_DIR "/corpus")) {
    const std::string p = e.path().string(), name = e.path().filename().string();
    SCOPED_TRACE(name);
    MappedFile mf(p);
    if (name.starts_with("good_")) {
      EXPECT_NO_THROW(parse_any(mf.data(), mf.size(), p));
      ++good;
      for (size_t cut = 0; cut < mf.size(); ++cut) {
        try {
          parse_any(mf.data(), cut, p);
        } catch (const UsageError&) {
        }
      }
    } else if (name.starts_with("bad_")) {
      try {
        parse_any(mf.data(), mf.size(), p);
        ADD_FAILURE() << "accepted";
      } catch (const UsageError& err) {
        EXPECT_NE(std::string(err.what()).find(p), std::string::npos) << err.what();
      }
      ++bad;
    }
  }
  EXPECT_GE(good, 3);
  EXPECT_GE(bad, 30);
}

}  // namespace
