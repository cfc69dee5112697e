//! `rerank`: rerankers and scorers, as vLLM, Jina, Cohere and TEI-style
//! gateways serve them: `/v1/rerank` (and Cohere's `/v2/rerank`, the same
//! request) with a `query` and `documents`, or vLLM's `/v1/score` with
//! `text_1` and `text_2`.
//!
//! The conversation's first message is the query, every other message a
//! document (`batchbench --query-tokens Q --batch-size N` makes a query of Q
//! exact tokens and N documents of `--input-tokens` each). A reply carries no
//! text: usage is the prompt tokens, and the documents ranked or scored are
//! its items (documents per second in the summary). There is no streaming.

use super::wire::{WholeBody, fields, items_reply, json_str, raw_with_fields, texts, w};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, StreamDecoder,
};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Config of [`Rerank`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RerankConfig {
    /// Which API: `rerank` (`/v1/rerank`), `rerank_v2` (`/v2/rerank`) or
    /// `score` (`/v1/score`).
    pub api: String,
    /// `top_n`: the most relevant documents returned (rerank; absent: all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_n: Option<u32>,
}

impl Default for RerankConfig {
    fn default() -> Self {
        Self {
            api: "rerank".into(),
            top_n: None,
        }
    }
}

/// The rerank and score codec.
#[derive(Debug, Clone, Default)]
pub struct Rerank {
    cfg: RerankConfig,
}

impl Rerank {
    /// A codec with this config.
    pub fn new(cfg: RerankConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if !matches!(cfg.api.as_str(), "rerank" | "rerank_v2" | "score") {
            return Err(PluginError::Config {
                plugin: "rerank".into(),
                message: format!("api must be rerank, rerank_v2 or score, got '{}'", cfg.api),
            });
        }
        if cfg.top_n == Some(0) || (cfg.top_n.is_some() && cfg.api == "score") {
            return Err(PluginError::Config {
                plugin: "rerank".into(),
                message: "top_n: at least 1, and only for rerank (score answers every document)"
                    .into(),
            });
        }
        Ok(Self { cfg })
    }

    /// The field names of the query and of the documents.
    fn names(&self) -> (&'static str, &'static str) {
        if self.cfg.api == "score" {
            ("text_1", "text_2")
        } else {
            ("query", "documents")
        }
    }
}

impl RequestCodec for Rerank {
    fn endpoint(&self) -> &str {
        match self.cfg.api.as_str() {
            "rerank_v2" => "/v2/rerank",
            "score" => "/v1/score",
            _ => "/v1/rerank",
        }
    }

    /// The documents: every message after the query.
    fn inputs_per_request(&self, messages: u64) -> Option<u64> {
        Some(messages.saturating_sub(1))
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let mut set: Vec<(&str, Value)> = Vec::new();
        if let Some(n) = self.cfg.top_n {
            set.push(("top_n", Value::from(n)));
        }
        for (k, v) in req.extra_fields {
            set.push((k.as_str(), v.clone()));
        }
        if let Some(raw) = req.raw_body {
            return raw_with_fields(raw, req.model, set, out);
        }
        let [query, documents @ ..] = req.conversation.messages.as_slice() else {
            return Err(CodecError("a rerank request needs a query".into()));
        };
        if documents.is_empty() {
            return Err(CodecError(
                "a rerank request needs a query and at least one document (batchbench --query-tokens Q --batch-size N)".into(),
            ));
        }
        let (q, d) = self.names();
        w(out, "{\"model\":");
        json_str(out, req.model)?;
        w(out, ",");
        json_str(out, q)?;
        w(out, ":");
        json_str(out, &query.content)?;
        texts(out, d, documents)?;
        fields(out, &set)?;
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        items_reply(body, "ranked document")
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(WholeBody::new(self.clone()))
    }
}

batchbench_contract::register_codec! {
    name: "rerank",
    description: "rerank (/v1/rerank, /v2/rerank) and score (/v1/score): the first message the query, the others documents; documents ranked as items",
    example: r#"{"api": "rerank", "top_n": 3}"#,
    config: RerankConfig,
    build: Rerank::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::{Conversation, Message, Role};

    fn encode(codec: &Rerank, texts: &[&str]) -> Result<Value, CodecError> {
        let mut conv = Conversation::default();
        for t in texts {
            conv.messages.push(Message::new(Role::User, *t));
        }
        let req = EncodeRequest {
            model: "r",
            conversation: &conv,
            output: None,
            stream: false,
            extra_fields: &[],
            raw_body: None,
        };
        let mut out = BodyWriter::default();
        codec.encode(&req, &mut out)?;
        Ok(serde_json::from_slice(&out.finish().concat()).unwrap_or_default())
    }

    #[test]
    fn the_first_message_is_the_query_and_the_rest_are_ranked() {
        let cfg = |api: &str, top_n| RerankConfig {
            api: api.into(),
            top_n,
        };
        let rerank = Rerank::new(cfg("rerank", Some(2)), &BuildContext::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let v = encode(&rerank, &["q", "a", "b \"c\""]).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"model": "r", "query": "q", "documents": ["a", "b \"c\""], "top_n": 2})
        );
        assert_eq!(rerank.endpoint(), "/v1/rerank");
        let score = Rerank::new(cfg("score", None), &BuildContext::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let v = encode(&score, &["q", "a"]).unwrap_or_default();
        assert_eq!(
            (&v["text_1"], &v["text_2"]),
            (&serde_json::json!("q"), &serde_json::json!(["a"]))
        );
        assert_eq!(score.endpoint(), "/v1/score");
        assert!(encode(&rerank, &["q"]).is_err(), "a query alone");
        assert!(Rerank::new(cfg("rank", None), &BuildContext::default()).is_err());
        assert!(Rerank::new(cfg("score", Some(2)), &BuildContext::default()).is_err());
        // vLLM's and Jina's rerank answers, and vLLM's score.
        let body = br#"{"id":"r","results":[{"index":1,"relevance_score":0.9},{"index":0,"relevance_score":0.1}],"usage":{"total_tokens":30}}"#;
        let u = rerank
            .decode(body)
            .ok()
            .and_then(|r| r.usage)
            .unwrap_or_default();
        assert_eq!((u.prompt_tokens, u.items), (30, Some(2)));
        let body = br#"{"object":"list","data":[{"index":0,"object":"score","score":0.5}],"usage":{"prompt_tokens":12,"total_tokens":12}}"#;
        let u = score
            .decode(body)
            .ok()
            .and_then(|r| r.usage)
            .unwrap_or_default();
        assert_eq!((u.prompt_tokens, u.items), (12, Some(1)));
        assert!(rerank.decode(br#"{"results":[]}"#).is_err());
    }
}
