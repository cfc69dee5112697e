//! `analyze` of what requests carry besides their text and the answers they
//! ask for: the inputs an API answers one by one (a reranker's documents, an
//! embedding batch's inputs), images and audio clips on each conversation's
//! first user message, and the structured-output format of each request. Each
//! is drawn as a run would draw it: the same keys, the same rotation.

use super::DistBuilder;
use crate::options::EngineError;
use batchbench_contract::analysis::{AudioContent, Content, FormatShare};
use batchbench_contract::plan::PlannedRequest;
use batchbench_contract::plugin::RequestCodec;
use std::sync::Arc;

/// What a run adds to its requests, for `analyze`.
#[derive(Clone, Default)]
pub struct ContentPlan {
    /// The codec's name and the codec (its inputs per request).
    pub codec: Option<(String, Arc<dyn RequestCodec>)>,
    /// Images on every conversation's first user message.
    pub images_per_request: u32,
    /// Audio clips on every conversation's first user message.
    pub audio: Option<Arc<crate::audio::AudioPlan>>,
    /// Structured outputs: the formats requests ask for, in rotation.
    pub structured: Option<Arc<crate::measurement::structured::Structured>>,
}

impl std::fmt::Debug for ContentPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentPlan")
            .field("codec", &self.codec.as_ref().map(|c| &c.0))
            .field("images_per_request", &self.images_per_request)
            .field("audio", &self.audio.as_ref().map(|a| a.per_request))
            .field("structured", &self.structured.as_ref().map(|s| s.names()))
            .finish()
    }
}

/// The figures as the layout goes.
pub(super) struct Tally<'a> {
    plan: &'a ContentPlan,
    seed: u64,
    inputs: DistBuilder,
    images: u64,
    audio_requests: u64,
    clip_ms: DistBuilder,
    audio_seconds: f64,
    formats: Vec<u64>,
}

impl<'a> Tally<'a> {
    pub(super) fn new(plan: &'a ContentPlan, seed: u64) -> Self {
        let n = plan.structured.as_ref().map_or(0, |s| s.names().len());
        Self {
            plan,
            seed,
            inputs: DistBuilder::new(),
            images: 0,
            audio_requests: 0,
            clip_ms: DistBuilder::new(),
            audio_seconds: 0.0,
            formats: vec![0; n],
        }
    }

    /// Request `index` of the trajectory admitted `ord`-th (the run's agent
    /// id), which opens a conversation when `opens`.
    pub(super) fn record(
        &mut self,
        ord: u64,
        index: u64,
        req: &PlannedRequest,
        opens: bool,
    ) -> Result<(), EngineError> {
        if let Some((_, codec)) = &self.plan.codec {
            let messages = req.blocks.as_ref().map_or(1, |b| b.len() as u64);
            if let Some(n) = codec.inputs_per_request(messages) {
                self.inputs.record(n);
            }
        }
        if opens {
            self.images += u64::from(self.plan.images_per_request);
            if let Some(audio) = &self.plan.audio {
                self.audio_requests += 1;
                for k in 0..u64::from(audio.per_request) {
                    let secs = audio
                        .seconds(crate::audio::clip_key(self.seed, ord, index, k))
                        .map_err(EngineError::Plan)?;
                    self.audio_seconds += secs;
                    self.clip_ms.record((secs * 1000.0).round() as u64);
                }
            }
        }
        if let Some(s) = &self.plan.structured {
            self.formats[s.pick(ord, index)] += 1;
        }
        Ok(())
    }

    /// The figures, or `None` where the requests carry text alone.
    pub(super) fn finish(self) -> Option<Content> {
        let inputs_per_request = self.inputs.finish();
        let audio = self.clip_ms.finish().map(|clip_ms| AudioContent {
            requests: self.audio_requests,
            clips: clip_ms.count,
            seconds: self.audio_seconds,
            clip_ms,
        });
        let response_formats: Vec<FormatShare> = match &self.plan.structured {
            Some(s) => s
                .names()
                .into_iter()
                .zip(&self.formats)
                .map(|(name, &requests)| FormatShare { name, requests })
                .collect(),
            None => Vec::new(),
        };
        let plain = inputs_per_request.is_none()
            && self.images == 0
            && audio.is_none()
            && response_formats.is_empty();
        (!plain).then(|| Content {
            codec: self
                .plan
                .codec
                .as_ref()
                .map(|c| c.0.clone())
                .unwrap_or_default(),
            inputs_per_request,
            images: self.images,
            audio,
            response_formats,
        })
    }
}
