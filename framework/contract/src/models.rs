//! Several models in one run: a weighted mix of model names (base models
//! and LoRA adapters of them), how each request's model is picked, and how
//! an adapter is named on the wire.
//!
//! The pick is a pure function of the seed, the agent and the request that
//! opened the conversation: a conversation stays on its model (a server's
//! prefix cache is per model, and a conversation moved to another model is
//! another workload), a rerun picks the same models, and `analyze` predicts
//! the run's models from its plan alone.

use crate::names::{name_of, named};
use serde::{Deserialize, Serialize};

/// One model of a mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixModel {
    /// The model's name: the request's `model` field, or the adapter's name.
    pub name: String,
    /// Its share of the picks, relative to the others' (positive).
    pub weight: f64,
    /// The base model this one is a LoRA adapter of (absent: a base model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Its tokenizer (absent: its base's, else the run's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
}

/// How each conversation's model is picked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSelection {
    /// At random by weight, per conversation (seeded).
    #[default]
    Random,
    /// In turn, by weight (smooth weighted round robin), by the agent's
    /// number plus the conversation's opening request: one user at a time,
    /// its conversations in turn; one request per user, user by user.
    RoundRobin,
    /// At random by weight, per agent: every request of an agent (a user, a
    /// trajectory) goes to one model, as a real multi-turn user's does.
    Session,
}

impl ModelSelection {
    const ALL: [(&'static str, Self); 3] = [
        ("random", Self::Random),
        ("round_robin", Self::RoundRobin),
        ("session", Self::Session),
    ];
}

impl std::str::FromStr for ModelSelection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        named(
            &Self::ALL,
            s,
            "a model selection (random, round_robin or session)",
        )
    }
}

/// Where an adapter's name goes in a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdapterField {
    /// The request's `model` is the adapter's name (vLLM, OpenAI-compatible
    /// gateways).
    #[default]
    Model,
    /// `model` is the base, `lora_path` the adapter (SGLang).
    LoraPath,
    /// `model` is the base, `lora` a list of `{"id", "scale"}` with the
    /// adapter at scale 1 and the mix's other adapters at 0 (llama.cpp; ids
    /// are the adapters' places in the mix, which must be the order the
    /// server loaded them).
    LoraId,
}

impl AdapterField {
    const ALL: [(&'static str, Self); 3] = [
        ("model", Self::Model),
        ("lora_path", Self::LoraPath),
        ("lora_id", Self::LoraId),
    ];
}

impl std::str::FromStr for AdapterField {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        named(
            &Self::ALL,
            s,
            "an adapter field (model, lora_path or lora_id)",
        )
    }
}

/// A run's model mix.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelMixSpec {
    /// The models, in order.
    pub models: Vec<MixModel>,
    /// How each conversation's model is picked.
    pub selection: ModelSelection,
    /// Where an adapter's name goes.
    pub adapter_field: AdapterField,
    /// Before anything is sent, check that every endpoint's `/v1/models`
    /// lists each name a request will carry in its `model` field.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub check_served: bool,
    /// A fleet's map of which endpoint serves which models: an endpoint
    /// listed serves those alone, one not listed serves every model (absent:
    /// every endpoint serves the whole mix).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointModels>,
}

/// The models one endpoint of a fleet serves (`--endpoint-models`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointModels {
    /// The endpoint's index, in the order of the run's hosts (from 0).
    pub endpoint: usize,
    /// The models of the mix it serves, by name.
    pub models: Vec<String>,
}

/// A fleet's model map as pools of endpoints: models served by the same
/// endpoints share a pool, as a gateway balances each set of replicas with a
/// balancer of its own (the run keeps a routing policy per pool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pools {
    /// Each model's pool.
    of: Vec<usize>,
    /// Each pool's endpoints, in host order.
    pools: Vec<Vec<usize>>,
}

impl Pools {
    /// Model `m`'s pool and its endpoints.
    pub fn of(&self, m: usize) -> (usize, &[usize]) {
        let p = self.of[m];
        (p, &self.pools[p])
    }

    /// How many pools there are.
    pub fn len(&self) -> usize {
        self.pools.len()
    }

    /// Whether there is none (never, for a map that was checked).
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }
}

