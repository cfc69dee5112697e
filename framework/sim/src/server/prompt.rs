//! Counting a request's prompt tokens as a server would: its messages with
//! the chat template's framing, or a plain prompt, with the real tokenizer.

use super::*;
/// Role marker ids, standing in for the template's role headers.
pub(super) fn marker(role: &str) -> u32 {
    u32::MAX - role.len() as u32
}

/// Counts a templated conversation's messages into `ids`; returns the count.
pub(super) fn count_messages(
    st: &Counter<'_>,
    messages: &[Msg],
    ids: &mut Vec<u32>,
) -> Result<u64, String> {
    let mut count = 0u64;
    for m in messages {
        if let Some(role) = &m.role {
            ids.push(marker(role));
            count += u64::from(st.cfg.message_overhead_tokens);
        }
        if !m.reasoning.is_empty() {
            let r = st.ids(&m.reasoning)?;
            count += r.len() as u64;
            ids.extend_from_slice(&r);
        }
        let c = st.ids(&m.content)?;
        count += c.len() as u64;
        ids.extend_from_slice(&c);
        for &(tokens, hash) in &m.images {
            // The image's tokens, as ids of its bytes (the cache tells images apart).
            count += tokens;
            ids.extend((0..tokens).map(|i| (hash.wrapping_add(i) as u32) | 0x8000_0000));
        }
        for &(seconds, hash) in &m.audio {
            // The encoder's tokens at the server's rate, as ids of the clip.
            let tokens = ((seconds * st.cfg.audio_tokens_per_second).ceil() as u64).max(1);
            count += tokens;
            ids.extend((0..tokens).map(|i| (hash.wrapping_add(i) as u32) | 0x8000_0000));
        }
        for (name, args) in &m.calls {
            for t in [name, args] {
                let t = st.ids(t)?;
                count += t.len() as u64;
                ids.extend_from_slice(&t);
            }
        }
    }
    Ok(count)
}

/// A request's prompt as the cache sees it (token ids), its counted tokens,
/// the part that continues a stored response, and what to store of it.
pub(super) struct Counted {
    pub(super) ids: Vec<u32>,
    pub(super) count: u64,
    pub(super) stored: u64,
    pub(super) messages: Option<ToStore>,
}

impl Counted {
    /// An instant simulator's prompt: not read.
    pub(super) const UNREAD: Self = Self {
        ids: Vec::new(),
        count: 0,
        stored: 0,
        messages: None,
    };
}

/// What a response stores: the response it continued, where this request's
/// own messages start in the ids, and the conversation's count through them.
pub(super) struct ToStore {
    pub(super) parent: Option<Arc<Stored>>,
    pub(super) from: usize,
    pub(super) count: u64,
}

pub(super) fn prompt_tokens(st: &Counter<'_>, req: &apis::Request) -> Result<Counted, String> {
    plain_or_templated(st, req, &req.prompt)
}

pub(super) fn plain_or_templated(
    st: &Counter<'_>,
    req: &apis::Request,
    prompt: &Prompt,
) -> Result<Counted, String> {
    match prompt {
        Prompt::Inputs(inputs) => {
            let mut all = Counted {
                ids: Vec::new(),
                count: 0,
                stored: 0,
                messages: None,
            };
            for p in inputs {
                let c = plain_or_templated(st, req, p)?;
                all.ids.extend_from_slice(&c.ids);
                all.count += c.count;
            }
            Ok(all)
        }
        Prompt::Text(t) => {
            let ids = st.ids(t)?.to_vec();
            let count = ids.len() as u64;
            Ok(Counted {
                ids,
                count,
                stored: 0,
                messages: None,
            })
        }
        Prompt::Ids(ids) => Ok(Counted {
            count: ids.len() as u64,
            ids: ids.clone(),
            stored: 0,
            messages: None,
        }),
        Prompt::Templated { tools, messages } => {
            let prior =
                match &req.previous_response_id {
                    None => None,
                    Some(id) => {
                        Some(lock(&st.stored).map.get(id).cloned().ok_or_else(|| {
                            format!("Previous response with id '{id}' not found.")
                        })?)
                    }
                };
            let mut ids = Vec::new();
            let mut count = u64::from(st.cfg.template_overhead_tokens);
            for t in tools {
                let t = st.ids(t)?;
                count += t.len() as u64;
                ids.extend_from_slice(&t);
            }
            let mut stored = 0;
            if let Some(p) = &prior {
                p.extend_ids(&mut ids);
                stored = p.count;
            }
            let from = ids.len();
            if messages.first().is_some_and(|m| m.role.is_none()) && prior.is_none() {
                return Err("a function_call item continues no stored response".into());
            }
            let own = count_messages(st, messages, &mut ids)?;
            count += stored + own;
            Ok(Counted {
                ids,
                count,
                stored,
                messages: Some(ToStore {
                    parent: prior,
                    from,
                    count: stored + own,
                }),
            })
        }
    }
}
