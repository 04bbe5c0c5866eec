// Shared parts of the vocabulary tokenizers: UTF-8 helpers, special-token splitting, make_prompt.
#include <algorithm>
#include <stdexcept>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/tokenizer_vocab.hpp"

namespace latprof::tok_detail {

size_t utf8_len(const std::string& s, size_t i) {
  size_t len = 0;
  utf8_decode(s, i, &len);
  return len;
}

uint32_t utf8_decode(const std::string& s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    *len = 1;
    return 0xFFFD;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) {
      *len = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  // Overlong forms and surrogates count as invalid so that every byte round-trips.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) {
    *len = 1;
    return 0xFFFD;
  }
  *len = n;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

void VocabTokenizer::init_common(const VocabData& v) {
  origin_ = v.origin;
  tokens_ = v.tokens;
  if (tokens_.empty()) usage_error(origin_ + ": the tokenizer has an empty vocabulary");
  if (tokens_.size() > (size_t(1) << 22))
    usage_error(origin_ + ": the tokenizer vocabulary has " + std::to_string(tokens_.size()) +
                " tokens, more than 4194304");
  kinds_ = v.kinds;
  if (kinds_.empty()) kinds_.assign(tokens_.size(), TokenKind::normal);
  if (kinds_.size() != tokens_.size())
    usage_error(origin_ + ": token types (" + std::to_string(kinds_.size()) + ") and tokens (" +
                std::to_string(tokens_.size()) + ") differ in number");
  const auto n = int32_t(tokens_.size());
  auto check_id = [&](int32_t id, const char* what) {
    if (id < -1 || id >= n)
      usage_error(origin_ + ": " + what + " token id " + std::to_string(id) +
                  " is outside the vocabulary of " + std::to_string(n));
  };
  check_id(v.bos, "BOS");
  check_id(v.eos, "EOS");
  check_id(v.unk, "unknown");
  bos_ = v.bos;
  eos_ = v.eos;
  unk_ = v.unk;
  add_bos_ = v.add_bos && bos_ >= 0;
  for (int32_t i = 0; i < n; ++i)
    if ((kinds_[size_t(i)] == TokenKind::control || kinds_[size_t(i)] == TokenKind::user_defined) &&
        !tokens_[size_t(i)].empty())
      specials_.emplace_back(tokens_[size_t(i)], i);
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::vector<int32_t> VocabTokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  size_t frag = 0, i = 0;
  while (i < text.size()) {
    const std::pair<std::string, int32_t>* hit = nullptr;
    if (!specials_.empty()) {
      for (const auto& s : specials_)
        if (s.first[0] == text[i] && text.compare(i, s.first.size(), s.first) == 0) {
          hit = &s;
          break;
        }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > frag) encode_fragment(text.substr(frag, i - frag), frag == 0, out);
    out.push_back(hit->second);
    i += hit->first.size();
    frag = i;
  }
  if (text.size() > frag) encode_fragment(text.substr(frag), frag == 0, out);
  return out;
}

std::string VocabTokenizer::make_prompt(int64_t n_tokens, uint64_t seed) const {
  const int64_t base = add_bos_ ? 1 : 0;
  if (n_tokens <= base) return "";
  std::vector<std::string> words = prompt_words();
  if (words.empty())
    for (const char* w : {" a", " b", " c", " d", " e", " o", " x"}) words.emplace_back(w);
  const uint64_t key = rng::tensor_key(seed, 0x70726f6d7074ull);  // "prompt"
  uint64_t k = 0;
  auto next_word = [&]() -> const std::string& {
    return words[size_t(rng::splitmix64(key + k++) % words.size())];
  };
  // Words are one token each after a space, so n - base words are (nearly always) exact; adjust
  // by whole words until the count is exact.
  std::vector<std::string> chosen;
  auto text_of = [&]() {
    std::string t;
    for (const auto& w : chosen) t += w;
    if (!t.empty() && t[0] == ' ') t.erase(0, 1);
    return t;
  };
  while (int64_t(chosen.size()) < n_tokens - base) chosen.push_back(next_word());
  for (int iter = 0; iter < 256; ++iter) {
    const std::string t = text_of();
    const auto c = int64_t(encode(t, add_bos_).size());
    if (c == n_tokens) return t;
    if (c > n_tokens) {
      int64_t drop = std::max<int64_t>(1, (c - n_tokens) / 2);
      while (drop-- > 0 && !chosen.empty()) chosen.pop_back();
    } else {
      int64_t add = std::max<int64_t>(1, (n_tokens - c) / 2);
      while (add-- > 0) chosen.push_back(next_word());
    }
  }
  // Last resort: single letters, which always make at least one token.
  std::string t = text_of();
  for (int iter = 0; iter < 4096; ++iter) {
    const auto c = int64_t(encode(t, add_bos_).size());
    if (c == n_tokens) return t;
    if (c > n_tokens) {
      if (t.empty()) break;
      t.pop_back();
    } else {
      t += char('a' + iter % 26);
    }
  }
  throw std::logic_error(origin_ + ": could not build a prompt of exactly " +
                         std::to_string(n_tokens) + " tokens");
}

}  // namespace latprof::tok_detail
