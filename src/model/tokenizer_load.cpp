// Vocabularies from GGUF metadata (tokenizer.ggml.*) and from Hugging Face tokenizer.json.
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer_vocab.hpp"

namespace latprof {

namespace {

int32_t gguf_token_id(const gguf::File& f, const std::string& key, size_t n) {
  auto v = f.opt_int(key);
  if (!v) return -1;
  if (*v < 0 || *v >= int64_t(n)) {
    // Some converters write ids past the vocabulary for "none"; treat as absent only when huge.
    usage_error("GGUF file '" + f.path + "': metadata key '" + key + "' is " + std::to_string(*v) +
                ", outside the vocabulary of " + std::to_string(n) + " tokens");
  }
  return int32_t(*v);
}

bool json_has_type(const nlohmann::json& j, const std::string& type) {
  if (j.is_object()) {
    auto t = j.find("type");
    if (t != j.end() && t->is_string() && t->get<std::string>() == type) return true;
    for (auto it = j.begin(); it != j.end(); ++it)
      if (json_has_type(it.value(), type)) return true;
  } else if (j.is_array()) {
    for (const auto& x : j)
      if (json_has_type(x, type)) return true;
  }
  return false;
}

// Finds any string value under key `key` anywhere in j satisfying pred.
template <typename Pred>
bool json_any_string(const nlohmann::json& j, const std::string& key, Pred pred) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == key && it.value().is_string() && pred(it.value().get<std::string>()))
        return true;
      if (json_any_string(it.value(), key, pred)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& x : j)
      if (json_any_string(x, key, pred)) return true;
  }
  return false;
}

std::string token_text(const nlohmann::json& t) {
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string())
    return t["content"].get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const gguf::File& f) {
  const auto model = f.opt_string("tokenizer.ggml.model");
  if (!model) return nullptr;
  const std::string where = "GGUF file '" + f.path + "'";
  const auto* tokens = f.opt_string_array("tokenizer.ggml.tokens");
  if (!tokens) usage_error(where + ": missing metadata key 'tokenizer.ggml.tokens'");
  const size_t n = tokens->size();
  VocabData v;
  v.origin = where;
  v.tokens = *tokens;
  if (const auto* types = f.opt_number_array("tokenizer.ggml.token_type")) {
    if (types->size() != n)
      usage_error(where + ": metadata key 'tokenizer.ggml.token_type' has " +
                  std::to_string(types->size()) + " entries for " + std::to_string(n) + " tokens");
    v.kinds.reserve(n);
    for (double t : *types) {
      const int k = int(t);
      v.kinds.push_back(k >= 1 && k <= 6 ? TokenKind(k) : TokenKind::normal);
    }
  }
  if (const auto* scores = f.opt_number_array("tokenizer.ggml.scores")) {
    if (scores->size() != n)
      usage_error(where + ": metadata key 'tokenizer.ggml.scores' has " +
                  std::to_string(scores->size()) + " entries for " + std::to_string(n) + " tokens");
    v.scores.assign(scores->begin(), scores->end());
  }
  v.bos = gguf_token_id(f, "tokenizer.ggml.bos_token_id", n);
  v.eos = gguf_token_id(f, "tokenizer.ggml.eos_token_id", n);
  v.unk = gguf_token_id(f, "tokenizer.ggml.unknown_token_id", n);
  v.add_space_prefix = f.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  if (*model == "llama") {
    v.add_bos = f.opt_bool("tokenizer.ggml.add_bos_token").value_or(true);
    if (v.scores.empty()) usage_error(where + ": missing metadata key 'tokenizer.ggml.scores'");
    return make_spm_tokenizer(std::move(v));
  }
  if (*model == "gpt2") {
    v.add_bos = f.opt_bool("tokenizer.ggml.add_bos_token").value_or(false);
    const auto* merges = f.opt_string_array("tokenizer.ggml.merges");
    if (!merges) usage_error(where + ": missing metadata key 'tokenizer.ggml.merges'");
    v.merges = *merges;
    const std::string pre = f.opt_string("tokenizer.ggml.pre").value_or("default");
    v.llama3_split =
        pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe";
    return make_bpe_tokenizer(std::move(v));
  }
  usage_error(where + ": metadata key 'tokenizer.ggml.model' is '" + *model +
              "'; supported: llama (SentencePiece BPE), gpt2 (byte-level BPE)");
}

