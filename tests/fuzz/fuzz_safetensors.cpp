// libFuzzer target: the safetensors header parser and the tensor views it returns. Any input must
// either parse or raise UsageError. Built by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "core/error.hpp"
#include "model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace latprof;
  try {
    const safetensors::File f = safetensors::parse(data, size, "<fuzz>");
    unsigned sum = 0;
    for (const auto& t : f.tensors) {
      if (t.nbytes) sum += t.data[0] + t.data[t.nbytes - 1];
      try {
        const FileTensor ft = safetensors::to_file_tensor(f, t);
        sum += unsigned(ft.numel());
      } catch (const UsageError&) {
      }
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const UsageError&) {
  }
  return 0;
}
