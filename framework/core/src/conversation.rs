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

/// One chat message. Text is shared (`Arc<str>`), so equal blocks are stored once.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The message text.
    pub content: Arc<str>,
    /// Reasoning output returned by the model, kept as state.
    pub reasoning: Option<Arc<str>>,
    /// Tool calls of an assistant message.
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    pub tool_call_id: Option<Arc<str>>,
}

impl Message {
    /// A plain message of `role`.
    pub fn new(role: Role, content: impl Into<Arc<str>>) -> Self {
        Self {
            role,
            content: content.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
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
