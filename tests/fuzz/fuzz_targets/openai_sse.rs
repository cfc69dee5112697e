//! A streamed (SSE) response, fed to every built-in codec's stream decoder in
//! pieces cut where the input's first byte says: the same reply (or error)
//! whatever the cuts, since TCP may deliver any split.
#![no_main]

use batchbench_contract::registry::{self, BuildContext};
use libfuzzer_sys::fuzz_target;
use std::time::Instant;

fn decode(
    codec: &dyn batchbench_contract::plugin::RequestCodec,
    parts: &[&[u8]],
) -> Result<(String, Option<String>), String> {
    let mut d = codec.stream_decoder();
    let now = Instant::now();
    for p in parts {
        d.feed(p, now).map_err(|e| e.0)?;
    }
    let r = d.finish().map_err(|e| e.0)?;
    Ok((r.content, r.finish_reason))
}

fuzz_target!(|data: &[u8]| {
    let _ = &batchbench_plugins::BUILTINS;
    let Some((&step, body)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let parts: Vec<&[u8]> = body.chunks(step).collect();
    for name in [
        "openai_chat",
        "openai_completions",
        "openai_responses",
        "anthropic_messages",
        "sglang_generate",
        "openai_embeddings",
    ] {
        let codec = registry::codec(name, &serde_json::json!({}), &BuildContext::default())
            .expect("the built-in codec");
        let whole = decode(codec.as_ref(), &[body]);
        let split = decode(codec.as_ref(), &parts);
        assert_eq!(whole.is_ok(), split.is_ok(), "{name}: a split changed the verdict");
        if let (Ok(a), Ok(b)) = (&whole, &split) {
            assert_eq!(a, b, "{name}: a split changed the reply");
        }
    }
});
