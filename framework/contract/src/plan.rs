//! The plan: what every workload source yields and the only thing the engine runs.
//!
//! Plans stay compact (token counts and seeds; text only where a dataset
//! recorded it). Text is synthesised by the engine only for requests that are
//! in flight or about to be.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The role of a content block of a structured (schema version 2) prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockRole {
    /// An entry of the request's `tools` array.
    ToolDefinition,
    /// A system message.
    System,
    /// A user message.
    User,
    /// An assistant message.
    Assistant,
    /// A tool result message.
    Tool,
    /// A tool call on the preceding assistant message.
    ToolCall,
}

impl BlockRole {
    /// Every role, in the order the manifest format lists them.
    pub const ALL: [BlockRole; 6] = [
        Self::ToolDefinition,
        Self::System,
        Self::User,
        Self::Assistant,
        Self::Tool,
        Self::ToolCall,
    ];

    /// The manifest name of the role.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolDefinition => "tool_definition",
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
            Self::ToolCall => "tool_call",
        }
    }
}

impl fmt::Display for BlockRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One content block: text generated from `seed` alone at exactly `tokens` tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// The block's seed; equal seeds give identical bytes everywhere.
    pub seed: Arc<str>,
    /// Exact token count of the block's content.
    pub tokens: u32,
    /// What the block becomes in the request.
    pub role: BlockRole,
    /// An assistant block that carries the previous reply of the conversation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
    /// The block's text as recorded (a dataset's prompt), sent verbatim
    /// instead of text made from the seed; `tokens` is then informative. A
    /// live block falls back to it when there is no reply to carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<Arc<str>>,
}

/// The blocks of one request: a prefix of a shared, immutable block sequence.
///
/// Conversations grow by appending, so consecutive requests of a trajectory usually
/// list the same blocks plus a few new ones; they can all point into one sequence
/// instead of each holding a copy. Dereferences to the request's own blocks.
#[derive(Clone)]
pub struct Blocks {
    all: Arc<[Block]>,
    len: usize,
}

impl Blocks {
    /// The first `len` blocks of `all` (all of them when `len` is larger).
    pub fn prefix(all: Arc<[Block]>, len: usize) -> Self {
        let len = len.min(all.len());
        Self { all, len }
    }
}

impl From<Vec<Block>> for Blocks {
    fn from(v: Vec<Block>) -> Self {
        let len = v.len();
        Self {
            all: Arc::from(v),
            len,
        }
    }
}

impl PartialEq for Blocks {
    /// Equal when the visible blocks are (whatever the shared tail holds).
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::ops::Deref for Blocks {
    type Target = [Block];
    fn deref(&self) -> &[Block] {
        &self.all[..self.len]
    }
}

impl fmt::Debug for Blocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Blocks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Blocks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Block>::deserialize(d).map(Self::from)
    }
}

/// A verbatim request body (a JSON object), sent as given: the user wrote the
/// messages and sampling fields. The codec only adds what the run controls
/// (streaming, output constraints, router fields, a default model).
#[derive(Clone, PartialEq)]
pub struct RawBody(pub Arc<serde_json::Map<String, serde_json::Value>>);

impl fmt::Debug for RawBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawBody({} fields)", self.0.len())
    }
}

impl Serialize for RawBody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RawBody {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Map::deserialize(d).map(|m| Self(Arc::new(m)))
    }
}

/// A prompt prefix shared across requests: the first `tokens` tokens of the text
/// stream keyed by `key`. Requests with the same key share a byte-identical prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedPrefix {
    /// The stream key of the shared text.
    pub key: u64,
    /// How many leading content tokens come from the shared stream.
    pub tokens: u32,
}

/// One planned model request of a trajectory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannedRequest {
    /// Absolute prompt-token target (the reporting target). `None`: no length
    /// control, a short fixed prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// Planned output tokens: the exact output (min and max) or, with `max_tokens`,
    /// the floor clamped to the cap. `None`: no output constraint is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// Chat-template tokens the backend adds on top of the content; overrides the
    /// run's global overheads for this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_tokens: Option<u32>,
    /// Explicit size of the environment (tool result) appended before this request,
    /// for synthetic agent turns. `None`: inferred from the prompt targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_tokens: Option<u32>,
    /// A prefix shared with other requests (fresh prompts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefix>,
    /// Structured prompt; when present it alone defines the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Blocks>,
    /// A verbatim body; when present it alone defines the request (each such
    /// request stands alone: no conversation carries over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<RawBody>,
    /// Stream the response (overrides the run default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Output cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Think time after this request completes, in milliseconds (before time scaling).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_after_ms: u64,
    /// Start a fresh conversation for this request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_before: bool,
    /// On a request that opens a conversation (the first of its trajectory,
    /// or one with `reset_before`): the model of the run's mix the
    /// conversation goes to, instead of the mix's pick. Ignored elsewhere,
    /// and in a run without a mix (its one model takes every request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Arc<str>>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl PlannedRequest {
    /// The `(min, max)` output-token constraint this request sends, if any.
    pub fn output_bounds(&self) -> Option<(u32, u32)> {
        match (self.output_tokens, self.max_tokens) {
            (Some(out), Some(cap)) => Some((out.min(cap), cap)),
            (Some(out), None) => Some((out, out)),
            (None, Some(cap)) => Some((0, cap)),
            (None, None) => None,
        }
    }
}

