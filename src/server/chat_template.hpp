#pragma once
// Chat templates. Models ship theirs as Jinja text (GGUF tokenizer.chat_template, Hugging Face
// tokenizer_config.json "chat_template"), and there is no Jinja engine for C++ in Debian, so, as
// llama.cpp does, the common families are recognised by marker text and rendered by hand:
//   chatml   "<|im_start|>"                  <|im_start|>role\ncontent<|im_end|>\n ...
//                                            <|im_start|>assistant\n
//   llama3   "<|start_header_id|>"           <|start_header_id|>role<|end_header_id|>\n\n
//                                            content<|eot_id|> ... then the assistant header
//   llama2   "[INST]" and "<<SYS>>"          [INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST]
//                                            answer </s><s>[INST] user [/INST]
//   mistral  "[INST]" without "<<SYS>>"      [INST] system\n\nuser [/INST]answer</s>[INST] ...
//   plain    anything else, or no template   role: content\n ... assistant:
// The BOS token is not written: the tokenizer adds it.
#include <string>
#include <vector>

namespace latprof::server {

enum class ChatTemplate { plain, chatml, llama3, llama2, mistral };

struct ChatMessage {
  std::string role;  // system, user, assistant (others are rendered like user)
  std::string content;
};

// The family a Jinja template's text belongs to (plain when none matches or it is empty).
ChatTemplate detect_chat_template(const std::string& jinja);
// A family by name (chatml, llama3, llama2, mistral, plain); false when unknown.
bool chat_template_from_name(const std::string& name, ChatTemplate& out);
const char* chat_template_name(ChatTemplate t);
// The prompt for `messages`, ending where the assistant's answer begins.
std::string render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages);
// The template text a model file carries (GGUF metadata or tokenizer_config.json next to the
// weights), "" when it has none (built-in models, config files).
std::string model_chat_template(const std::string& model_path);

}  // namespace latprof::server
