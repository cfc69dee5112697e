//! `analyze`'s use of a spec: the same workload, routers and template
//! overheads a run of it would use, described instead of sent.

use super::build::{build_routers, routing_policy};
use super::{AnalyzeSettings, Prelude, prelude};
use crate::exit::{Failure, engine_failure, plugin_failure};
use batchbench_contract::plugin::Router;
use batchbench_contract::registry;
use batchbench_contract::spec::RunSpec;
use std::sync::Arc;

/// Analyses the workload of `spec` without sending anything: the same
/// workload, routers and template overheads a run of it would use.
pub fn analyze(
    mut spec: RunSpec,
    settings: &AnalyzeSettings,
) -> Result<batchbench_contract::analysis::Analysis, Failure> {
    use batchbench_engine::analysis::{AnalyzeOptions, Routing};
    if let Some(shard) = spec.shard {
        return Err(Failure::bad(format!(
            "--shard {shard}: analyze describes the whole workload; drop --shard"
        )));
    }
    let Prelude {
        ctx,
        prep,
        open,
        target,
        ..
    } = prelude(&mut spec, false)?;
    let built = registry::workload(&spec.workload.name, &spec.workload.config, &ctx);
    let mut source = built.map_err(plugin_failure)?;
    let info = source.info();
    super::check::check_named_models(&spec, &info)?;
    if info.endless {
        return Err(Failure::bad(format!(
            "the {} workload goes on without end: analyze needs a finite one",
            spec.workload.name
        )));
    }
    let mut routers = build_routers(&spec.routers, &ctx)?;
    // A fleet's run picks endpoints by its policy: analysed with it, one
    // cache per endpoint.
    let fleet = target.endpoints();
    let policy = routing_policy(&mut spec, &mut routers, &ctx, fleet)?;
    let routed = routers.iter().any(|r| r.dp_rank(0).is_some());
    let routing = match settings.routing.as_deref() {
        None if policy.is_some() => "run",
        None if routed && settings.ranks.is_none() => "run",
        None => "affinity",
        Some(r) => r,
    };
    // The run's own policy (with its config), else a routing policy built
    // by name with its defaults; `None` when the name picks no endpoint.
    let chooser = |name: &str| -> Option<Arc<dyn Router>> {
        if let Some(r) = routers.iter().find(|r| r.chooses_endpoint())
            && policy.as_deref() == Some(name)
        {
            return Some(r.clone());
        }
        registry::router(name, &serde_json::json!({}), &ctx)
            .ok()
            .filter(|r| r.chooses_endpoint())
            .map(Arc::from)
    };
    let mut ranks = settings.ranks;
    let mut routing = match routing {
        "round-robin" => Routing::RoundRobin,
        "affinity" => Routing::Affinity,
        "run" if policy.is_some() => {
            let name = policy.clone().unwrap_or_default();
            ranks = Some(ranks.unwrap_or(u64::from(fleet)));
            Routing::Policy {
                router: chooser(&name).ok_or_else(|| {
                    Failure::bad(format!("--routing run: {name} picks no endpoint"))
                })?,
                name,
                seed: ctx.seed,
                pools: Vec::new(),
            }
        }
        "run" if !routed => {
            return Err(Failure::bad(
                "--routing run: the run has no router that assigns data-parallel ranks (--dp-rank-perfect-routing, or a --router with dp_rank)",
            ));
        }
        "run" if settings.ranks.is_some() => {
            return Err(Failure::bad(
                "--ranks and --routing run: the run's router sets the ranks; give one or the other",
            ));
        }
        "run" => Routing::Slots(Box::new(move |slot| {
            routers.iter().find_map(|r| r.dp_rank(slot))
        })),
        other => match chooser(other) {
            Some(router) => {
                ranks = Some(ranks.unwrap_or(u64::from(fleet)));
                Routing::Policy {
                    name: other.to_owned(),
                    router,
                    seed: ctx.seed,
                    pools: Vec::new(),
                }
            }
            None => {
                return Err(Failure::bad(format!(
                    "--routing {other}: one of round-robin, affinity, run, or a routing policy (round_robin, random, least_outstanding, session_affinity, prefix_affinity)"
                )));
            }
        },
    };
    if settings.ranks == Some(0) {
        return Err(Failure::bad("--ranks must be at least 1"));
    }
    if let Some(mix) = spec.target.mix.as_ref().filter(|m| !m.endpoints.is_empty()) {
        pool_routers(&spec, mix, &mut routing, ranks.unwrap_or(1), fleet, &ctx)?;
    }
    // The run's codec: what it sends back of reasoning, its inputs per
    // request and its structured-output fields.
    let codec: Arc<dyn batchbench_contract::plugin::RequestCodec> =
        registry::codec(&spec.codec.name, &spec.codec.config, &ctx)
            .map_err(plugin_failure)?
            .into();
    // Replies assumed to reason: the run's choice of what goes back (its
    // codec's default unless it says), and the other beside it.
    let reasoning = match settings.reasoning_tokens {
        Some(tokens) => Some((
            tokens,
            super::execute::reasoning_history(&spec, codec.as_ref())?,
        )),
        None => None,
    };
    if !settings.max_loras.is_empty()
        && spec
            .target
            .mix
            .as_ref()
            .is_none_or(|m| m.adapters().next().is_none())
    {
        return Err(Failure::bad(
            "--max-loras counts the loads of a mix's LoRA adapters: give --model-mix with adapters (ADAPTER@BASE=WEIGHT)",
        ));
    }
    // What the run adds to its requests, drawn as the run would: its audio
    // files read and checked now, its schemas read, its codec asked.
    let content = batchbench_engine::analysis::ContentPlan {
        structured: super::execute::structured(&spec, codec.as_ref())?,
        codec: Some((spec.codec.name.clone(), codec)),
        images_per_request: spec.images.map_or(0, |i| i.per_request),
        audio: spec
            .audio
            .as_ref()
            .map(batchbench_engine::audio::AudioPlan::new)
            .transpose()
            .map_err(Failure::bad)?
            .map(Arc::new),
    };
    let opts = AnalyzeOptions {
        content,
        block_tokens: spec.target.cache_block_tokens(),
        overheads: batchbench_engine::synthesis::prefix::Overheads {
            initial: spec.template.initial_overhead_tokens,
            turn: spec.template.turn_overhead_tokens,
        },
        capacities: settings.capacities.clone(),
        ranks: ranks.unwrap_or(1),
        routing,
        max_active: spec.admission.max_active,
        open,
        // Sessions released at a rate start evenly at it; a request rate
        // (independent requests) is laid out as the closed loop.
        session_rate: spec
            .load
            .rate
            .filter(|_| spec.load.release == batchbench_contract::spec::Release::Sessions),
        time_scale: spec.admission.time_scale,
        latency_ms: settings.latency_ms,
        top: settings.top,
        seed: ctx.seed,
        reasoning,
        models: spec
            .target
            .mix
            .clone()
            .map(|m| (m, settings.max_loras.clone())),
    };
    let total = info.planned_requests.unwrap_or(0);
    let hook = prep.hook();
    let out = batchbench_engine::analysis::analyze(source.as_mut(), &opts, &mut |done| {
        hook.report("analysing requests", done, total.max(done));
    })
    .map_err(engine_failure);
    prep.finish();
    out
}

/// A fleet's model map in `analyze`: each pool of endpoints gets an instance
/// of the routing policy, as the run's has, so that
/// requests are placed in their model's endpoints as the run places them.
/// Against a fleet, the map needs a routing policy to place by.
fn pool_routers(
    spec: &RunSpec,
    mix: &batchbench_contract::models::ModelMixSpec,
    routing: &mut batchbench_engine::analysis::Routing,
    endpoints: u64,
    fleet: u32,
    ctx: &registry::BuildContext,
) -> Result<(), Failure> {
    let flag = "target.mix.endpoints (--endpoint-models)";
    let batchbench_engine::analysis::Routing::Policy { name, pools, .. } = routing else {
        if fleet > 1 {
            return Err(Failure::bad(format!(
                "{flag}: a fleet's map places each request among its model's endpoints by a routing policy: analyze with --routing run (the run's policy) or a policy's name"
            )));
        }
        return Ok(());
    };
    let n = mix
        .distinct_pools(endpoints as usize)
        .map_err(|e| Failure::bad(format!("{flag}: {e}")))?
        .map_or(0, |p| p.len());
    *pools = super::build::pool_policies(spec, name, n, ctx)?;
    Ok(())
}