/// The requests of a trajectory, produced lazily so that a plan of a million
/// requests costs no memory until each is about to run.
pub type RequestIter = Box<dyn Iterator<Item = PlannedRequest> + Send>;

/// One trajectory: an agent, a user or a replayed session.
pub struct Trajectory {
    /// Identifier used in reports and error messages.
    pub id: Arc<str>,
    /// Start offset from benchmark start, for open-loop admission.
    pub start_after_ms: Option<u64>,
    /// How many requests the trajectory plans, when known up front.
    pub planned_requests: Option<u64>,
    /// The planned requests, in order.
    pub requests: RequestIter,
}

impl fmt::Debug for Trajectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trajectory")
            .field("id", &self.id)
            .field("start_after_ms", &self.start_after_ms)
            .field("planned_requests", &self.planned_requests)
            .finish_non_exhaustive()
    }
}

impl Trajectory {
    /// A trajectory whose requests are already materialised.
    pub fn from_vec(id: impl Into<Arc<str>>, requests: Vec<PlannedRequest>) -> Self {
        Self {
            id: id.into(),
            start_after_ms: None,
            planned_requests: Some(requests.len() as u64),
            requests: Box::new(requests.into_iter()),
        }
    }
}

/// How a request's prompt is made: the plan's optional fields, read in one place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PromptPlan<'a> {
    /// A verbatim body (`body`); the conversation starts afresh.
    Raw(&'a RawBody),
    /// Structured blocks (`blocks`): the conversation becomes the blocks'
    /// messages, appended to when the request continues the previous one.
    Blocks(&'a Blocks),
    /// Exact synthetic text for a fresh conversation: `prompt_tokens` less the
    /// template overhead, opening with the shared prefix when one is given.
    Exact {
        /// The prompt's target, template included.
        prompt_tokens: u32,
        /// The template overhead (absent: the run's initial overhead).
        overhead_tokens: Option<u32>,
        /// A prefix shared across prompts.
        shared_prefix: Option<SharedPrefix>,
    },
    /// The conversation continues: the reply, a tool call, and a tool result of
    /// `environment_tokens` (absent: the prompt's growth over the previous one).
    Continue {
        /// The tool result's length.
        environment_tokens: Option<u32>,
    },
    /// No prompt target: the fixed default prompt.
    Default,
}

impl PlannedRequest {
    /// How this request's prompt is made. `continues`: it follows a request of
    /// the same conversation (it is not the first, and not `reset_before`).
    pub fn prompt_plan(&self, continues: bool) -> PromptPlan<'_> {
        if let Some(b) = &self.body {
            return PromptPlan::Raw(b);
        }
        if let Some(b) = &self.blocks {
            return PromptPlan::Blocks(b);
        }
        if continues {
            return PromptPlan::Continue {
                environment_tokens: self.environment_tokens,
            };
        }
        match self.prompt_tokens {
            Some(prompt_tokens) => PromptPlan::Exact {
                prompt_tokens,
                overhead_tokens: self.overhead_tokens,
                shared_prefix: self.shared_prefix,
            },
            None => PromptPlan::Default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_bounds_clamp_floor_to_cap() {
        let r = PlannedRequest {
            output_tokens: Some(96),
            max_tokens: Some(64),
            ..Default::default()
        };
        assert_eq!(r.output_bounds(), Some((64, 64)));
        let r = PlannedRequest {
            output_tokens: Some(40),
            max_tokens: Some(512),
            ..Default::default()
        };
        assert_eq!(r.output_bounds(), Some((40, 512)));
        let r = PlannedRequest {
            output_tokens: Some(8),
            ..Default::default()
        };
        assert_eq!(r.output_bounds(), Some((8, 8)));
        assert_eq!(PlannedRequest::default().output_bounds(), None);
    }

    #[test]
    fn roles_round_trip() {
        for r in BlockRole::ALL {
            let j = serde_json::to_string(&r).unwrap_or_default();
            assert_eq!(j, format!("\"{}\"", r.as_str()));
        }
    }
}
