//! Prompt synthesis: the content of each turn, made ready before it is sent.
//!
//! A turn's preparation job is copied out of its plan (so it can run anywhere),
//! then made: plain text of exact token counts on the proven path in place, on
//! the async thread, anything else (and images) on a bounded pool of blocking
//! threads. The next turn's job starts while the current request is in flight.

use crate::options::{DEFAULT_PROMPT, EngineError, EngineOptions};
use crate::synthesis::blocks::{self, BlockState};
use crate::tokens::TokenizerHandle;
use batchbench_contract::conversation::{Conversation, Message, Role, turn};
use batchbench_contract::plan::{PlannedRequest, PromptPlan};
use batchbench_contract::plugin::Reply;
use batchbench_contract::rng;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Stream purposes, so prompts and environment texts never share a stream.
const PURPOSE_PROMPT: u64 = 1;
const PURPOSE_ENV: u64 = 2;
const PURPOSE_IMAGE: u64 = 3;
// 4: audio clips (crate::audio::clip_key).

/// Token synthesis: the tokenizer and the bounded pool its jobs run on.
pub(crate) struct Synth {
    pub(crate) seed: u64,
    pub(crate) tokenizer: Option<Arc<TokenizerHandle>>,
    pub(crate) pool: Semaphore,
    pub(crate) texts: blocks::TextCache,
    /// A run of several models: each model's tokenizer, and the block texts
    /// made with it (models that share a tokenizer share them); empty: the
    /// run's for every request.
    pub(crate) models: Vec<(Arc<TokenizerHandle>, Arc<blocks::TextCache>)>,
    pub(crate) images: Option<batchbench_contract::spec::ImageSpec>,
    /// Makes the images (a PNG's shared body is compressed on first use).
    pub(crate) image_maker: std::sync::OnceLock<crate::synthesis::images::ImageMaker>,
    /// Audio clips on every conversation's first user message.
    pub(crate) audio: Option<Arc<crate::audio::AudioPlan>>,
}

/// Content made ready for a turn before it is sent.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// A fresh conversation opening with this user message, and its images
    /// and audio.
    Fresh(Arc<str>, Attachments),
    /// An appended environment (tool result) of this text.
    Append(Arc<str>),
    /// A structured prompt, with the block texts synthesised for it.
    Blocks {
        fresh: bool,
        blocks: batchbench_contract::plan::Blocks,
        made: blocks::Made,
        /// The images and audio of a fresh conversation's first user message.
        images: Attachments,
    },
    /// A verbatim body.
    Raw(batchbench_contract::plan::RawBody),
}

/// The images of a conversation's first user message.
type Images = Vec<Arc<batchbench_contract::conversation::Image>>;

/// What a conversation's first user message carries besides its text.
#[derive(Debug, Default)]
pub(crate) struct Attachments {
    images: Images,
    audio: Vec<Arc<batchbench_contract::audio::Audio>>,
}

impl Attachments {
    /// Puts them on `m`, replacing what it had, where there are any.
    fn attach(self, m: &mut Message) {
        if !self.images.is_empty() {
            m.images = self.images;
        }
        if !self.audio.is_empty() {
            m.audio = self.audio;
        }
    }
}

impl Prepared {
    /// Where the images and audio of a turn that opens a conversation go.
    fn attachments_mut(&mut self) -> Option<&mut Attachments> {
        match self {
            Self::Fresh(_, images)
            | Self::Blocks {
                fresh: true,
                images,
                ..
            } => Some(images),
            _ => None,
        }
    }
}

/// What a preparation job needs, copied out of the plan so it can run anywhere.
#[derive(Debug, Clone)]
pub(crate) struct PrepJob {
    trajectory_id: Arc<str>,
    agent_id: u64,
    request_index: u64,
    /// The model (of a mix) whose tokenizer makes the text.
    model: usize,
    kind: PrepKind,
}

#[derive(Debug, Clone)]
enum PrepKind {
    Fixed,
    Raw(batchbench_contract::plan::RawBody),
    Fresh {
        tokens: u32,
        prefix: Option<(u64, u32)>,
    },
    Append {
        tokens: u32,
    },
    Blocks {
        fresh: bool,
        blocks: batchbench_contract::plan::Blocks,
        needs: Vec<blocks::Need>,
    },
}

