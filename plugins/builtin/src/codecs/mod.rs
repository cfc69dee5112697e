//! Request codecs: how each API's request body is written and its reply,
//! JSON or a server-sent event stream, read back. One file per plugin, named
//! as users name it (`--codec NAME`); what they share, the JSON writing
//! helpers, the chat-style response and the stream's lines and close check, in
//! [`wire`].

pub mod anthropic_messages;
mod chat_chunk;
pub mod openai_chat;
pub mod openai_completions;
pub mod openai_embeddings;
pub mod openai_responses;
#[cfg(feature = "audio")]
pub mod openai_transcriptions;
pub mod rerank;
pub mod sglang_generate;
pub mod wire;

/// A build without the `audio` feature still knows the speech-to-text
/// codec's name: asking for it says which feature it needs.
#[cfg(not(feature = "audio"))]
mod openai_transcriptions_left_out {
    use batchbench_contract::plugin::PluginError;
    use batchbench_contract::registry::BuildContext;

    fn build(
        _: serde_json::Value,
        _: &BuildContext,
    ) -> Result<super::openai_chat::OpenAiChat, PluginError> {
        Err(PluginError::Config {
            plugin: "openai_transcriptions".into(),
            message: "this codec (a multipart audio upload) needs the `audio` cargo feature, which this build of batchbench leaves out (it is on by default: cargo install --path bins/batchbench, or add --features audio)".into(),
        })
    }

    batchbench_contract::register_codec! {
        name: "openai_transcriptions",
        description: "speech to text: left out of this build (the audio feature)",
        example: "{}",
        config: serde_json::Value,
        build: build,
    }
}
