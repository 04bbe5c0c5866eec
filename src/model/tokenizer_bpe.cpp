// Byte-level BPE (GPT-2, Llama 3): bytes mapped to printable code points, a hand-written
// pre-tokenizer equivalent to the split regex, merges by rank.
#include <unordered_map>

#include "core/error.hpp"
#include "model/tokenizer_vocab.hpp"

namespace latprof {

namespace {

using tok_detail::utf8_append;
using tok_detail::utf8_decode;

enum class Cls : uint8_t { letter, number, space, other };

bool in(uint32_t c, uint32_t lo, uint32_t hi) {
  return c >= lo && c <= hi;
}

// A small Unicode classifier: \s, \p{N}, \p{L} for the scripts models meet in practice;
// everything else (punctuation, symbols, emoji, marks) counts as "other".
Cls classify(uint32_t c) {
  if (c < 0x80) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0d)) return Cls::space;
    if (c >= '0' && c <= '9') return Cls::number;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return Cls::letter;
    return Cls::other;
  }
  if (c == 0x85 || c == 0xa0 || c == 0x1680 || in(c, 0x2000, 0x200a) || c == 0x2028 ||
      c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000)
    return Cls::space;
  if (c == 0xb2 || c == 0xb3 || c == 0xb9 || in(c, 0xbc, 0xbe) || in(c, 0x660, 0x669) ||
      in(c, 0x6f0, 0x6f9) || in(c, 0x966, 0x96f) || in(c, 0x2070, 0x2079) ||
      in(c, 0x2080, 0x2089) || in(c, 0x2150, 0x2189) || in(c, 0x2460, 0x249b) ||
      in(c, 0xff10, 0xff19))
    return Cls::number;
  if (c == 0xaa || c == 0xb5 || c == 0xba || (in(c, 0xc0, 0x2c1) && c != 0xd7 && c != 0xf7) ||
      in(c, 0x2c6, 0x2d1) || in(c, 0x370, 0x373) || in(c, 0x376, 0x37d) || in(c, 0x386, 0x3ff) ||
      in(c, 0x400, 0x481) || in(c, 0x48a, 0x52f) || in(c, 0x531, 0x587) || in(c, 0x5d0, 0x5f2) ||
      in(c, 0x620, 0x64a) || in(c, 0x671, 0x6d3) || in(c, 0x904, 0x939) || in(c, 0xe01, 0xe30) ||
      in(c, 0x10a0, 0x10ff) || in(c, 0x1100, 0x11ff) || in(c, 0x1e00, 0x1fbc) ||
      in(c, 0x3041, 0x3096) || in(c, 0x30a1, 0x30fa) || in(c, 0x3105, 0x312f) ||
      in(c, 0x3131, 0x318e) || in(c, 0x3400, 0x4dbf) || in(c, 0x4e00, 0x9fff) ||
      in(c, 0xac00, 0xd7a3) || in(c, 0xf900, 0xfaff) || in(c, 0xff21, 0xff3a) ||
      in(c, 0xff41, 0xff5a) || in(c, 0xff66, 0xff9d) || in(c, 0x20000, 0x2fa1f))
    return Cls::letter;
  return Cls::other;
}

struct Cp {
  uint32_t c;
  size_t off, len;
  Cls cls;
};

bool is_nl(uint32_t c) {
  return c == '\r' || c == '\n';
}

