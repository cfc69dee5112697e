//! A non-streamed chat-completions response body, through the OpenAI codec
//! (plain and with SGLang's fields): a reply or a decode error.
#![no_main]

use batchbench_core::registry::{self, BuildContext};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = &batchbench_plugins::BUILTINS;
    for cfg in [serde_json::json!({}), serde_json::json!({"sglang": true})] {
        let codec = registry::codec("openai_chat", &cfg, &BuildContext::default())
            .expect("the built-in codec");
        let _ = codec.decode(data);
    }
});
