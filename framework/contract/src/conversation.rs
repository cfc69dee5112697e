//! The live conversation of a trajectory, which a codec serialises into a request.

use std::sync::Arc;

/// The role of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// System prompt.
    System,
    /// User turn.
    User,
    /// Model turn.
    Assistant,
    /// Tool (environment) result.
    Tool,
}

impl Role {
    /// The OpenAI wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// A tool call attached to an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Call id, referenced by the tool message that answers it.
    pub id: Arc<str>,
    /// Function name.
    pub name: Arc<str>,
    /// Arguments, a JSON object serialised as a string.
    pub arguments: Arc<str>,
}

/// An image attached to a message, encoded and ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `image/png` or `image/jpeg`.
    pub media_type: &'static str,
    /// The encoded bytes, in base64.
    pub base64: Arc<str>,
    /// The encoded size in bytes.
    pub bytes: usize,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

impl Image {
    /// `data:MEDIA;base64,...`, as chat and Responses take an image URL.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.base64)
    }
}

/// One chat message. Text is shared (`Arc<str>`), so equal blocks are stored once.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The message text.
    pub content: Arc<str>,
    /// Reasoning output returned by the model, kept as state.
    pub reasoning: Option<Arc<str>>,
    /// The signature the server put on that reasoning, where its API signs
    /// it (Anthropic's thinking blocks): sent back with it, unchanged.
    pub reasoning_signature: Option<Arc<str>>,
    /// Reasoning the server sent encrypted, sent back unchanged after it.
    pub redacted_reasoning: Vec<Arc<str>>,
    /// Tool calls of an assistant message.
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    pub tool_call_id: Option<Arc<str>>,
    /// An assistant message that is a server's reply: the id under which the
    /// server keeps the conversation up to and including it, when it keeps
    /// one (a stateful codec then sends only what follows).
    pub response_id: Option<Arc<str>>,
    /// Images of a user message, sent after its text.
    pub images: Vec<Arc<Image>>,
    /// Audio clips of a user message, sent after its text (and images).
    pub audio: Vec<Arc<crate::audio::Audio>>,
}

impl Message {
    /// A plain message of `role`.
    pub fn new(role: Role, content: impl Into<Arc<str>>) -> Self {
        Self {
            role,
            content: content.into(),
            reasoning: None,
            reasoning_signature: None,
            redacted_reasoning: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            response_id: None,
            images: Vec::new(),
            audio: Vec::new(),
        }
    }
}

/// A codec's serialisation of a conversation's leading messages, kept so that a
/// turn serialises only the messages it adds and sends the rest without copying.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireCache {
    /// The serialised messages, one immutable chunk per turn, in the codec's format.
    pub chunks: Vec<bytes::Bytes>,
    /// How many leading messages `chunks` holds.
    pub messages: usize,
}

/// The conversation sent with every request of a trajectory.
///
/// Messages are append-only between calls to [`Conversation::clear`]: codecs rely on
/// that to reuse [`Conversation::wire`], their serialisation of earlier messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// Entries of the request's `tools` array, each a serialised JSON object.
    pub tools: Vec<Arc<str>>,
    /// The messages, in order.
    pub messages: Vec<Message>,
    /// The codec's cache of serialised messages.
    pub wire: std::cell::RefCell<WireCache>,
}

impl Conversation {
    /// Starts a fresh conversation.
    pub fn clear(&mut self) {
        self.tools.clear();
        self.messages.clear();
        *self.wire.get_mut() = WireCache::default();
    }
}

/// The shape of an agent turn, one for every workload: the model's reply
/// becomes an assistant message (its content and reasoning, kept as opaque
/// state; tool calls the model made are dropped), the workload's tool calls are
/// attached to that assistant message, and each tool result answers its call by
/// id. Synthetic agents and structured (version-2) replay build their turns here.
pub mod turn {
    use super::{Message, Role, ToolCall};
    use std::sync::Arc;

    /// The function name of a synthetic agent's one tool call per turn.
    pub const ENVIRONMENT_TOOL: &str = "environment";
    /// The function name of a replayed `tool_call` block.
    pub const BLOCK_TOOL: &str = "tool";

    /// The id of a synthetic agent's call in turn `index`: `call_<agent>_<index>`.
    pub fn agent_call_id(agent_id: u64, index: u64) -> Arc<str> {
        Arc::from(format!("call_{agent_id}_{index}"))
    }

    /// The id of a replayed call, from its block's seed: `call_<16 hex digits>`,
    /// so a seed gives the same id in every trajectory.
    pub fn seeded_call_id(seed: &str) -> Arc<str> {
        Arc::from(format!("call_{:016x}", crate::rng::hash_str(seed)))
    }

    /// The model's turn: an assistant message of its content and reasoning.
    pub fn assistant(content: impl Into<Arc<str>>, reasoning: Option<Arc<str>>) -> Message {
        let mut m = Message::new(Role::Assistant, content);
        m.reasoning = reasoning;
        m
    }

    /// Attaches a tool call to the last message when it is the assistant's,
    /// else to a new, empty assistant message.
    pub fn call(messages: &mut Vec<Message>, id: Arc<str>, name: &str, arguments: Arc<str>) {
        let call = ToolCall {
            id,
            name: Arc::from(name),
            arguments,
        };
        match messages.last_mut() {
            Some(m) if m.role == Role::Assistant => m.tool_calls.push(call),
            _ => {
                let mut m = Message::new(Role::Assistant, "");
                m.tool_calls.push(call);
                messages.push(m);
            }
        }
    }

    /// The tool result answering call `call_id`.
    pub fn tool_result(content: impl Into<Arc<str>>, call_id: Arc<str>) -> Message {
        let mut m = Message::new(Role::Tool, content);
        m.tool_call_id = Some(call_id);
        m
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_turn_is_reply_then_call_then_result() {
            let mut msgs = vec![assistant("done", Some(Arc::from("because")))];
            let id = agent_call_id(3, 1);
            call(&mut msgs, id.clone(), ENVIRONMENT_TOOL, Arc::from("{}"));
            msgs.push(tool_result("42", id));
            assert_eq!(msgs.len(), 2);
            assert_eq!(msgs[0].tool_calls[0].id.as_ref(), "call_3_1");
            assert_eq!(msgs[0].tool_calls[0].name.as_ref(), "environment");
            assert_eq!(msgs[0].reasoning.as_deref(), Some("because"));
            assert_eq!(msgs[1].tool_call_id.as_deref(), Some("call_3_1"));
            // A call with no assistant before it opens an empty assistant message.
            let mut alone = vec![Message::new(Role::User, "hi")];
            call(&mut alone, seeded_call_id("s"), BLOCK_TOOL, Arc::from("{}"));
            assert_eq!(alone.len(), 2);
            assert_eq!(alone[1].content.as_ref(), "");
            assert_eq!(seeded_call_id("s"), seeded_call_id("s"));
            assert!(seeded_call_id("s").starts_with("call_") && seeded_call_id("s").len() == 21);
        }
    }
}
