// SentencePiece-style BPE (Llama 2): "▁" for spaces, best-first merges of adjacent pieces (by
// score of the merged piece, or by merge rank), byte fallback <0xNN>.
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "core/error.hpp"
#include "model/tokenizer_vocab.hpp"

namespace latprof {

namespace {

using tok_detail::utf8_len;

const std::string kSpace = "\xe2\x96\x81";  // U+2581 ▁

// <0xNN> -> NN, or -1.
int parse_byte_token(const std::string& p) {
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  const int a = hex(p[3]), b = hex(p[4]);
  return a < 0 || b < 0 ? -1 : a * 16 + b;
}

class SpmTokenizer final : public tok_detail::VocabTokenizer {
 public:
  explicit SpmTokenizer(VocabData v) {
    init_common(v);
    space_prefix_ = v.add_space_prefix;
    scores_ = std::move(v.scores);
    use_ranks_ = !v.merges.empty();
    if (!use_ranks_ && scores_.size() != tokens_.size())
      usage_error(origin_ + ": the SentencePiece vocabulary has " + std::to_string(tokens_.size()) +
                  " tokens but " + std::to_string(scores_.size()) + " scores");
    index_.reserve(tokens_.size());
    for (size_t i = 0; i < tokens_.size(); ++i) index_.emplace(tokens_[i], int32_t(i));
    for (auto& b : byte_ids_) b = -1;
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const int b = parse_byte_token(tokens_[i]);
      if (b >= 0 && (kinds_[i] == TokenKind::byte || kinds_[i] == TokenKind::normal)) {
        kinds_[i] = TokenKind::byte;
        if (byte_ids_[b] < 0) byte_ids_[b] = int32_t(i);
      }
    }
    for (size_t r = 0; r < v.merges.size(); ++r) merge_rank_.emplace(v.merges[r], int32_t(r));
    for (int b = 0; b < 256; ++b) n_bytes_ += byte_ids_[b] >= 0;
  }

  std::string name() const override {
    return "SentencePiece BPE (" + std::to_string(tokens_.size()) + " tokens" +
           (n_bytes_ == 256 ? ", byte fallback" : "") + (use_ranks_ ? ", merge ranks" : "") + ")";
  }

  std::string decode_token(int32_t id) const override {
    if (id < 0 || size_t(id) >= tokens_.size()) return "";
    const auto k = kinds_[size_t(id)];
    const std::string& p = tokens_[size_t(id)];
    if (k == TokenKind::control) return "";
    if (k == TokenKind::byte) return std::string(1, char(parse_byte_token(p)));
    std::string out;
    out.reserve(p.size());
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, kSpace) == 0) {
        out += ' ';
        i += 3;
      } else {
        out += p[i++];
      }
    }
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    bool first = true;
    for (int32_t id : ids) {
      std::string t = decode_token(id);
      if (t.empty()) continue;
      // The "▁" that encoding prefixed to the text is not part of it.
      if (first && space_prefix_ && t[0] == ' ' && kinds_[size_t(id)] != TokenKind::byte)
        t.erase(0, 1);
      first = false;
      out += t;
    }
    return out;
  }

 protected:
  void encode_fragment(const std::string& text, bool at_start,
                       std::vector<int32_t>& out) const override {
    std::string s;
    s.reserve(text.size() + 8);
    if (at_start && space_prefix_) s += kSpace;
    for (char c : text) {
      if (c == ' ')
        s += kSpace;
      else
        s += c;
    }
    struct Sym {
      size_t start, len;
      int prev, next;
    };
    std::vector<Sym> sym;
    for (size_t i = 0; i < s.size();) {
      const size_t n = utf8_len(s, i);
      sym.push_back({i, n, int(sym.size()) - 1, int(sym.size()) + 1});
      i += n;
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    struct Bigram {
      int left, right;
      double score;
      size_t size;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    std::string key;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const Sym& a = sym[size_t(l)];
      const Sym& b = sym[size_t(r)];
      double score;
      if (use_ranks_) {
        key.assign(s, a.start, a.len);
        key += ' ';
        key.append(s, b.start, b.len);
        auto it = merge_rank_.find(key);
        if (it == merge_rank_.end()) return;
        if (!index_.count(s.substr(a.start, a.len + b.len))) return;
        score = -double(it->second);
      } else {
        auto it = index_.find(s.substr(a.start, a.len + b.len));
        if (it == index_.end()) return;
        score = scores_[size_t(it->second)];
      }
      queue.push({l, r, score, a.len + b.len});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Sym& a = sym[size_t(bg.left)];
      Sym& b = sym[size_t(bg.right)];
      if (a.len == 0 || b.len == 0 || a.len + b.len != bg.size || a.next != bg.right) continue;
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (b.next >= 0) sym[size_t(b.next)].prev = bg.left;
      try_add(a.prev, bg.left);
      try_add(bg.left, a.next);
    }
    for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
      const Sym& a = sym[size_t(i)];
      auto it = index_.find(s.substr(a.start, a.len));
      if (it != index_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (size_t k = 0; k < a.len; ++k) {
        const int32_t b = byte_ids_[static_cast<unsigned char>(s[a.start + k])];
        if (b >= 0)
          out.push_back(b);
        else if (unk_ >= 0)
          out.push_back(unk_);
      }
    }
  }

  std::vector<std::string> prompt_words() const override {
    std::vector<std::string> words;
    std::vector<int32_t> ids;
    for (size_t i = 0; i < tokens_.size() && words.size() < 4096; ++i) {
      const std::string& p = tokens_[i];
      if (kinds_[i] != TokenKind::normal || p.size() < 5 || p.compare(0, 3, kSpace) != 0) continue;
      bool letters = true;
      for (size_t k = 3; k < p.size(); ++k) letters = letters && p[k] >= 'a' && p[k] <= 'z';
      if (!letters) continue;
      std::string w(1, ' ');
      w.append(p, 3);
      ids.clear();
      encode_fragment(w, false, ids);
      if (ids.size() == 1) words.push_back(std::move(w));
    }
    return words;
  }

 private:
  bool space_prefix_ = true;
  bool use_ranks_ = false;
  int n_bytes_ = 0;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> index_;
  std::unordered_map<std::string, int32_t> merge_rank_;
  int32_t byte_ids_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(VocabData v) {
  return std::make_unique<SpmTokenizer>(std::move(v));
}

}  // namespace latprof
