//! Structured (schema version 2) prompts: content blocks become the request's
//! `tools` array, messages, synthetic tool calls and tool results.
//!
//! Block text comes from the seed alone at exactly the block's token count, so equal
//! seeds give identical bytes in every trajectory, request and run. Within a
//! trajectory a seed already sent reuses the text already sent, including a live
//! block's substituted reply. A request whose prompt extends the previous one is
//! appended to the conversation, so the conversation's wire cache (and the server's
//! prefix cache) keep working.

use crate::tokens::{TokenError, TokenizerHandle};
use batchbench_contract::conversation::{Conversation, Message, Role, turn};
use batchbench_contract::plan::{Block, BlockRole};
use batchbench_contract::plugin::Reply;
use batchbench_contract::rng;
use std::collections::HashMap;
use std::sync::Arc;

/// The name of every replayed tool call.
pub const TOOL_CALL_NAME: &str = turn::BLOCK_TOOL;

/// What a trajectory has sent so far, by seed.
#[derive(Debug, Default)]
pub(crate) struct BlockState {
    texts: HashMap<Arc<str>, Arc<str>>,
    reasoning: HashMap<Arc<str>, Arc<str>>,
    /// The model (of a mix) the conversation went to: the one its later
    /// requests go to too.
    pub(crate) model: usize,
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
        let given = b.text.is_some();
        if (!b.live || falls_back) && !known && !given && !out.iter().any(|n| n.seed == b.seed) {
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

/// The tokens `needs` synthesise when every one is plain text (no tool schema or
/// tool call, whose JSON is checked by a full encoding).
pub(crate) fn plain_tokens(needs: &[Need]) -> Option<u64> {
    needs
        .iter()
        .map(|n| {
            (!matches!(n.role, BlockRole::ToolDefinition | BlockRole::ToolCall))
                .then_some(u64::from(n.tokens))
        })
        .sum()
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
        let mut response_id: Option<Arc<str>> = None;
        let (text, reasoning) = match (known, b.live) {
            (Some(t), _) => (t, state.reasoning.get(&b.seed).cloned()),
            (None, true) if reply.is_some() => {
                let r = reply.take().unwrap_or_else(|| unreachable!());
                let t: Arc<str> = Arc::from(r.content.as_str());
                let reasoning: Option<Arc<str>> = r.reasoning.as_deref().map(Arc::from);
                if let Some(rs) = &reasoning {
                    state.reasoning.insert(b.seed.clone(), rs.clone());
                }
                response_id = r.response_id.as_deref().map(Arc::from);
                (t, reasoning)
            }
            // Texts not yet sent come from `made`. A live block lands here only when it
            // falls back (fresh conversation, or not the first live block), and `needs`
            // made those; the first live block of a continuing request always has a
            // reply, because a failed request ends its conversation unless the next
            // request resets it.
            (None, live) => {
                fallbacks += u32::from(live);
                let text = match &b.text {
                    Some(t) => t.clone(),
                    None => made.get(&b.seed).cloned().unwrap_or_else(|| Arc::from("")),
                };
                (text, None)
            }
        };
        state
            .texts
            .entry(b.seed.clone())
            .or_insert_with(|| text.clone());
        match b.role {
            BlockRole::ToolDefinition => tools.push(text),
            BlockRole::ToolCall => {
                let id = turn::seeded_call_id(&b.seed);
                turn::call(&mut messages, id.clone(), TOOL_CALL_NAME, text);
                pending_call = Some(id);
            }
            role => {
                let role = match role {
                    BlockRole::System => Role::System,
                    BlockRole::User => Role::User,
                    BlockRole::Assistant => Role::Assistant,
                    _ => Role::Tool,
                };
                let m = if role == Role::Tool {
                    // A tool result answers the latest replayed call (or stands alone).
                    let id = pending_call
                        .take()
                        .unwrap_or_else(|| turn::seeded_call_id(&b.seed));
                    turn::tool_result(text, id)
                } else {
                    let mut m = Message::new(role, text);
                    m.reasoning = reasoning;
                    m.response_id = response_id;
                    m
                };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn block(seed: &str, role: BlockRole, live: bool) -> Block {
        Block {
            seed: Arc::from(seed),
            tokens: 4,
            role,
            live,
            text: None,
        }
    }

    fn made(seeds: &[&str]) -> Made {
        seeds
            .iter()
            .map(|s| (Arc::from(*s), Arc::from(format!("text of {s}"))))
            .collect()
    }

    fn reply(content: &str) -> Reply {
        Reply {
            content: content.into(),
            reasoning: Some("thinking".into()),
            ..Reply::default()
        }
    }

    #[test]
    fn blocks_become_tools_messages_and_answered_calls() {
        let bs = [
            block("tools", BlockRole::ToolDefinition, false),
            block("sys", BlockRole::System, false),
            block("u0", BlockRole::User, false),
            block("a0", BlockRole::Assistant, true),
            block("c0", BlockRole::ToolCall, false),
            block("t0", BlockRole::Tool, false),
        ];
        let first = &bs[..3];
        let first_needs: Vec<Arc<str>> = needs(first, true, &BlockState::default())
            .into_iter()
            .map(|n| n.seed)
            .collect();
        assert_eq!(first_needs, ["tools", "sys", "u0"].map(Arc::from));
        let mut state = BlockState::default();
        let mut conv = Conversation::default();
        let fb = apply(
            &mut conv,
            first,
            true,
            made(&["tools", "sys", "u0"]),
            None,
            &mut state,
        );
        assert_eq!(fb, 0);
        assert_eq!(conv.tools, vec![Arc::from("text of tools")]);
        assert_eq!(conv.messages.len(), 2);

        // The next request continues: the live block carries the reply, the call
        // joins that assistant message, and the tool result answers it by id.
        let next_needs: Vec<Arc<str>> = needs(&bs, false, &state)
            .into_iter()
            .map(|n| n.seed)
            .collect();
        assert_eq!(
            next_needs,
            ["c0", "t0"].map(Arc::from),
            "sent blocks and the live reply are not made again"
        );
        let r = reply("the answer");
        let fb = apply(
            &mut conv,
            &bs,
            false,
            made(&["c0", "t0"]),
            Some(&r),
            &mut state,
        );
        assert_eq!(fb, 0);
        let m = &conv.messages;
        assert_eq!(m.len(), 4, "system, user, assistant with call, tool");
        assert_eq!(m[2].role, Role::Assistant);
        assert_eq!(m[2].content.as_ref(), "the answer");
        assert_eq!(m[2].reasoning.as_deref(), Some("thinking"));
        let call = &m[2].tool_calls[0];
        assert_eq!(call.id, turn::seeded_call_id("c0"));
        assert_eq!(call.name.as_ref(), TOOL_CALL_NAME);
        assert_eq!(call.arguments.as_ref(), "text of c0");
        assert_eq!(m[3].tool_call_id.as_ref(), Some(&call.id));
    }

    #[test]
    fn a_live_block_without_a_reply_falls_back_to_its_seed() {
        let bs = [
            block("u0", BlockRole::User, false),
            block("a0", BlockRole::Assistant, true),
        ];
        let seeds: Vec<Arc<str>> = needs(&bs, true, &BlockState::default())
            .into_iter()
            .map(|n| n.seed)
            .collect();
        assert_eq!(
            seeds,
            ["u0", "a0"].map(Arc::from),
            "a fresh live block is made from its seed"
        );
        let mut conv = Conversation::default();
        let fb = apply(
            &mut conv,
            &bs,
            true,
            made(&["u0", "a0"]),
            None,
            &mut BlockState::default(),
        );
        assert_eq!(fb, 1);
        assert_eq!(conv.messages[1].content.as_ref(), "text of a0");
    }
}