// Length (in code points) of a contraction 's 't 're 've 'm 'll 'd at i, or 0.
size_t contraction(const std::vector<Cp>& v, size_t i, bool any_case) {
  if (v[i].c != '\'' || i + 1 >= v.size()) return 0;
  auto low = [&](size_t k) -> uint32_t {
    if (k >= v.size()) return 0;
    uint32_t c = v[k].c;
    return any_case && c >= 'A' && c <= 'Z' ? c + 32 : c;
  };
  const uint32_t a = low(i + 1), b = low(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The pieces (as code-point ranges [begin, end)) of the GPT-2 or Llama 3 split regex.
std::vector<std::pair<size_t, size_t>> pre_split(const std::vector<Cp>& v, bool llama3) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = v.size();
  auto run = [&](size_t j, Cls c, size_t max = SIZE_MAX) {
    size_t k = j;
    while (k < n && v[k].cls == c && k - j < max) ++k;
    return k;
  };
  size_t i = 0;
  while (i < n) {
    size_t e = 0;
    if (size_t c = contraction(v, i, llama3)) {
      e = i + c;
    } else if (!llama3) {
      size_t j = i;
      if (v[j].c == ' ' && j + 1 < n && v[j + 1].cls != Cls::space) ++j;
      if (v[j].cls != Cls::space) e = run(j, v[j].cls);
    } else {
      if (v[i].cls == Cls::letter) {
        e = run(i, Cls::letter);
      } else if (v[i].cls != Cls::number && !is_nl(v[i].c) && i + 1 < n &&
                 v[i + 1].cls == Cls::letter) {
        e = run(i + 1, Cls::letter);
      } else if (v[i].cls == Cls::number) {
        e = run(i, Cls::number, 3);
      } else {
        size_t j = i;
        if (v[j].c == ' ' && j + 1 < n && v[j + 1].cls == Cls::other) ++j;
        if (v[j].cls == Cls::other) {
          e = run(j, Cls::other);
          while (e < n && is_nl(v[e].c)) ++e;
        }
      }
      if (e == 0 && v[i].cls == Cls::space) {  // \s*[\r\n]+
        const size_t ws = run(i, Cls::space);
        for (size_t k = ws; k > i; --k)
          if (is_nl(v[k - 1].c)) {
            e = k;
            break;
          }
      }
    }
    if (e == 0 && v[i].cls == Cls::space) {  // \s+(?!\S) | \s+
      const size_t ws = run(i, Cls::space);
      e = ws == n || ws - i == 1 ? ws : ws - 1;
    }
    if (e <= i) e = i + 1;
    out.emplace_back(i, e);
    i = e;
  }
  return out;
}

class BpeTokenizer final : public tok_detail::VocabTokenizer {
 public:
  explicit BpeTokenizer(VocabData v) {
    init_common(v);
    llama3_ = v.llama3_split;
    if (v.merges.empty()) usage_error(origin_ + ": the byte-level BPE vocabulary has no merges");
    // GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the rest to 256+.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = keep ? uint32_t(b) : next++;
      byte_enc_[b].clear();
      utf8_append(byte_enc_[b], cp);
      byte_dec_[cp] = uint8_t(b);
    }
    index_.reserve(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) index_.emplace(tokens_[i], int32_t(i));
    merge_rank_.reserve(v.merges.size());
    for (size_t r = 0; r < v.merges.size(); ++r) merge_rank_.emplace(v.merges[r], int32_t(r));
  }

  std::string name() const override {
    return std::string("byte-level BPE (") + std::to_string(tokens_.size()) + " tokens, " +
           std::to_string(merge_rank_.size()) + " merges, " + (llama3_ ? "Llama 3" : "GPT-2") +
           " split)";
  }

  std::string decode_token(int32_t id) const override {
    if (id < 0 || size_t(id) >= tokens_.size()) return "";
    const auto k = kinds_[size_t(id)];
    const std::string& p = tokens_[size_t(id)];
    if (k == TokenKind::control) return "";
    if (k == TokenKind::user_defined) return p;
    std::string out;
    for (size_t i = 0; i < p.size();) {
      size_t len;
      const uint32_t cp = utf8_decode(p, i, &len);
      auto it = byte_dec_.find(cp);
      if (it != byte_dec_.end())
        out += char(it->second);
      else
        out.append(p, i, len);
      i += len;
    }
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += decode_token(id);
    return out;
  }

 protected:
  void encode_fragment(const std::string& text, bool, std::vector<int32_t>& out) const override {
    std::vector<Cp> cps;
    cps.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      size_t len;
      const uint32_t c = utf8_decode(text, i, &len);
      cps.push_back({c, i, len, classify(c)});
      i += len;
    }
    std::string mapped;
    for (auto [b, e] : pre_split(cps, llama3_)) {
      mapped.clear();
      const size_t from = cps[b].off, to = cps[e - 1].off + cps[e - 1].len;
      for (size_t k = from; k < to; ++k) mapped += byte_enc_[static_cast<unsigned char>(text[k])];
      bpe(mapped, out);
    }
  }

  std::vector<std::string> prompt_words() const override {
    std::vector<std::string> words;
    std::vector<int32_t> ids;
    const std::string g = "\xc4\xa0";  // U+0120, the mapped space
    for (size_t i = 0; i < tokens_.size() && words.size() < 4096; ++i) {
      const std::string& p = tokens_[i];
      if (kinds_[i] != TokenKind::normal || p.size() < 4 || p.compare(0, 2, g) != 0) continue;
      bool letters = true;
      for (size_t k = 2; k < p.size(); ++k) letters = letters && p[k] >= 'a' && p[k] <= 'z';
      if (!letters) continue;
      std::string w(1, ' ');
      w.append(p, 2);
      ids.clear();
      encode_fragment(w, false, ids);
      if (ids.size() == 1) words.push_back(std::move(w));
    }
    return words;
  }

 private:
  void bpe(const std::string& word, std::vector<int32_t>& out) const {
    if (llama3_) {  // Llama 3 looks whole pieces up before merging (ignore_merges)
      auto it = index_.find(word);
      if (it != index_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<std::string> sym;
    for (size_t i = 0; i < word.size();) {
      const size_t n = tok_detail::utf8_len(word, i);
      sym.push_back(word.substr(i, n));
      i += n;
    }
    std::string key;
    while (sym.size() > 1) {
      int32_t best = INT32_MAX;
      size_t at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        key = sym[i];
        key += ' ';
        key += sym[i + 1];
        auto it = merge_rank_.find(key);
        if (it != merge_rank_.end() && it->second < best) {
          best = it->second;
          at = i;
        }
      }
      if (best == INT32_MAX) break;
      const std::string l = sym[at], r = sym[at + 1];
      std::vector<std::string> next;
      next.reserve(sym.size());
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == l && sym[i + 1] == r) {
          next.push_back(l + r);
          ++i;
        } else {
          next.push_back(sym[i]);
        }
      }
      sym.swap(next);
    }
    for (const auto& s : sym) {
      auto it = index_.find(s);
      if (it != index_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (size_t i = 0; i < s.size();) {  // not in the vocabulary: per code point, else unknown
        const size_t n = tok_detail::utf8_len(s, i);
        auto c = index_.find(s.substr(i, n));
        if (c != index_.end())
          out.push_back(c->second);
        else if (unk_ >= 0)
          out.push_back(unk_);
        i += n;
      }
    }
  }

  bool llama3_ = false;
  std::string byte_enc_[256];
  std::unordered_map<uint32_t, uint8_t> byte_dec_;
  std::unordered_map<std::string, int32_t> index_;
  std::unordered_map<std::string, int32_t> merge_rank_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(VocabData v) {
  return std::make_unique<BpeTokenizer>(std::move(v));
}

}  // namespace latprof