/// The preparation job of request `index`: how its prompt is made (see
/// [`PlannedRequest::prompt_plan`]), with the counts the plan implies. `prev` is
/// the request before it in the trajectory (`None` for the first).
pub(crate) fn job(
    opts: &EngineOptions,
    id: &Arc<str>,
    agent_id: u64,
    index: u64,
    prev: Option<&PlannedRequest>,
    req: &PlannedRequest,
    state: &BlockState,
) -> Result<PrepJob, EngineError> {
    let continues = prev.is_some() && !req.reset_before;
    // A conversation stays on the model its opening request was sent to.
    let model = match &opts.models {
        Some(_) if continues => state.model,
        Some(m) => m
            .pick(opts.seed, (agent_id, id), index, req.model.as_deref())
            .map_err(EngineError::Plan)?,
        // Without a mix, the run's one model (a request's own is ignored).
        None => 0,
    };
    let kind = match req.prompt_plan(continues) {
        PromptPlan::Raw(body) => PrepKind::Raw(body.clone()),
        PromptPlan::Blocks(bs) => {
            let fresh = !continues;
            let empty = BlockState::default();
            PrepKind::Blocks {
                fresh,
                blocks: bs.clone(),
                needs: blocks::needs(bs, fresh, if fresh { &empty } else { state }),
            }
        }
        PromptPlan::Default => PrepKind::Fixed,
        PromptPlan::Exact {
            prompt_tokens,
            overhead_tokens,
            shared_prefix,
        } => {
            let overhead = overhead_tokens.unwrap_or(opts.initial_overhead_tokens);
            if prompt_tokens <= overhead {
                return Err(EngineError::Plan(format!(
                    "trajectory {id}, request {index}: prompt_tokens {prompt_tokens} leaves no content after {overhead} overhead tokens"
                )));
            }
            PrepKind::Fresh {
                tokens: prompt_tokens - overhead,
                prefix: shared_prefix.map(|p| (p.key, p.tokens)),
            }
        }
        PromptPlan::Continue { environment_tokens } => PrepKind::Append {
            tokens: match environment_tokens {
                Some(t) => t,
                None => environment_growth(opts, id, index, prev, req)?,
            },
        },
    };
    Ok(PrepJob {
        trajectory_id: id.clone(),
        agent_id,
        request_index: index,
        model,
        kind,
    })
}

/// A continuing request's tool-result length from its prompt's growth: this
/// prompt less the previous one, its output and the turn's template overhead.
fn environment_growth(
    opts: &EngineOptions,
    id: &Arc<str>,
    index: u64,
    prev: Option<&PlannedRequest>,
    next: &PlannedRequest,
) -> Result<u32, EngineError> {
    let (Some(p0), Some(p1)) = (prev.and_then(|p| p.prompt_tokens), next.prompt_tokens) else {
        return Err(EngineError::Plan(format!(
            "trajectory {id}, request {index}: field environment_tokens or prompt_tokens is needed to continue a conversation"
        )));
    };
    let out = prev.and_then(|p| p.output_tokens).unwrap_or(0);
    let growth =
        i64::from(p1) - i64::from(p0) - i64::from(out) - i64::from(opts.turn_overhead_tokens);
    u32::try_from(growth).map_err(|_| {
        EngineError::Plan(format!(
            "trajectory {id}, request {index}: field prompt_tokens: environment growth {p1} - {p0} - {out} - {} is negative; mark the request reset_before",
            opts.turn_overhead_tokens
        ))
    })
}

/// The job of a trajectory's first request.
pub(crate) fn first_job(
    opts: &EngineOptions,
    id: &Arc<str>,
    agent_id: u64,
    req: &PlannedRequest,
) -> Result<PrepJob, EngineError> {
    job(opts, id, agent_id, 0, None, req, &BlockState::default())
}

