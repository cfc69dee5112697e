//! `openai_embeddings`: the OpenAI embeddings API (`/v1/embeddings`), as vLLM,
//! SGLang, llama.cpp (`--embeddings`) and TEI-style gateways serve it.
//!
//! Each message of the conversation is one input (`batchbench --batch-size N`
//! makes N exact prompts per request); the request asks for float vectors. A
//! reply carries no text: usage is the prompt tokens and the number of
//! vectors returned, reported as items. There is no streaming in this API: a
//! run that streams reads the body whole all the same.

use super::wire::{WholeBody, fields, items_reply, json_str, raw_with_fields, texts, w};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, StreamDecoder,
};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Config of [`OpenAiEmbeddings`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenAiEmbeddingsConfig {
    /// `encoding_format`: `float` or `base64`.
    pub encoding_format: String,
    /// `dimensions`, for a model that can shorten its vectors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
}

impl Default for OpenAiEmbeddingsConfig {
    fn default() -> Self {
        Self {
            encoding_format: "float".into(),
            dimensions: None,
        }
    }
}

/// The OpenAI embeddings codec.
#[derive(Debug, Clone, Default)]
pub struct OpenAiEmbeddings {
    cfg: OpenAiEmbeddingsConfig,
}

impl OpenAiEmbeddings {
    /// A codec with this config.
    pub fn new(cfg: OpenAiEmbeddingsConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if !matches!(cfg.encoding_format.as_str(), "float" | "base64") {
            return Err(PluginError::Config {
                plugin: "openai_embeddings".into(),
                message: format!(
                    "encoding_format must be float or base64, got '{}'",
                    cfg.encoding_format
                ),
            });
        }
        Ok(Self { cfg })
    }

    fn run_fields<'a>(&self, req: &'a EncodeRequest<'_>) -> Vec<(&'a str, Value)> {
        let mut set: Vec<(&str, Value)> = vec![(
            "encoding_format",
            Value::from(self.cfg.encoding_format.as_str()),
        )];
        if let Some(d) = self.cfg.dimensions {
            set.push(("dimensions", Value::from(d)));
        }
        for (k, v) in req.extra_fields {
            set.push((k.as_str(), v.clone()));
        }
        set
    }
}

impl RequestCodec for OpenAiEmbeddings {
    fn endpoint(&self) -> &str {
        "/v1/embeddings"
    }

    fn inputs_per_request(&self, messages: u64) -> Option<u64> {
        Some(messages)
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let set = self.run_fields(req);
        if let Some(raw) = req.raw_body {
            return raw_with_fields(raw, req.model, set, out);
        }
        w(out, "{\"model\":");
        json_str(out, req.model)?;
        texts(out, "input", &req.conversation.messages)?;
        fields(out, &set)?;
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        items_reply(body, "embeddings")
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(WholeBody::new(self.clone()))
    }
}

batchbench_contract::register_codec! {
    name: "openai_embeddings",
    description: "OpenAI embeddings (/v1/embeddings): each message one input (batchbench --batch-size N), usage in tokens and items",
    example: r#"{"encoding_format": "float"}"#,
    config: OpenAiEmbeddingsConfig,
    build: OpenAiEmbeddings::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::{Conversation, Message, Role};
    use std::time::Instant;

    #[test]
    fn each_message_is_an_input_and_the_reply_counts_vectors() {
        let mut conv = Conversation::default();
        for t in ["a", "b \"c\""] {
            conv.messages.push(Message::new(Role::User, t));
        }
        let req = EncodeRequest {
            model: "e",
            conversation: &conv,
            output: Some((4, 4)),
            stream: false,
            extra_fields: &[],
            raw_body: None,
        };
        let mut out = BodyWriter::default();
        OpenAiEmbeddings::default()
            .encode(&req, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        let v: Value = serde_json::from_slice(&out.finish().concat()).unwrap_or_default();
        assert_eq!(v["input"], serde_json::json!(["a", "b \"c\""]));
        assert_eq!(v["encoding_format"], "float");
        assert!(v.get("max_tokens").is_none(), "no output to bound");
        let body = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]},{"object":"embedding","index":1,"embedding":[0.2]}],"usage":{"prompt_tokens":7,"total_tokens":7}}"#;
        let r = OpenAiEmbeddings::default()
            .decode(body)
            .unwrap_or_else(|e| panic!("{e}"));
        let u = r.usage.unwrap_or_default();
        assert_eq!((u.prompt_tokens, u.items), (7, Some(2)));
        let mut d = OpenAiEmbeddings::default().stream_decoder();
        for p in body.chunks(10) {
            d.feed(p, Instant::now()).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(
            d.finish().ok().and_then(|r| r.usage).and_then(|u| u.items),
            Some(2)
        );
        assert!(
            OpenAiEmbeddings::default()
                .decode(br#"{"data":[]}"#)
                .is_err()
        );
    }
}
