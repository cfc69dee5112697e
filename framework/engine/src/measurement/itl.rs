//! Inter-token latency: a streamed reply's gaps between chunks, each shared
//! by the tokens its chunk carried, for the whole reply and for each phase of
//! one that reasoned and then answered.

use batchbench_contract::plugin::Reply;
use std::time::Instant;

/// A streamed reply's inter-token gaps (per-token microseconds, tokens) as a
/// held record keeps them until the steady state's cut decides whether they
/// count: the whole reply's, and each phase's where it reasoned and answered.
#[derive(Debug, Default)]
pub struct StreamGaps {
    /// The whole reply's ([`itl_gaps`]).
    pub all: Vec<(u32, u32)>,
    /// The reasoning phase's ([`phase_itl_gaps`]).
    pub reasoning: Vec<(u32, u32)>,
    /// The answer phase's.
    pub answer: Vec<(u32, u32)>,
}

impl StreamGaps {
    /// The gaps of `reply`, of `completion_tokens` with `reasoning` of them.
    pub fn of(reply: &Reply, completion_tokens: u64, reasoning: Option<u64>) -> Self {
        let narrow = |(us, k): (u64, u64)| {
            (
                u32::try_from(us).unwrap_or(u32::MAX),
                u32::try_from(k).unwrap_or(u32::MAX),
            )
        };
        let (r, a) = phase_itl_gaps(reply, completion_tokens, reasoning).unwrap_or_default();
        StreamGaps {
            all: itl_gaps(reply, completion_tokens).map(narrow).collect(),
            reasoning: r.into_iter().map(narrow).collect(),
            answer: a.into_iter().map(narrow).collect(),
        }
    }

    /// Their memory, in bytes.
    pub fn bytes(&self) -> usize {
        (self.all.len() + self.reasoning.len() + self.answer.len()) * 8
    }
}

/// An inter-token gap: microseconds per token, and the tokens that shared it.
pub type Gap = (u64, u64);

/// A streamed reply's inter-token latency split by phase, where it reasoned
/// (`reasoning` of its `completion_tokens`) and then answered: the chunks
/// before the first answer token are the reasoning's and share its tokens,
/// the rest share the answer's, each as [`itl_gaps`] shares a whole reply's.
/// The gap from the last reasoning chunk to the first answer chunk is the
/// answer's first (its first token's wait). `None` for a reply without both
/// phases.
pub fn phase_itl_gaps(
    reply: &Reply,
    completion_tokens: u64,
    reasoning: Option<u64>,
) -> Option<(Vec<Gap>, Vec<Gap>)> {
    let reasoning = reasoning.filter(|&r| r > 0 && r < completion_tokens)?;
    let first_answer = reply.first_answer_at?;
    let split = reply.chunks.partition_point(|c| c.0 < first_answer);
    if split == 0 || split == reply.chunks.len() {
        return None;
    }
    // Each chunk's gap (from the chunk before it) shared by its tokens.
    let gaps = |windows: &[(Instant, u32)], shares: Vec<u64>| {
        windows
            .windows(2)
            .zip(shares)
            .filter(|(_, k)| *k > 0)
            .map(|(w, k)| {
                let gap = w[1].0.saturating_duration_since(w[0].0);
                (gap.as_micros() as u64 / k, k)
            })
            .collect::<Vec<_>>()
    };
    let thinking = &reply.chunks[..split];
    let in_reasoning = gaps(thinking, allocate_tokens(thinking, reasoning).split_off(1));
    // The answer's chunks after the last reasoning chunk, which carries none
    // of the answer's tokens: its window is the first answer chunk's gap.
    let in_answer = gaps(
        &reply.chunks[split - 1..],
        allocate_tokens(&reply.chunks[split..], completion_tokens - reasoning),
    );
    Some((in_reasoning, in_answer))
}

/// A streamed reply's inter-token latency: (microseconds per token, tokens)
/// for each gap between chunks. Each chunk's gap is shared by the tokens it
/// carried. Servers rarely say how many that is, so the completion tokens are
/// allocated to chunks by content bytes (largest remainder, at least one each):
/// exact when every chunk is one token, and never more samples than tokens.
pub fn itl_gaps(reply: &Reply, completion_tokens: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let tokens = allocate_tokens(&reply.chunks, completion_tokens);
    reply
        .chunks
        .windows(2)
        .zip(tokens.into_iter().skip(1))
        .filter(|(_, k)| *k > 0)
        .map(|(w, k)| {
            let gap = w[1].0.saturating_duration_since(w[0].0);
            (gap.as_micros() as u64 / k, k)
        })
}

/// Splits `total` tokens over chunks in proportion to their byte lengths.
pub(crate) fn allocate_tokens(chunks: &[(Instant, u32)], total: u64) -> Vec<u64> {
    let n = chunks.len() as u64;
    if n == 0 {
        return Vec::new();
    }
    if total <= n {
        // One token per chunk until the tokens run out.
        return (0..n).map(|i| u64::from(i < total)).collect();
    }
    let bytes: u64 = chunks.iter().map(|c| u64::from(c.1)).sum::<u64>().max(1);
    let spare = total - n; // every chunk carries at least one
    let mut out: Vec<u64> = Vec::with_capacity(chunks.len());
    let mut rema: Vec<(u64, usize)> = Vec::with_capacity(chunks.len());
    let mut given = 0;
    for (i, c) in chunks.iter().enumerate() {
        let exact = u128::from(spare) * u128::from(c.1);
        let whole = (exact / u128::from(bytes)) as u64;
        rema.push(((exact % u128::from(bytes)) as u64, i));
        out.push(1 + whole);
        given += whole;
    }
    rema.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in rema.into_iter().take((spare - given) as usize) {
        out[i] += 1;
    }
    out
}