std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& tok,
                                               const nlohmann::json* config,
                                               const std::string& origin) {
  try {
    if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object())
      usage_error(origin + ": no field 'model'");
    const auto& m = tok["model"];
    const std::string type = m.value("type", "BPE");
    if (type != "BPE")
      usage_error(origin + ": model.type '" + type + "' is not supported; supported: BPE");
    if (!m.contains("vocab") || !m["vocab"].is_object())
      usage_error(origin + ": field 'model.vocab' is missing or not an object");
    VocabData v;
    v.origin = origin;
    size_t n = 0;
    auto check_id = [&](int64_t id, const std::string& what) {
      if (id < 0 || id >= (int64_t(1) << 22))
        usage_error(origin + ": " + what + " has id " + std::to_string(id) + ", out of range");
      n = std::max(n, size_t(id) + 1);
    };
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it)
      check_id(it.value().get<int64_t>(), "token '" + it.key() + "'");
    const nlohmann::json added = tok.value("added_tokens", nlohmann::json::array());
    for (const auto& a : added) check_id(a.at("id").get<int64_t>(), "added token");
    v.tokens.assign(n, "");
    v.kinds.assign(n, TokenKind::unused);
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      const auto id = size_t(it.value().get<int64_t>());
      v.tokens[id] = it.key();
      v.kinds[id] = TokenKind::normal;
    }
    for (const auto& a : added) {
      const auto id = size_t(a.at("id").get<int64_t>());
      v.tokens[id] = a.at("content").get<std::string>();
      v.kinds[id] = a.value("special", false) ? TokenKind::control : TokenKind::user_defined;
    }
    if (m.contains("merges") && m["merges"].is_array()) {
      for (const auto& x : m["merges"]) {
        if (x.is_string())
          v.merges.push_back(x.get<std::string>());
        else if (x.is_array() && x.size() == 2)
          v.merges.push_back(x[0].get<std::string>() + " " + x[1].get<std::string>());
        else
          usage_error(origin + ": field 'model.merges' has an entry that is not a pair");
      }
    }
    auto find_id = [&](const std::string& text) -> int32_t {
      if (text.empty()) return -1;
      for (size_t i = 0; i < v.tokens.size(); ++i)
        if (v.tokens[i] == text) return int32_t(i);
      return -1;
    };
    if (m.contains("unk_token") && m["unk_token"].is_string())
      v.unk = find_id(m["unk_token"].get<std::string>());

    const bool byte_level =
        json_has_type(tok.value("pre_tokenizer", nlohmann::json()), "ByteLevel") ||
        json_has_type(tok.value("decoder", nlohmann::json()), "ByteLevel");
    // BOS/EOS: tokenizer_config.json, else the post-processor template, else the usual names.
    bool add_bos_known = false;
    if (config && config->is_object()) {
      if (config->contains("bos_token")) v.bos = find_id(token_text((*config)["bos_token"]));
      if (config->contains("eos_token")) v.eos = find_id(token_text((*config)["eos_token"]));
      if (config->contains("add_bos_token") && (*config)["add_bos_token"].is_boolean()) {
        v.add_bos = (*config)["add_bos_token"].get<bool>();
        add_bos_known = true;
      }
    }
    const nlohmann::json post = tok.value("post_processor", nlohmann::json());
    if (!add_bos_known && post.is_object()) {
      const nlohmann::json* single = nullptr;
      if (post.value("type", "") == "TemplateProcessing" && post.contains("single"))
        single = &post["single"];
      else if (post.contains("processors") && post["processors"].is_array())
        for (const auto& p : post["processors"])
          if (p.value("type", "") == "TemplateProcessing" && p.contains("single"))
            single = &p["single"];
      if (single && single->is_array() && !single->empty() &&
          (*single)[0].contains("SpecialToken")) {
        const int32_t id = find_id((*single)[0]["SpecialToken"].value("id", ""));
        if (id >= 0) {
          if (v.bos < 0) v.bos = id;
          v.add_bos = id == v.bos;
          add_bos_known = true;
        }
      }
    }
    if (v.bos < 0)
      for (const char* s : {"<s>", "<|begin_of_text|>"})
        if (v.bos < 0) v.bos = find_id(s);
    if (v.eos < 0)
      for (const char* s : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
        if (v.eos < 0) v.eos = find_id(s);

    if (byte_level) {
      if (!add_bos_known) v.add_bos = false;
      v.llama3_split = json_any_string(
          tok.value("pre_tokenizer", nlohmann::json()), "Regex",
          [](const std::string& r) { return r.find("{1,3}") != std::string::npos; });
      return make_bpe_tokenizer(std::move(v));
    }
    // SentencePiece style: needs byte fallback or at least a ▁ convention.
    if (!add_bos_known) v.add_bos = true;
    const std::string space = "\xe2\x96\x81";
    const nlohmann::json norm = tok.value("normalizer", nlohmann::json());
    const nlohmann::json pre = tok.value("pre_tokenizer", nlohmann::json());
    v.add_space_prefix =
        json_any_string(norm, "prepend", [&](const std::string& s) { return s == space; }) ||
        (json_has_type(pre, "Metaspace") &&
         !json_any_string(pre, "prepend_scheme",
                          [](const std::string& s) { return s == "never"; }));
    // Merge ranks order the merges; pieces are looked up in the vocabulary.
    if (v.merges.empty()) usage_error(origin + ": field 'model.merges' is empty");
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.kinds[i] == TokenKind::unused) v.kinds[i] = TokenKind::normal;
    return make_spm_tokenizer(std::move(v));
  } catch (const nlohmann::json::exception& e) {
    usage_error(origin + ": bad tokenizer.json: " + e.what());
  }
}

}  // namespace latprof
