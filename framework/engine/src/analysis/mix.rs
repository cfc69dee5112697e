//! `analyze` of a run of several models: each model's requests and an ideal
//! per-rank cache of its own, and the LoRA adapter loads under each adapter
//! capacity.

use super::RankCounts;
use crate::synthesis::prefix::Shape;
use batchbench_contract::analysis::CacheFigures;
use std::collections::HashMap;

/// A mix's figures as the layout goes: each model's requests and its own
/// ideal per-rank cache, and each adapter capacity's loads per rank.
pub(super) struct Mix<'a> {
    spec: &'a batchbench_contract::models::ModelMixSpec,
    picker: batchbench_contract::models::Picker,
    /// Per model: its index among the adapters (`None`: a base model).
    adapter: Vec<Option<usize>>,
    /// Per model: requests, prompt tokens, cached tokens.
    counts: Vec<RankCounts>,
    /// Per model and rank: its ideal cache.
    ideal: HashMap<(usize, u64), crate::synthesis::prefix::IdealCache>,
    /// Against a fleet with a model map: each model's pool, and each pool's
    /// endpoints.
    pools: Option<batchbench_contract::models::Pools>,
    /// Per capacity: its slots per rank, adapter requests and loads.
    slots: Vec<(
        u32,
        HashMap<u64, batchbench_contract::models::AdapterSlots>,
        u64,
        u64,
    )>,
}

/// The block hashes of a prompt of `model` in a cache shared by a mix's
/// models (an LRU of one capacity): a model's blocks are its own.
pub(super) fn own_blocks(hashes: &[u64], model: usize) -> Vec<u64> {
    let salt = (model as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    hashes.iter().map(|h| h ^ salt).collect()
}

impl<'a> Mix<'a> {
    pub(super) fn new(spec: &'a batchbench_contract::models::ModelMixSpec, slots: &[u32]) -> Self {
        let mut next = 0;
        let adapter = spec
            .models
            .iter()
            .map(|m| {
                m.base.as_ref().map(|_| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        Self {
            spec,
            picker: batchbench_contract::models::Picker::new(spec),
            adapter,
            counts: spec.models.iter().map(|_| RankCounts::default()).collect(),
            ideal: HashMap::new(),
            slots: slots.iter().map(|&n| (n, HashMap::new(), 0, 0)).collect(),
            pools: None,
        }
    }

    /// The model of the conversation `req` opens: the one it names (a
    /// replayed trajectory's own), else the mix's pick.
    pub(super) fn open(
        &self,
        req: &batchbench_contract::plan::PlannedRequest,
        seed: u64,
        ord: u64,
        index: u64,
        id: &str,
    ) -> Result<usize, crate::options::EngineError> {
        match req.model.as_deref() {
            Some(n) => self.spec.index(n).ok_or_else(|| {
                crate::options::EngineError::Plan(format!(
                    "trajectory {id}: field model: '{n}' is not a model of --model-mix"
                ))
            }),
            None => Ok(self.picker.pick(seed, ord, index)),
        }
    }

    /// Takes the fleet's map of which endpoints (of `endpoints`) serve each
    /// model.
    pub(super) fn pool_endpoints(&mut self, endpoints: u64) -> Result<(), String> {
        self.pools = self.spec.distinct_pools(endpoints as usize)?;
        Ok(())
    }

    /// The pool of model `m` and its endpoints, where a map narrows them.
    pub(super) fn pool(&self, m: usize) -> Option<(usize, &[usize])> {
        self.pools.as_ref().map(|p| p.of(m))
    }

    pub(super) fn record(&mut self, model: usize, rank: u64, shape: &mut Shape, tokens: u64) {
        let ideal = self.ideal.entry((model, rank)).or_default();
        let c = &mut self.counts[model];
        c.requests += 1;
        c.prompt += tokens;
        // Keyed apart from the rank caches and the global one.
        let key = (1 << 62) | ((model as u64) << 32) | (rank & 0xFFFF_FFFF);
        c.cached += shape.lookup_ideal(ideal, key);
        if let Some(a) = self.adapter[model] {
            for (n, per_rank, requests, loads) in &mut self.slots {
                let s = per_rank
                    .entry(rank)
                    .or_insert_with(|| batchbench_contract::models::AdapterSlots::new(*n as usize));
                *requests += 1;
                *loads += u64::from(s.take(a));
            }
        }
    }

    pub(super) fn figures(
        &self,
        requests: u64,
    ) -> Vec<batchbench_contract::analysis::ModelFigures> {
        self.spec
            .models
            .iter()
            .zip(&self.counts)
            .map(|(m, c)| batchbench_contract::analysis::ModelFigures {
                model: m.name.clone(),
                base: m.base.clone(),
                requests: c.requests,
                share: c.requests as f64 / requests.max(1) as f64,
                cache: CacheFigures::new(None, c.requests, c.prompt, c.cached),
            })
            .collect()
    }

    pub(super) fn loads(&self, requests: u64) -> Vec<batchbench_contract::analysis::AdapterLoads> {
        self.slots
            .iter()
            .map(
                |(n, _, adapter_requests, loads)| batchbench_contract::analysis::AdapterLoads {
                    max_loras: *n,
                    loads: *loads,
                    adapter_requests: *adapter_requests,
                    share: *loads as f64 / requests.max(1) as f64,
                },
            )
            .collect()
    }
}
