//! Structured (schema version 2) prompts: content blocks become the request's
//! `tools` array, messages, synthetic tool calls and tool results.
//!
//! Block text comes from the seed alone at exactly the block's token count, so equal
//! seeds give identical bytes in every trajectory, request and run. Within a
//! trajectory a seed already sent reuses the text already sent, including a live
//! block's substituted reply. A request whose prompt extends the previous one is
//! appended to the conversation, so the conversation's wire cache (and the server's
//! prefix cache) keep working.

use crate::conversation::{Conversation, Message, Role, ToolCall};
use crate::plan::{Block, BlockRole};
use crate::plugin::Reply;
use crate::rng;
use crate::tokens::{TokenError, TokenizerHandle};
use std::collections::HashMap;
use std::sync::Arc;

/// The name of every synthetic tool call.
pub const TOOL_CALL_NAME: &str = "tool";

/// What a trajectory has sent so far, by seed.
#[derive(Debug, Default)]
pub(crate) struct BlockState {
    texts: HashMap<Arc<str>, Arc<str>>,
    reasoning: HashMap<Arc<str>, Arc<str>>,
}

impl BlockState {
    fn clear(&mut self) {
        self.texts.clear();
        self.reasoning.clear();
    }
}

/// Synthesised block texts, by seed.
pub(crate) type Made = Vec<(Arc<str>, Arc<str>)>;

/// A block text to synthesise ahead of time.
#[derive(Debug, Clone)]
pub(crate) struct Need {
    seed: Arc<str>,
    tokens: u32,
    role: BlockRole,
    index: usize,
}

/// The blocks whose text is not known yet: unseen seeds, and live blocks that will
/// fall back to their seed (on a fresh conversation, or after the first live block).
pub(crate) fn needs(blocks: &[Block], fresh: bool, state: &BlockState) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    let mut lives = 0;
    for (index, b) in blocks.iter().enumerate() {
        let known = !fresh && state.texts.contains_key(&b.seed);
        let falls_back = b.live && {
            lives += 1;
            fresh || lives > 1
        };
        if (!b.live || falls_back) && !known && !out.iter().any(|n| n.seed == b.seed) {
            out.push(Need {
                seed: b.seed.clone(),
                tokens: b.tokens,
                role: b.role,
                index,
            });
        }
    }
    out
}

/// Block texts shared by every trajectory of a run: a seed's text is a function of
/// the seed, its token count and its role alone, so a system prompt shared by many
/// sessions is synthesised (and checked) once.
#[derive(Debug, Default)]
pub(crate) struct TextCache {
    map: std::sync::Mutex<HashMap<TextKey, Arc<str>>>,
}

/// A block text is a function of its seed, token count and role.
type TextKey = (Arc<str>, u32, BlockRole);

const TEXT_CACHE_ENTRIES: usize = 65_536;

impl TextCache {
    fn get(&self, n: &Need) -> Option<Arc<str>> {
        let map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(&(n.seed.clone(), n.tokens, n.role)).cloned()
    }

    fn put(&self, n: &Need, text: Arc<str>) {
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= TEXT_CACHE_ENTRIES {
            map.clear();
        }
        map.insert((n.seed.clone(), n.tokens, n.role), text);
    }
}

/// Synthesises the texts of `needs` (on the worker pool).
pub(crate) fn synthesise(
    tok: &TokenizerHandle,
    needs: &[Need],
    cache: &TextCache,
    context: &dyn Fn(usize) -> String,
) -> Result<Made, TokenError> {
    needs
        .iter()
        .map(|n| {
            if let Some(text) = cache.get(n) {
                return Ok((n.seed.clone(), text));
            }
            let key = rng::hash_str(&n.seed);
            let ctx = || context(n.index);
            let text: Arc<str> = Arc::from(match n.role {
                BlockRole::ToolDefinition => tok.tool_schema(key, n.tokens as usize, &ctx)?,
                BlockRole::ToolCall => tok.tool_arguments(key, n.tokens as usize, &ctx)?,
                _ => tok.exact_text(key, n.tokens as usize, &ctx)?,
            });
            cache.put(n, text.clone());
            Ok((n.seed.clone(), text))
        })
        .collect()
}