/// The most tokens a turn synthesises on the async worker rather than the
/// blocking pool, on the proven path: at 200-300M tokens/s, at most ~15 us on
/// the async thread. Handing a 32-token prompt to the pool instead cost 64-67 us
/// of client CPU per request against 35-38 us made in place (bench/client-cpu.sh
/// shape, A/B, least of 3 runs each).
const INLINE_TOKENS: u64 = 4_096;

/// The most bytes of a reply's reasoning counted on the async thread: a model's
/// text takes a full encoding (about a microsecond a token), so anything
/// longer than a few dozen tokens is counted on the blocking pool, where it
/// delays no other request's stamps.
const INLINE_COUNT_BYTES: usize = 256;

impl Synth {
    /// The tokens of a reply's reasoning `text` by the tokenizer of the
    /// reply's `model` (of a mix; else the run's; none without one): in place
    /// when short, else on the blocking pool.
    pub(crate) async fn count_reasoning(&self, text: &str, model: usize) -> Option<u64> {
        let tok = self.tokenizer_of(model).0?.clone();
        if text.len() <= INLINE_COUNT_BYTES {
            return tok.count_synthetic(text).ok().map(|n| n as u64);
        }
        let _permit = self.pool.acquire().await.ok()?;
        let text = text.to_owned();
        tokio::task::spawn_blocking(move || {
            crate::schedule::pacer::background_priority();
            tok.count_synthetic(&text).ok().map(|n| n as u64)
        })
        .await
        .ok()
        .flatten()
    }
}

impl PrepJob {
    /// The tokens this job synthesises when all of it is plain text (no JSON
    /// piece, which needs the full tokenizer).
    fn inline_tokens(&self) -> Option<u64> {
        match &self.kind {
            PrepKind::Fresh { tokens, .. } | PrepKind::Append { tokens } => {
                Some(u64::from(*tokens))
            }
            PrepKind::Blocks { needs, .. } => blocks::plain_tokens(needs),
            PrepKind::Fixed | PrepKind::Raw(_) => Some(0),
        }
    }
}

/// The next turn's text: made by a task while the request is in flight when
/// that is real work, or after the reply when it costs less than a task.
pub(crate) enum NextPrep {
    Running(tokio::task::JoinHandle<Result<Prepared, EngineError>>),
    Later(PrepJob),
}

impl NextPrep {
    pub(crate) fn start(sh: &Arc<Synth>, job: PrepJob) -> Self {
        if sh.cheap(&job) {
            return Self::Later(job);
        }
        let synth = sh.clone();
        Self::Running(tokio::spawn(async move { prepare(&synth, job).await }))
    }

    /// Whether finishing it waits for a task that is still making it.
    pub(crate) fn still_running(&self) -> bool {
        matches!(self, Self::Running(h) if !h.is_finished())
    }

    pub(crate) fn cancel(self) {
        if let Self::Running(h) = self {
            h.abort();
        }
    }

    pub(crate) async fn finish(self, sh: &Arc<Synth>) -> Result<Prepared, EngineError> {
        match self {
            Self::Running(h) => h.await.map_err(|e| EngineError::Internal(e.to_string()))?,
            Self::Later(job) => prepare(sh, job).await,
        }
    }
}

impl Synth {
    /// The tokenizer that makes model `model`'s text (of a mix; else the
    /// run's), and the block texts made with it.
    fn tokenizer_of(&self, model: usize) -> (Option<&Arc<TokenizerHandle>>, &blocks::TextCache) {
        match self.models.get(model) {
            Some((tok, texts)) => (Some(tok), texts),
            None => (self.tokenizer.as_ref(), &self.texts),
        }
    }

    /// Whether a job's text is made in place on the async thread: nothing to
    /// make, or plain text of at most [`INLINE_TOKENS`] on the proven path.
    /// Anything else goes to the blocking pool.
    fn makes_in_place(&self, job: &PrepJob) -> bool {
        match &job.kind {
            PrepKind::Fixed | PrepKind::Raw(_) => true,
            PrepKind::Blocks { needs, .. } if needs.is_empty() => true,
            _ => {
                self.tokenizer_of(job.model)
                    .0
                    .is_some_and(|t| t.synthesis_path() == crate::tokens::SynthesisPath::Proven)
                    && job.inline_tokens().is_some_and(|n| n <= INLINE_TOKENS)
            }
        }
    }

