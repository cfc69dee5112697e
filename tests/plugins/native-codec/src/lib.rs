//! Test fixture: the built-in `openai_chat` codec, exported from a native
//! library as `openai_chat_native`. Loaded with `--plugin` and selected with
//! `--codec openai_chat_native`, it must send exactly the bodies of the built-in
//! and keep its streaming timings (TTFT, inter-token latency).

use batchbench_plugin_sdk::BuildContext;
use batchbench_plugins::codecs::openai_chat::{OpenAiChat, OpenAiChatConfig};

batchbench_plugin_sdk::export_plugins! {
    codec {
        name: "openai_chat_native",
        description: "the OpenAI chat codec, through the native plugin ABI",
        example: r#"{"sglang": false, "ignore_eos": false}"#,
        config: OpenAiChatConfig,
        build: |c: OpenAiChatConfig, ctx: &BuildContext| OpenAiChat::new(c, ctx),
    },
}