/// Parses `I=NAME,NAME` (one `--endpoint-models`).
pub fn parse_endpoint_models(s: &str) -> Result<EndpointModels, String> {
    let (i, names) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not ENDPOINT=MODEL,MODEL"))?;
    let endpoint = i.trim().parse().map_err(|_| {
        format!(
            "'{s}': the endpoint '{}' is not an index (0 for the first host)",
            i.trim()
        )
    })?;
    let models: Vec<String> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    if models.is_empty() {
        return Err(format!("'{s}': endpoint {endpoint} names no model"));
    }
    Ok(EndpointModels { endpoint, models })
}

/// Parses `name[@base]=weight,...` (`--model-mix`).
pub fn parse_mix(s: &str) -> Result<Vec<MixModel>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|part| {
            let (name, weight) = part
                .rsplit_once('=')
                .ok_or_else(|| format!("'{part}' is not NAME=WEIGHT (or ADAPTER@BASE=WEIGHT)"))?;
            let weight: f64 = weight
                .trim()
                .parse()
                .map_err(|_| format!("'{part}': the weight '{}' is not a number", weight.trim()))?;
            let (name, base) = match name.split_once('@') {
                Some((a, b)) => (a.trim(), Some(b.trim().to_owned())),
                None => (name.trim(), None),
            };
            Ok(MixModel {
                name: name.to_owned(),
                weight,
                base,
                tokenizer: None,
            })
        })
        .collect()
}

