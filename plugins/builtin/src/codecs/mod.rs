//! Request codecs: how each API's request body is written and its reply,
//! JSON or a server-sent event stream, read back. One file per plugin, named
//! as users name it (`--codec NAME`); what they share, the JSON writing
//! helpers, the chat-style response and the stream's lines and close check, in
//! [`wire`].

pub mod anthropic_messages;
pub mod openai_chat;
pub mod openai_completions;
pub mod openai_embeddings;
pub mod openai_responses;
pub mod openai_transcriptions;
pub mod rerank;
pub mod sglang_generate;
pub mod wire;
