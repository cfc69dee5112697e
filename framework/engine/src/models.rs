//! A run of several models: which model each conversation goes to, and how
//! it is named on the wire (see [`batchbench_contract::models`]).

use batchbench_contract::models::{ModelMixSpec, Picker};
use serde_json::Value;

/// A checked mix, ready for the turn driver.
#[derive(Debug)]
pub struct Models {
    /// The models' names, in the mix's order (the summary's rows).
    pub names: Vec<String>,
    picker: Picker,
    /// Per model: the request's `model` field and the fields that name an
    /// adapter.
    wire: Vec<(String, Vec<(String, Value)>)>,
    /// Against a fleet with a map of its endpoints' models: each model's
    /// pool, and each pool's endpoints (a routing policy of its own picks
    /// among them).
    pools: Option<batchbench_contract::models::Pools>,
}

impl Models {
    /// The mix of `spec` for a run of `endpoints` endpoints, checked.
    pub fn new(spec: &ModelMixSpec, endpoints: usize) -> Result<Self, String> {
        spec.check()?;
        Ok(Self {
            pools: spec.distinct_pools(endpoints)?,
            names: spec.models.iter().map(|m| m.name.clone()).collect(),
            picker: Picker::new(spec),
            wire: (0..spec.models.len()).map(|i| spec.wire(i)).collect(),
        })
    }

    /// The model of the conversation that request `opening` of `agent`
    /// (trajectory `trajectory`) opened: the one the request names (a
    /// replayed trajectory's own), else the mix's pick.
    pub(crate) fn pick(
        &self,
        seed: u64,
        (agent, trajectory): (u64, &str),
        opening: u64,
        named: Option<&str>,
    ) -> Result<usize, String> {
        match named {
            None => Ok(self.picker.pick(seed, agent, opening)),
            Some(n) => self.names.iter().position(|m| m == n).ok_or_else(|| {
                format!(
                    "trajectory {trajectory}, request {opening}: field model: '{n}' is not a model of --model-mix ({})",
                    self.names.join(", ")
                )
            }),
        }
    }

    /// The pool of model `i` and its endpoints, where a map narrows them.
    pub(crate) fn pool(&self, i: usize) -> Option<(usize, &[usize])> {
        self.pools.as_ref().map(|p| p.of(i))
    }

    /// How many pools a fleet's map makes (0 without one): each needs a
    /// routing policy of its own.
    pub fn pool_count(&self) -> usize {
        self.pools
            .as_ref()
            .map_or(0, batchbench_contract::models::Pools::len)
    }

    /// Model `i`'s `model` field and adapter fields.
    pub(crate) fn wire(&self, i: usize) -> (&str, &[(String, Value)]) {
        let (m, f) = &self.wire[i];
        (m, f)
    }
}
