// Synthetic weights and the synthetic tokenizer of the built-in models.
#include <cctype>
#include <cmath>
#include <unordered_map>

#include "core/rng.hpp"
#include "model/tokenizer.hpp"
#include "model/weights.hpp"

namespace latprof {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class SyntheticWeights final : public WeightSource {
 public:
  explicit SyntheticWeights(uint64_t seed) : seed_(seed) {}
  std::string describe() const override { return "synthetic (seed " + std::to_string(seed_) + ")"; }
  // Uniform in ±sqrt(3 / n_in): unit-variance outputs for unit-variance inputs, so activations
  // stay in a realistic range through all layers.
  void load_linear(const std::string& name, DeviceWeight& w, Backend& b) override {
    b.fill_weight(w, rng::tensor_key(seed_, fnv1a(name)), std::sqrt(3.0f / float(w.n_in)));
  }
  void load_embedding(const std::string& name, DeviceWeight& w, Backend& b) override {
    b.fill_weight(w, rng::tensor_key(seed_, fnv1a(name)), 1.0f);
  }
  // Norm weights near 1, as in trained models.
  void load_vector(const std::string& name, float* dst, int64_t n, Backend& b) override {
    b.fill_f32(dst, n, rng::tensor_key(seed_, fnv1a(name)), 1.0f, 0.1f);
  }

 private:
  uint64_t seed_;
};

// Pseudo-word for id: syllables from a consonant-vowel alphabet, unique per id.
std::string word_for(int64_t id) {
  static const char* const kSyl[] = {"ba", "ke", "ti", "do", "mu", "ra", "se", "lo", "ni", "vu",
                                     "fa", "ge", "hi", "jo", "pu", "wa", "ze", "co", "yi", "xu"};
  constexpr int64_t n = 20;
  std::string w;
  int64_t v = id;
  do {
    w += kSyl[v % n];
    v /= n;
  } while (v > 0);
  return w;
}

class SyntheticTokenizer final : public Tokenizer {
 public:
  explicit SyntheticTokenizer(int64_t vocab) : vocab_(vocab) {
    words_.reserve(size_t(vocab));
    for (int64_t i = 0; i < vocab; ++i) {
      words_.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : word_for(i));
      index_.emplace(words_.back(), int32_t(i));
    }
  }
  std::string name() const override {
    return "synthetic word tokenizer (" + std::to_string(vocab_) + " pseudo-words)";
  }
  int64_t vocab_size() const override { return vocab_; }
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(bos_id());
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      size_t j = i;
      while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      if (j > i) {
        auto it = index_.find(text.substr(i, j - i));
        ids.push_back(it == index_.end() ? 0 : it->second);
      }
      i = j;
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id == bos_id()) continue;
      if (!out.empty()) out += ' ';
      out += decode_token(id);
    }
    return out;
  }
  std::string decode_token(int32_t id) const override {
    return id >= 0 && id < vocab_ ? words_[size_t(id)] : std::string("<unk>");
  }
  int32_t bos_id() const override { return vocab_ > 1 ? 1 : -1; }
  int32_t eos_id() const override { return vocab_ > 2 ? 2 : -1; }
  std::string make_prompt(int64_t n_tokens, uint64_t seed) const override {
    std::string text;
    const uint64_t key = rng::tensor_key(seed, 0x70726f6d7074ull);  // "prompt"
    const int64_t first = vocab_ > 3 ? 3 : 0;
    for (int64_t i = 0; i + 1 < n_tokens; ++i) {  // BOS is the first token
      const uint64_t r = rng::splitmix64(key + uint64_t(i));
      if (!text.empty()) text += ' ';
      text += words_[size_t(first + int64_t(r % uint64_t(vocab_ - first)))];
    }
    return text;
  }

 private:
  int64_t vocab_;
  std::vector<std::string> words_;
  std::unordered_map<std::string, int32_t> index_;
};

}  // namespace

std::unique_ptr<WeightSource> make_synthetic_weights(uint64_t seed) {
  return std::make_unique<SyntheticWeights>(seed);
}

std::unique_ptr<Tokenizer> make_synthetic_tokenizer(int64_t vocab_size) {
  return std::make_unique<SyntheticTokenizer>(vocab_size);
}

}  // namespace latprof
