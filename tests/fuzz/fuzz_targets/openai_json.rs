//! A non-streamed response body, through every built-in codec (chat with and
//! without SGLang's fields, completions, Responses, Anthropic Messages,
//! SGLang's generate, embeddings): a reply or a decode error, never a panic.
#![no_main]

use batchbench_contract::registry::{self, BuildContext};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = &batchbench_plugins::BUILTINS;
    let codecs = [
        ("openai_chat", serde_json::json!({})),
        ("openai_chat", serde_json::json!({"sglang": true})),
        ("openai_completions", serde_json::json!({})),
        ("openai_responses", serde_json::json!({})),
        ("anthropic_messages", serde_json::json!({})),
        ("sglang_generate", serde_json::json!({})),
        ("openai_embeddings", serde_json::json!({})),
    ];
    for (name, cfg) in codecs {
        let codec = registry::codec(name, &cfg, &BuildContext::default())
            .expect("the built-in codec");
        let _ = codec.decode(data);
    }
});
