// latprof serve on model files (GGUF, a Hugging Face directory) written by the test: the chat
// template the file carries is recognised by its text and used, and the served model id is the
// file's stem.
#include <gtest/gtest.h>

#include <fstream>

#include "server/server_process.hpp"
#include "support/model_writer.hpp"

namespace latprof::test {
namespace {

using nlohmann::json;

constexpr const char* kChatMlJinja =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";
constexpr const char* kLlama3Jinja =
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}";

// /tokenize of a chat and of its ChatML rendering by hand give the same tokens.
void expect_chatml(int port) {
  const json msgs = {{{"role", "user"}, {"content", "hi"}}};
  const json chat = json::parse(post(port, "/tokenize", {{"messages", msgs}}).body);
  const json text =
      json::parse(post(port, "/tokenize",
                       {{"prompt", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}})
                      .body);
  EXPECT_EQ(chat["tokens"], text["tokens"]);
  const RawResponse r = post(port, "/v1/chat/completions",
                             {{"messages", msgs}, {"max_tokens", 3}, {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(ServeModels, GgufChatTemplateAndName) {
  const std::string dir = latprof::testing::temp_dir("serve_gguf");
  const auto m = latprof::testing::make_tiny_llama(3);
  auto g = latprof::testing::tiny_gguf(m, 1);
  g.kv_str("tokenizer.chat_template", kChatMlJinja);
  latprof::testing::write_file(dir + "/little.gguf", g.bytes());
  ServerProcess srv({"--model", dir + "/little.gguf", "--kv-cache-memory", "16MiB"});
  EXPECT_NE(srv.banner.find("chat template chatml (the model file)"), std::string::npos)
      << srv.banner;
  const json models = json::parse(http_request(srv.port, "GET", "/v1/models", "").body);
  EXPECT_EQ(models["data"][0]["id"], "little");
  expect_chatml(srv.port);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

// A Q8_0 GGUF serves in its own precision unless --dtype says otherwise, and the server says so.
TEST(ServeModels, AQ8_0FileServesAsInt8) {
  const std::string dir = latprof::testing::temp_dir("serve_q8");
  const auto m = latprof::testing::make_tiny_llama(5);
  latprof::testing::write_file(dir + "/q8.gguf", latprof::testing::tiny_gguf_bytes(m, 8));
  {
    ServerProcess srv({"--model", dir + "/q8.gguf", "--kv-cache-memory", "16MiB"});
    EXPECT_NE(srv.banner.find("(int8, cpu"), std::string::npos) << srv.banner;
    EXPECT_NE(srv.banner.find("--dtype int8 taken from the model file"), std::string::npos)
        << srv.banner;
    EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  }
  ServerProcess srv({"--model", dir + "/q8.gguf", "--kv-cache-memory", "16MiB", "--dtype", "fp16"});
  EXPECT_NE(srv.banner.find("(fp16, cpu"), std::string::npos) << srv.banner;
  EXPECT_NE(srv.banner.find("Q8_0, dequantised to FP16"), std::string::npos) << srv.banner;
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
}

TEST(ServeModels, HuggingFaceDirectoryChatTemplate) {
  const std::string dir = latprof::testing::temp_dir("serve_hf");
  const auto m = latprof::testing::make_tiny_llama(4);
  latprof::testing::write_tiny_hf(m, dir, "F16");
  json cfg;
  std::ifstream(dir + "/tokenizer_config.json") >> cfg;
  cfg["chat_template"] = kLlama3Jinja;
  std::ofstream(dir + "/tokenizer_config.json") << cfg.dump();
  ServerProcess srv({"--model", dir, "--kv-cache-memory", "16MiB"});
  EXPECT_NE(srv.banner.find("chat template llama3 (the model file)"), std::string::npos)
      << srv.banner;
  // --chat-template overrides the file's.
  ServerProcess chatml({"--model", dir, "--kv-cache-memory", "16MiB", "--chat-template", "chatml"});
  EXPECT_NE(chatml.banner.find("chat template chatml (--chat-template)"), std::string::npos)
      << chatml.banner;
  expect_chatml(chatml.port);
  EXPECT_EQ(srv.stop(SIGTERM, 30), 0);
  EXPECT_EQ(chatml.stop(SIGTERM, 30), 0);
}

}  // namespace
}  // namespace latprof::test