fn call_id(seed: &str) -> Arc<str> {
    Arc::from(format!("call_{:016x}", rng::hash_str(seed)))
}

fn same(a: &Message, b: &Message) -> bool {
    let eq = |x: &Arc<str>, y: &Arc<str>| Arc::ptr_eq(x, y) || x == y;
    a.role == b.role
        && eq(&a.content, &b.content)
        && a.tool_call_id == b.tool_call_id
        && a.tool_calls == b.tool_calls
        && a.reasoning == b.reasoning
}

/// Makes `conv` the prompt `blocks` describe. Returns how many live blocks fell back
/// to their seed because there was no previous reply to carry.
pub(crate) fn apply(
    conv: &mut Conversation,
    blocks: &[Block],
    fresh: bool,
    made: Made,
    last_reply: Option<&Reply>,
    state: &mut BlockState,
) -> u32 {
    if fresh {
        state.clear();
    }
    let mut fallbacks = 0;
    let mut reply = if fresh { None } else { last_reply };
    let made: HashMap<Arc<str>, Arc<str>> = made.into_iter().collect();
    let mut tools = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    let mut pending_call: Option<Arc<str>> = None;
    for b in blocks {
        let known = state.texts.get(&b.seed).cloned();
        let (text, reasoning) = match (known, b.live) {
            (Some(t), _) => (t, state.reasoning.get(&b.seed).cloned()),
            (None, true) if reply.is_some() => {
                let r = reply.take().unwrap_or_else(|| unreachable!());
                let t: Arc<str> = Arc::from(r.content.as_str());
                let reasoning: Option<Arc<str>> = r.reasoning.as_deref().map(Arc::from);
                if let Some(rs) = &reasoning {
                    state.reasoning.insert(b.seed.clone(), rs.clone());
                }
                (t, reasoning)
            }
            // Texts not yet sent come from `made`. A live block lands here only when it
            // falls back (fresh conversation, or not the first live block), and `needs`
            // made those; the first live block of a continuing request always has a
            // reply, because a failed request ends its conversation unless the next
            // request resets it.
            (None, live) => {
                fallbacks += u32::from(live);
                (
                    made.get(&b.seed).cloned().unwrap_or_else(|| Arc::from("")),
                    None,
                )
            }
        };
        state
            .texts
            .entry(b.seed.clone())
            .or_insert_with(|| text.clone());
        match b.role {
            BlockRole::ToolDefinition => tools.push(text),
            BlockRole::ToolCall => {
                let id = call_id(&b.seed);
                let call = ToolCall {
                    id: id.clone(),
                    name: Arc::from(TOOL_CALL_NAME),
                    arguments: text,
                };
                match messages.last_mut() {
                    Some(m) if m.role == Role::Assistant => m.tool_calls.push(call),
                    _ => {
                        let mut m = Message::new(Role::Assistant, "");
                        m.tool_calls.push(call);
                        messages.push(m);
                    }
                }
                pending_call = Some(id);
            }
            role => {
                let role = match role {
                    BlockRole::System => Role::System,
                    BlockRole::User => Role::User,
                    BlockRole::Assistant => Role::Assistant,
                    _ => Role::Tool,
                };
                let mut m = Message::new(role, text);
                m.reasoning = reasoning;
                if role == Role::Tool {
                    // A tool result answers the latest synthetic call (or stands alone).
                    m.tool_call_id = Some(pending_call.take().unwrap_or_else(|| call_id(&b.seed)));
                }
                messages.push(m);
            }
        }
    }
    let extends = !fresh
        && conv.tools == tools
        && conv.messages.len() <= messages.len()
        && conv.messages.iter().zip(&messages).all(|(a, b)| same(a, b));
    if extends {
        let n = conv.messages.len();
        conv.messages.extend(messages.into_iter().skip(n));
    } else {
        *conv = Conversation {
            tools,
            messages,
            ..Conversation::default()
        };
    }
    fallbacks
}
