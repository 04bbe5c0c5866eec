// libFuzzer target: the GGUF parser, the tensor views and the tokenizer built from its metadata.
// Any input must either parse or raise UsageError; sanitizers catch everything else.
// Built by scripts/fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer_vocab.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace latprof;
  try {
    const gguf::File f = gguf::parse(data, size, "<fuzz>");
    unsigned sum = 0;
    for (const auto& t : f.tensors) {
      const FileTensor ft = gguf::to_file_tensor(f, t);
      if (ft.nbytes) sum += ft.data[0] + ft.data[ft.nbytes - 1];  // bounds: ASan checks these
    }
    try {
      if (auto tok = tokenizer_from_gguf(f)) {
        const auto ids = tok->encode("Hello wor\xc3\xa9ld \xe4\xb8\xad 123 <s>", true);
        sum += unsigned(tok->decode(ids).size());
      }
    } catch (const UsageError&) {
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const UsageError&) {
  }
  return 0;
}
