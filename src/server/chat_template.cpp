#include "server/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/gguf.hpp"
#include "model/mmap_file.hpp"

namespace latprof::server {

ChatTemplate detect_chat_template(const std::string& t) {
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|im_start|>")) return ChatTemplate::chatml;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplate::llama3;
  if (has("[INST]")) return has("<<SYS>>") ? ChatTemplate::llama2 : ChatTemplate::mistral;
  return ChatTemplate::plain;
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml:
      return "chatml";
    case ChatTemplate::llama3:
      return "llama3";
    case ChatTemplate::llama2:
      return "llama2";
    case ChatTemplate::mistral:
      return "mistral";
    case ChatTemplate::plain:
      break;
  }
  return "plain";
}

bool chat_template_from_name(const std::string& name, ChatTemplate& out) {
  for (ChatTemplate t : {ChatTemplate::plain, ChatTemplate::chatml, ChatTemplate::llama3,
                         ChatTemplate::llama2, ChatTemplate::mistral})
    if (name == chat_template_name(t)) {
      out = t;
      return true;
    }
  return false;
}

std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  std::string out;
  switch (t) {
    case ChatTemplate::chatml:
      for (const ChatMessage& m : messages)
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatTemplate::llama3:
      for (const ChatMessage& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatTemplate::llama2:
    case ChatTemplate::mistral: {
      // A system message is folded into the first user turn.
      std::string system;
      bool first = true;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += (system.empty() ? "" : "\n") + m.content;
          continue;
        }
        if (m.role == "assistant") {
          out += (t == ChatTemplate::llama2 ? " " : "") + m.content +
                 (t == ChatTemplate::llama2 ? " </s><s>" : "</s>");
          continue;
        }
        std::string user = m.content;
        if (first && !system.empty())
          user = t == ChatTemplate::llama2 ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + user
                                           : system + "\n\n" + user;
        first = false;
        out += "[INST] " + user + " [/INST]";
      }
      return out;
    }
    case ChatTemplate::plain:
      break;
  }
  for (const ChatMessage& m : messages) out += m.role + ": " + m.content + "\n";
  return out + "assistant:";
}

std::string model_chat_template(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return "";
  try {
    if (fs::is_directory(path, ec)) {
      std::ifstream in(fs::path(path) / "tokenizer_config.json");
      if (!in) return "";
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_object() || !j.contains("chat_template")) return "";
      const auto& t = j["chat_template"];
      if (t.is_string()) return t.get<std::string>();
      // A list of named templates: the "default" one, else the first.
      if (t.is_array())
        for (const auto& e : t)
          if (e.is_object() && e.value("name", "") == "default" && e["template"].is_string())
            return e["template"].get<std::string>();
      if (t.is_array() && !t.empty() && t[0].is_object() && t[0].contains("template") &&
          t[0]["template"].is_string())
        return t[0]["template"].get<std::string>();
      return "";
    }
    if (path.size() > 5 && path.ends_with(".gguf")) {
      const MappedFile f(path);
      const gguf::File g = gguf::parse(f.data(), f.size(), path);
      return g.opt_string("tokenizer.chat_template").value_or("");
    }
  } catch (const std::exception&) {
    return "";  // the model loader reports a broken file with its own message
  }
  return "";
}

}  // namespace latprof::server