    /// A job that costs less than spawning a task for it (which also runs on an
    /// async thread): made in place, with no image. Not spawning one per
    /// request took the exact 32-token shape from 13.3 to 10.3 us of client CPU
    /// per request (bench/client-cpu.sh).
    fn cheap(&self, job: &PrepJob) -> bool {
        self.images.is_none() && self.audio.is_none() && self.makes_in_place(job)
    }
}

pub(crate) async fn prepare(sh: &Arc<Synth>, job: PrepJob) -> Result<Prepared, EngineError> {
    let (agent, index) = (job.agent_id, job.request_index);
    let id = job.trajectory_id.clone();
    let mut prepared = prepare_text(sh, job).await?;
    if matches!(prepared, Prepared::Raw(_)) && (sh.audio.is_some() || sh.images.is_some()) {
        // Nothing is added to a body sent as it was written.
        return Err(EngineError::Plan(format!(
            "trajectory {id}, request {index}: a verbatim request body carries its own content: synthetic audio or images (--audio-ms, --audio-files, --images-per-request) cannot be added to it"
        )));
    }
    let seed = sh.seed;
    if let (Some(plan), Some(slot)) = (sh.audio.clone(), prepared.attachments_mut()) {
        slot.audio = off_thread(sh, (&id, index), move || {
            (0..u64::from(plan.per_request))
                .map(|k| {
                    plan.make(crate::audio::clip_key(seed, agent, index, k))
                        .map(Arc::new)
                })
                .collect()
        })
        .await?;
    }
    if let (Some(spec), Some(slot)) = (sh.images, prepared.attachments_mut()) {
        let synth = sh.clone();
        slot.images = off_thread(sh, (&id, index), move || {
            let maker = synth
                .image_maker
                .get_or_init(|| crate::synthesis::images::ImageMaker::new(seed, spec));
            (0..u64::from(spec.per_request))
                .map(|k| {
                    let key = rng::derive(seed, &[PURPOSE_IMAGE, agent, index, k]);
                    maker.make(key).map(Arc::new)
                })
                .collect()
        })
        .await?;
    }
    Ok(prepared)
}

/// Runs `make` on the blocking pool at background priority, one of the
/// pool's permits held; its error is the plan's, at `(trajectory, request)`.
async fn off_thread<T: Send + 'static>(
    sh: &Synth,
    (id, index): (&str, u64),
    make: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, EngineError> {
    let _permit = sh
        .pool
        .acquire()
        .await
        .map_err(|e| EngineError::Internal(e.to_string()))?;
    tokio::task::spawn_blocking(move || {
        crate::schedule::pacer::background_priority();
        make()
    })
    .await
    .map_err(|e| EngineError::Internal(e.to_string()))?
    .map_err(|e| EngineError::Plan(format!("trajectory {id}, request {index}: {e}")))
}

/// The text of a turn.
async fn prepare_text(sh: &Arc<Synth>, job: PrepJob) -> Result<Prepared, EngineError> {
    let seed = sh.seed;
    match &job.kind {
        PrepKind::Fixed => {
            return Ok(Prepared::Fresh(
                Arc::from(DEFAULT_PROMPT),
                Attachments::default(),
            ));
        }
        PrepKind::Raw(body) => return Ok(Prepared::Raw(body.clone())),
        // Recorded texts (or texts already sent) alone: nothing to make.
        PrepKind::Blocks {
            fresh,
            blocks,
            needs,
        } if needs.is_empty() => {
            return Ok(Prepared::Blocks {
                fresh: *fresh,
                blocks: blocks.clone(),
                made: Vec::new(),
                images: Attachments::default(),
            });
        }
        _ => {}
    }
    let (tok, texts) = sh.tokenizer_of(job.model);
    let Some(tok) = tok.cloned() else {
        return Err(EngineError::Plan(format!(
            "trajectory {}: a prompt-length target needs a tokenizer (--tokenizer-model)",
            job.trajectory_id
        )));
    };
    // On the proven path a plain-text piece is a few nanoseconds per token:
    // making it here costs less than handing it to the blocking pool.
    if sh.makes_in_place(&job) {
        return synthesise(&tok, seed, texts, &job);
    }
    let _permit = sh
        .pool
        .acquire()
        .await
        .map_err(|e| EngineError::Internal(e.to_string()))?;
    let synth = sh.clone();
    tokio::task::spawn_blocking(move || {
        crate::schedule::pacer::background_priority();
        synthesise(&tok, seed, synth.tokenizer_of(job.model).1, &job)
    })
    .await
    .map_err(|e| EngineError::Internal(e.to_string()))?
}