impl ModelMixSpec {
    /// Checks the mix: at least one model, names given once, weights
    /// positive and finite, adapters' bases named.
    pub fn check(&self) -> Result<(), String> {
        if self.models.is_empty() {
            return Err("the mix names no model".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &self.models {
            if m.name.is_empty() {
                return Err("a model of the mix has no name".into());
            }
            if !seen.insert(m.name.as_str()) {
                return Err(format!("model '{}' is named twice", m.name));
            }
            if !m.weight.is_finite() || m.weight <= 0.0 {
                return Err(format!(
                    "model '{}': weight {} is not a positive number",
                    m.name, m.weight
                ));
            }
            if m.base.as_deref().is_some_and(str::is_empty) {
                return Err(format!("adapter '{}' names no base (ADAPTER@BASE)", m.name));
            }
        }
        let lora_fields = self.adapter_field != AdapterField::Model;
        if lora_fields && !self.models.iter().any(|m| m.base.is_some()) {
            return Err(format!(
                "adapter field {}: no model of the mix is an adapter (ADAPTER@BASE=WEIGHT)",
                name_of(&AdapterField::ALL, self.adapter_field)
            ));
        }
        Ok(())
    }

    /// Per model, the endpoints (of `endpoints`) that serve it, in order, by
    /// the map of [`ModelMixSpec::endpoints`]; `None` without a map. Refuses
    /// an endpoint out of range or listed twice, a name not in the mix, and a
    /// model no endpoint serves.
    pub fn pools(&self, endpoints: usize) -> Result<Option<Vec<Vec<usize>>>, String> {
        if self.endpoints.is_empty() {
            return Ok(None);
        }
        let mut serves: Vec<Option<Vec<usize>>> = vec![None; endpoints];
        for e in &self.endpoints {
            let slot = serves.get_mut(e.endpoint).ok_or_else(|| {
                format!(
                    "endpoint {}: the run has {endpoints} endpoint(s) (0 to {})",
                    e.endpoint,
                    endpoints.saturating_sub(1)
                )
            })?;
            if slot.is_some() {
                return Err(format!("endpoint {} is mapped twice", e.endpoint));
            }
            let models = e
                .models
                .iter()
                .map(|n| {
                    self.index(n).ok_or_else(|| {
                        format!("endpoint {}: '{n}' is not a model of the mix", e.endpoint)
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            *slot = Some(models);
        }
        let pools: Vec<Vec<usize>> = (0..self.models.len())
            .map(|m| {
                (0..endpoints)
                    .filter(|&e| serves[e].as_ref().is_none_or(|s| s.contains(&m)))
                    .collect()
            })
            .collect();
        if let Some(m) = pools.iter().position(Vec::is_empty) {
            return Err(format!(
                "model '{}' is served by no endpoint",
                self.models[m].name
            ));
        }
        Ok(Some(pools))
    }

    /// The distinct pools of [`ModelMixSpec::pools`] (see [`Pools`]);
    /// `None` without a map.
    pub fn distinct_pools(&self, endpoints: usize) -> Result<Option<Pools>, String> {
        let Some(per_model) = self.pools(endpoints)? else {
            return Ok(None);
        };
        let mut pools: Vec<Vec<usize>> = Vec::new();
        let of = per_model
            .into_iter()
            .map(|p| match pools.iter().position(|q| *q == p) {
                Some(i) => i,
                None => {
                    pools.push(p);
                    pools.len() - 1
                }
            })
            .collect();
        Ok(Some(Pools { of, pools }))
    }

    /// Whether endpoint `e` serves model `m` (see [`ModelMixSpec::pools`]).
    pub fn serves(&self, e: usize, m: usize) -> bool {
        self.endpoints
            .iter()
            .find(|x| x.endpoint == e)
            .is_none_or(|x| x.models.iter().any(|n| *n == self.models[m].name))
    }

    /// The index of `name` in the mix.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }

    /// The tokenizer of model `i`: its own, else its base's (where the base
    /// is in the mix), else `None` (the run's).
    pub fn tokenizer(&self, i: usize) -> Option<&str> {
        let m = &self.models[i];
        m.tokenizer.as_deref().or_else(|| {
            let base = m.base.as_deref()?;
            self.models
                .iter()
                .find(|b| b.name == base)
                .and_then(|b| b.tokenizer.as_deref())
        })
    }

    /// The names requests carry in their `model` field, once each in the
    /// mix's order: every model's own (an adapter's with
    /// [`AdapterField::Model`]), else an adapter's base.
    pub fn served_names(&self) -> Vec<&str> {
        self.served_names_of(|_| true)
    }

    /// [`ModelMixSpec::served_names`] of the models `keep` keeps (an
    /// endpoint's, by index).
    pub fn served_names_of(&self, keep: impl Fn(usize) -> bool) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (i, m) in self.models.iter().enumerate() {
            if !keep(i) {
                continue;
            }
            let name = match (&m.base, self.adapter_field) {
                (Some(b), AdapterField::LoraPath | AdapterField::LoraId) => b.as_str(),
                _ => m.name.as_str(),
            };
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    /// The adapters of the mix, in order (their ids for [`AdapterField::LoraId`]).
    pub fn adapters(&self) -> impl Iterator<Item = &MixModel> {
        self.models.iter().filter(|m| m.base.is_some())
    }

    /// `(model field, extra body fields)` of model `i` on the wire.
    pub fn wire(&self, i: usize) -> (String, Vec<(String, serde_json::Value)>) {
        let m = &self.models[i];
        let Some(base) = &m.base else {
            return (m.name.clone(), Vec::new());
        };
        match self.adapter_field {
            AdapterField::Model => (m.name.clone(), Vec::new()),
            AdapterField::LoraPath => (
                base.clone(),
                vec![("lora_path".into(), serde_json::Value::from(m.name.clone()))],
            ),
            AdapterField::LoraId => {
                let list: Vec<serde_json::Value> = self
                    .adapters()
                    .enumerate()
                    .map(|(id, a)| {
                        let scale = if a.name == m.name { 1.0 } else { 0.0 };
                        serde_json::json!({"id": id, "scale": scale})
                    })
                    .collect();
                (
                    base.clone(),
                    vec![("lora".into(), serde_json::Value::from(list))],
                )
            }
        }
    }
}

/// Stream purpose of the model picks, apart from every other draw.
const PURPOSE_MODEL: u64 = 0x30DE_1000;

/// Length of the round robin's cycle.
const CYCLE: usize = 1_000;

/// A mix ready to pick from.
#[derive(Debug, Clone)]
pub struct Picker {
    selection: ModelSelection,
    /// Cumulative shares, ending at 1.
    cumulative: Vec<f64>,
    /// The round robin's cycle.
    cycle: Vec<u16>,
}

impl Picker {
    /// The picker of a checked mix.
    pub fn new(spec: &ModelMixSpec) -> Self {
        let total: f64 = spec.models.iter().map(|m| m.weight).sum();
        let mut acc = 0.0;
        let mut cumulative: Vec<f64> = spec
            .models
            .iter()
            .map(|m| {
                acc += m.weight / total;
                acc
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        // Smooth weighted round robin (as nginx balances): each step every
        // model gains its weight, the one ahead is picked and pays the total.
        let mut current = vec![0.0; spec.models.len()];
        let cycle = (0..CYCLE)
            .map(|_| {
                for (c, m) in current.iter_mut().zip(&spec.models) {
                    *c += m.weight;
                }
                let best = (0..current.len())
                    .max_by(|&a, &b| current[a].total_cmp(&current[b]).then(b.cmp(&a)))
                    .unwrap_or(0);
                current[best] -= total;
                best as u16
            })
            .collect();
        Self {
            selection: spec.selection,
            cumulative,
            cycle,
        }
    }

    /// The model (index) of the conversation that request `opening` of agent
    /// `agent` opened.
    pub fn pick(&self, seed: u64, agent: u64, opening: u64) -> usize {
        let by_weight = |key: u64| {
            let u = crate::rng::Stream::at(seed, &[PURPOSE_MODEL, key]).next_f64();
            self.cumulative
                .iter()
                .position(|&c| u < c)
                .unwrap_or(self.cumulative.len() - 1)
        };
        match self.selection {
            ModelSelection::Random => by_weight(crate::rng::derive(seed, &[agent, opening])),
            ModelSelection::Session => by_weight(agent),
            ModelSelection::RoundRobin => {
                let n = agent.wrapping_add(opening) % CYCLE as u64;
                usize::from(self.cycle[n as usize])
            }
        }
    }
}

/// The LoRA adapters resident on a server that holds at most `slots` at
/// once, evicting the least recently used (as vLLM's adapter cache does).
#[derive(Debug, Clone, Default)]
pub struct AdapterSlots {
    slots: usize,
    /// Least recently used first.
    resident: Vec<usize>,
}

impl AdapterSlots {
    /// Room for `slots` adapters (at least one).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: slots.max(1),
            resident: Vec::with_capacity(slots),
        }
    }

    /// Makes adapter `a` resident for a request; returns whether it had to
    /// be loaded.
    pub fn take(&mut self, a: usize) -> bool {
        let loaded = match self.resident.iter().position(|&r| r == a) {
            Some(p) => {
                self.resident.remove(p);
                false
            }
            None => {
                if self.resident.len() >= self.slots {
                    self.resident.remove(0);
                }
                true
            }
        };
        self.resident.push(a);
        loaded
    }

    /// The adapters resident, least recently used first.
    pub fn resident(&self) -> &[usize] {
        &self.resident
    }
}

/// Adapter loads of a server that holds at most `slots` adapters at once,
/// for the adapters requested in `order` (`None`: a base model, which needs
/// no slot).
pub fn adapter_loads(order: impl IntoIterator<Item = Option<usize>>, slots: usize) -> u64 {
    let mut s = AdapterSlots::new(slots);
    order
        .into_iter()
        .flatten()
        .map(|a| u64::from(s.take(a)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(s: &str, selection: ModelSelection) -> ModelMixSpec {
        ModelMixSpec {
            models: parse_mix(s).unwrap_or_else(|e| panic!("{e}")),
            selection,
            adapter_field: AdapterField::Model,
            check_served: false,
            endpoints: Vec::new(),
        }
    }

    #[test]
    fn an_endpoint_map_gives_each_model_its_endpoints() {
        let mut m = mix("base=1,sql@base=1,chat=1", ModelSelection::Random);
        assert_eq!(m.pools(3), Ok(None));
        m.endpoints = vec![
            parse_endpoint_models("0=base, sql").unwrap_or_else(|e| panic!("{e}")),
            parse_endpoint_models("2=chat").unwrap_or_else(|e| panic!("{e}")),
        ];
        // Endpoint 1 is not listed: it serves every model.
        assert_eq!(
            m.pools(3),
            Ok(Some(vec![vec![0, 1], vec![0, 1], vec![1, 2]]))
        );
        assert!(m.serves(0, 1) && !m.serves(0, 2) && m.serves(1, 2));
        // base and sql share a pool (a balancer); chat has its own.
        let pools = m.distinct_pools(3).unwrap_or_else(|e| panic!("{e}"));
        let pools = pools.unwrap_or_else(|| panic!("a map"));
        assert_eq!(pools.len(), 2);
        assert_eq!(
            (pools.of(0), pools.of(1)),
            ((0, &[0, 1][..]), (0, &[0, 1][..]))
        );
        assert_eq!(pools.of(2), (1, &[1, 2][..]));
        assert_eq!(m.served_names_of(|i| m.serves(2, i)), vec!["chat"]);
        assert!(
            m.pools(2)
                .unwrap_err()
                .contains("the run has 2 endpoint(s)")
        );
        m.endpoints[1].endpoint = 0;
        assert!(m.pools(3).unwrap_err().contains("mapped twice"));
        m.endpoints = vec![parse_endpoint_models("0=base,sql").unwrap_or_else(|e| panic!("{e}"))];
        assert!(
            m.pools(1)
                .unwrap_err()
                .contains("'chat' is served by no endpoint")
        );
        m.endpoints = vec![parse_endpoint_models("0=nope").unwrap_or_else(|e| panic!("{e}"))];
        assert!(
            m.pools(2)
                .unwrap_err()
                .contains("'nope' is not a model of the mix")
        );
        assert!(
            parse_endpoint_models("x=a")
                .unwrap_err()
                .contains("not an index")
        );
        assert!(
            parse_endpoint_models("1=")
                .unwrap_err()
                .contains("names no model")
        );
    }

    #[test]
    fn parses_weights_and_adapters() {
        let m = mix(
            "base=0.5, sql@base=0.3,chat@base=0.2",
            ModelSelection::Random,
        );
        assert_eq!(m.models.len(), 3);
        assert_eq!(m.models[1].name, "sql");
        assert_eq!(m.models[1].base.as_deref(), Some("base"));
        assert!(m.check().is_ok());
        assert!(parse_mix("a").is_err());
        assert!(
            parse_mix("a=x")
                .unwrap_err()
                .contains("'x' is not a number")
        );
    }

    #[test]
    fn bad_mixes_say_what_is_wrong() {
        let bad = |s: &str| mix(s, ModelSelection::Random).check().expect_err("refused");
        assert!(bad("a=0.5,b=0").contains("model 'b': weight 0"));
        assert!(bad("a=-1").contains("not a positive number"));
        assert!(bad("a=NaN").contains("not a positive number"));
        assert!(bad("a=1,a=2").contains("named twice"));
        let mut m = mix("a=1", ModelSelection::Random);
        m.adapter_field = AdapterField::LoraPath;
        assert!(
            m.check()
                .unwrap_err()
                .contains("no model of the mix is an adapter")
        );
    }

    #[test]
    fn picks_follow_the_weights_and_the_policy() {
        let m = mix("a=0.5,b=0.3,c=0.2", ModelSelection::Random);
        let p = Picker::new(&m);
        let mut n = [0u32; 3];
        for agent in 0..10_000 {
            n[p.pick(7, agent, 0)] += 1;
        }
        assert!((4_800..5_200).contains(&n[0]), "{n:?}");
        assert!((2_800..3_200).contains(&n[1]), "{n:?}");
        // Round robin: exact shares over each cycle of ten.
        let rr = Picker::new(&mix("a=5,b=3,c=2", ModelSelection::RoundRobin));
        let mut n = [0u32; 3];
        for i in 0..10 {
            n[rr.pick(0, 0, i)] += 1;
        }
        assert_eq!(n, [5, 3, 2]);
        // Session: one model per agent, whatever the request.
        let s = Picker::new(&mix("a=1,b=1,c=1", ModelSelection::Session));
        for agent in 0..50 {
            let first = s.pick(3, agent, 0);
            assert!((1..20).all(|i| s.pick(3, agent, i) == first));
        }
    }

    #[test]
    fn adapters_go_where_the_api_names_them() {
        let mut m = mix("base=1,sql@base=1,chat@base=1", ModelSelection::Random);
        assert_eq!(m.wire(1), ("sql".to_owned(), vec![]));
        m.adapter_field = AdapterField::LoraPath;
        assert_eq!(
            m.wire(2),
            (
                "base".to_owned(),
                vec![("lora_path".to_owned(), "chat".into())]
            )
        );
        assert_eq!(m.wire(0), ("base".to_owned(), vec![]));
        m.adapter_field = AdapterField::LoraId;
        let (model, fields) = m.wire(2);
        assert_eq!(model, "base");
        assert_eq!(
            fields[0].1,
            serde_json::json!([{"id": 0, "scale": 0.0}, {"id": 1, "scale": 1.0}])
        );
    }

    #[test]
    fn least_recently_used_adapters_are_loaded_again() {
        // Two slots, three adapters in turn: every request loads.
        let turn = [0, 1, 2, 0, 1, 2].map(Some);
        assert_eq!(adapter_loads(turn, 2), 6);
        assert_eq!(adapter_loads(turn, 3), 3);
        // Base requests need no slot.
        assert_eq!(adapter_loads([Some(0), None, Some(0), None], 1), 1);
    }
}