fn synthesise(
    tok: &TokenizerHandle,
    seed: u64,
    texts: &blocks::TextCache,
    job: &PrepJob,
) -> Result<Prepared, EngineError> {
    let ctx = || {
        format!(
            "trajectory {}, request {}",
            job.trajectory_id, job.request_index
        )
    };
    match job.kind {
        PrepKind::Fixed => Ok(Prepared::Fresh(
            Arc::from(DEFAULT_PROMPT),
            Attachments::default(),
        )),
        PrepKind::Raw(ref body) => Ok(Prepared::Raw(body.clone())),
        PrepKind::Fresh { tokens, prefix } => {
            let key = rng::derive(seed, &[PURPOSE_PROMPT, job.agent_id, job.request_index]);
            let text = tok.exact_text_with_prefix(
                prefix.map(|(k, n)| (k, n as usize)),
                key,
                tokens as usize,
                &ctx,
            )?;
            Ok(Prepared::Fresh(text.into(), Attachments::default()))
        }
        PrepKind::Append { tokens } => {
            let key = rng::derive(seed, &[PURPOSE_ENV, job.agent_id, job.request_index]);
            let ctx = || {
                format!(
                    "trajectory {}, request {}, environment",
                    job.trajectory_id, job.request_index
                )
            };
            Ok(Prepared::Append(
                tok.exact_text(key, tokens as usize, &ctx)?.into(),
            ))
        }
        PrepKind::Blocks {
            fresh,
            ref blocks,
            ref needs,
        } => {
            let ctx = |b: usize| {
                format!(
                    "trajectory {}, request {}, block {b}",
                    job.trajectory_id, job.request_index
                )
            };
            let made = blocks::synthesise(tok, needs, texts, &ctx)?;
            Ok(Prepared::Blocks {
                fresh,
                blocks: blocks.clone(),
                made,
                images: Attachments::default(),
            })
        }
    }
}

/// Applies a prepared turn to the conversation; returns the live blocks that fell
/// back to their seed.
pub(crate) fn apply(
    conv: &mut Conversation,
    prepared: Prepared,
    last_reply: Option<Reply>,
    agent_id: u64,
    index: u64,
    state: &mut BlockState,
) -> u32 {
    match prepared {
        Prepared::Blocks {
            fresh,
            blocks,
            made,
            images,
        } => {
            let fallbacks = blocks::apply(conv, &blocks, fresh, made, last_reply.as_ref(), state);
            if let Some(m) = conv.messages.iter_mut().find(|m| m.role == Role::User) {
                images.attach(m);
            }
            return fallbacks;
        }
        Prepared::Fresh(text, attachments) => {
            conv.clear();
            let mut m = Message::new(Role::User, text);
            attachments.attach(&mut m);
            conv.messages.push(m);
        }
        Prepared::Raw(_) => conv.clear(),
        Prepared::Append(env) => {
            // The reply, one synthetic call of ours, and its result (see `turn`).
            conv.messages
                .push(last_reply.unwrap_or_default().into_message());
            let id = turn::agent_call_id(agent_id, index);
            turn::call(
                &mut conv.messages,
                id.clone(),
                turn::ENVIRONMENT_TOOL,
                Arc::from("{}"),
            );
            conv.messages.push(turn::tool_result(env, id));
        }
    }
    0
}
