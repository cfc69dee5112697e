//! Executing a checked spec: the workload (sharded where asked), the codec,
//! routers and reporters built; a dry run's plan, or the target started (the
//! in-process simulator for `sim://`), its transports, and the engine run to
//! its summary.

use super::build::{build_routers, pool_policies, recorded_spec, reporters, routing_policy};
use super::check::check_endless;
use super::target::Target;
use super::{Outcome, Prelude, Profile, RunHooks, load_tokenizer, prelude};
use crate::exit::{Failure, engine_failure, plugin_failure, runtime};
use crate::progress::{Bound, Progress};
use batchbench_contract::plugin::{RequestCodec, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::{self, BuildContext};
use batchbench_contract::shard::Shard;
use batchbench_contract::spec::{LoadSpec, PluginSpec, RunSpec};
use batchbench_engine::run::{Engine, EngineOptions, RunOutput};
use batchbench_engine::schedule::shard::ShardedSource;
use batchbench_engine::tokens::TokenizerHandle;
use batchbench_engine::transport::{TargetConfig, TlsConfig, Transport, join_url};
use batchbench_simulator::Sim;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Cancels `token` on the first Ctrl+C; a second Ctrl+C exits at once. The
/// handler is registered before this returns, so a SIGINT at any later moment
/// (the first request included) cancels the run instead of killing it.
fn cancel_on_ctrl_c(token: CancellationToken) {
    let mut interrupts = crate::exit::interrupts();
    tokio::spawn(async move {
        if interrupts.recv().await {
            eprintln!("\ninterrupted: cancelling in-flight requests (Ctrl+C again to quit now)");
            token.cancel();
            if interrupts.recv().await {
                std::process::exit(crate::exit::EXIT_INTERRUPTED);
            }
        }
    });
}

/// Idle connections kept for an open loop without a concurrency cap.
const OPEN_POOL: u64 = 1024;

/// Runs `spec` as `profile` describes its reports: the whole path from a spec to
/// a summary. The spec's seed is drawn here when absent, and recorded.
pub fn execute(
    mut spec: RunSpec,
    profile: &Profile,
    mut hooks: RunHooks,
) -> Result<Outcome, Failure> {
    let endless = spec.load.duration_secs.is_some();
    let Prelude {
        ctx,
        prep,
        open,
        counted,
        target,
    } = prelude(&mut spec, endless)?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let rt = runtime(spec.target.client_threads.resolve(&spec.load, cores))?;
    // A local tokenizer loads on the runtime while this thread builds the
    // workload (reading a large manifest takes seconds): both stand between
    // launch and the first request. A hub id waits, so that bad input never
    // starts a download.
    let local = Path::new(spec.target.tokenizer()).exists();
    let named = spec.target.tokenizer_model.is_some() || spec.target.is_sim();
    let preload = (!spec.output.dry_run && local).then(|| {
        let spec = spec.clone();
        rt.spawn(async move { load_tokenizer(&spec).await })
    });
    let built = registry::workload(&spec.workload.name, &spec.workload.config, &ctx);
    prep.finish();
    let shard = spec.shard();
    let mut source = sharded(built.map_err(plugin_failure)?, shard)?;
    let info = source.info();
    check_endless(&spec, &info)?;
    super::check::check_named_models(&spec, &info)?;
    let (codec, knobs) = codec(&mut spec, &ctx)?;
    let structured = structured(&spec, codec.as_ref())?;
    let mut routers = build_routers(&spec.routers, &ctx)?;
    // This client's own request ids and trace context, where asked for.
    let ids = &spec.target.ids;
    if ids.send || ids.trace_context {
        let config = serde_json::json!({
            "header": ids.header(),
            "ids": ids.send,
            "trace_context": ids.trace_context,
        });
        routers.extend(build_routers(
            &[PluginSpec::new("request_ids".to_owned(), config)],
            &ctx,
        )?);
    }
    // The reasoning knobs, in the codec's own fields, on every request.
    if !knobs.is_empty() {
        routers.push(Arc::new(
            batchbench_plugins::routers::body_fields::BodyFields::of_run(knobs),
        ));
    }
    let routing = routing_policy(&mut spec, &mut routers, &ctx, target.endpoints())?;
    // The GPUs beside the client: refused here, before anything is sent,
    // where the library or a GPU is missing.
    let gpu = match spec.server_metrics.gpu_telemetry {
        Some(batchbench_contract::spec::GpuTelemetry::Nvml) if !spec.output.dry_run => Some(
            batchbench_engine::telemetry::gpu::Nvml::load()
                .map_err(|e| Failure::bad(format!("--gpu-telemetry nvml: {e}")))?,
        ),
        _ => None,
    };
    // The tokenizer the workload or the codec loaded while built, if one did.
    let counted = counted.get().cloned();
    let mut reps = reporters(&spec, profile, &ctx, !hooks.quiet_summary)?;
    reps.append(&mut hooks.reporters);
    // A dry run builds every plugin too, so a bad codec, router or reporter
    // config fails the same way it would fail a run.
    if spec.output.dry_run {
        let stats = match hooks.plan_out.as_mut() {
            Some(out) => batchbench_engine::run::dry_run(source.as_mut(), out),
            None => batchbench_engine::run::dry_run(source.as_mut(), &mut std::io::stdout().lock()),
        }
        .map_err(engine_failure)?;
        let line = (profile.dry_run_line)(&stats);
        if !line.is_empty() {
            eprintln!("{line}");
        }
        if let Some(line) = attachments_line(&spec) {
            eprintln!("dry run: {line}");
        }
        let view = (profile.view)(&recorded_spec(&spec), &info);
        return Ok(Outcome::DryRun { stats, view });
    }

    let needs_tokens = named || source.needs_tokenizer();
    let sizes = Sizes::of(&spec, &info, shard, open);
    let start_at_ms = spec.start_at_ms().map_err(Failure::bad)?;
    let recorded = recorded_spec(&spec);
    let view = (profile.view)(&recorded, &info);
    let bound = Bound::of(&spec.load, info.planned_requests);
    rt.block_on(async move {
        let tokenizer = match preload {
            // The workload counted with it already: no second load.
            Some(task) if counted.is_some() => {
                task.abort();
                counted
            }
            None if counted.is_some() => counted,
            Some(task) if needs_tokens => Some(task.await.map_err(|e| {
                Failure::failed(anyhow::anyhow!("the tokenizer loader failed: {e}"))
            })??),
            Some(_) | None if !needs_tokens => None,
            _ => Some(load_tokenizer(&spec).await?),
        };
        let model_toks = model_tokenizers(&spec).await?;
        let sims = start_sims(
            &target,
            tokenizer.as_ref(),
            sim_tokenizers(&spec, &model_toks),
        )
        .await?;
        let bases: Vec<String> = match &target {
            Target::Sim(_) => sims.iter().map(Sim::url).collect(),
            Target::Servers(urls) => urls.clone(),
        };
        // The simulator takes no key; a server's comes from the host, else
        // the variable the spec names.
        let api_key = match target {
            Target::Sim(_) => None,
            Target::Servers(_) => hooks
                .api_key
                .clone()
                .or_else(|| std::env::var(&spec.target.api_key_env).ok())
                .filter(|k| !k.is_empty()),
        };
        let mut transports = transports(&spec, codec.as_ref(), &bases, sizes.pool, api_key)?;
        if let Some(mix) = spec.target.mix.as_ref().filter(|m| m.check_served) {
            for (e, (t, base)) in transports.iter().zip(&bases).enumerate() {
                served(t, base, mix, e).await?;
            }
        }
        // A host (the Python package) cancels through its own token; the CLI
        // cancels on Ctrl+C.
        let cancel = hooks.cancel.unwrap_or_else(|| {
            let c = CancellationToken::new();
            cancel_on_ctrl_c(c.clone());
            c
        });
        let models = spec
            .target
            .mix
            .as_ref()
            .map(|m| batchbench_engine::models::Models::new(m, bases.len()).map(Arc::new))
            .transpose()
            .map_err(|e| Failure::bad(format!("--model-mix: {e}")))?;
        let pool_routers = match (models.as_deref(), routing.as_deref()) {
            (Some(m), Some(name)) => pool_policies(&spec, name, m.pool_count(), &ctx)?,
            _ => Vec::new(),
        };
        // Real clips are read and checked now: a file that does not decode
        // stops the run here, before anything is sent.
        let audio = spec
            .audio
            .as_ref()
            .map(batchbench_engine::audio::AudioPlan::new)
            .transpose()
            .map_err(Failure::bad)?
            .map(Arc::new);
        let opts = EngineOptions {
            audio,
            models,
            model: spec.target.model.clone(),
            seed: ctx.seed,
            max_active: usize::try_from(sizes.cap).unwrap_or(usize::MAX),
            stream: spec.target.stream,
            admission: spec.admission.mode,
            time_scale: spec.admission.time_scale,
            initial_overhead_tokens: spec.template.initial_overhead_tokens,
            turn_overhead_tokens: spec.template.turn_overhead_tokens,
            cache_block_tokens: spec.target.cache_block_tokens(),
            load: sizes.load,
            shard,
            start_at_ms,
            images: spec.images,
            token_times: spec.output.token_times,
            reasoning_history: spec.target.reasoning.history,
            structured,
            slo: spec.slo.clone(),
            max_failure_rate: spec.max_failure_rate,
            fail_if_client_bound: spec.fail_if_client_bound,
            server_metrics: scraped(&spec.server_metrics.urls, &bases),
            routing,
            metrics_interval: Duration::from_secs_f64(spec.server_metrics.interval_secs),
            ..EngineOptions::default()
        };
        let first = transports.remove(0);
        let mut engine = Engine::new(opts, first, Arc::from(codec))
            .record(view, recorded)
            .cancel_token(cancel)
            .reporter(Box::new(Progress::new(bound, spec.output.quiet)));
        for t in transports {
            engine = engine.endpoint(t);
        }
        if let Some(g) = gpu {
            engine = engine.gpu_telemetry(g);
        }
        for r in routers {
            engine = engine.router(r);
        }
        for r in reps {
            engine = engine.reporter(r);
        }
        if let Some(t) = tokenizer {
            engine = engine.tokenizer(t);
        }
        engine = engine.model_tokenizers(model_toks);
        engine = engine.pool_routers(pool_routers);
        let out = run_source(engine, source).await;
        for sim in sims {
            sim.stop().await;
        }
        out.map(|o| Outcome::Ran(Box::new(o)))
    })
}

/// The workload a shard runs: its share of the trajectories (the whole
/// workload when the run is not sharded). A shard left with none is refused.
fn sharded(
    source: Box<dyn WorkloadSource>,
    shard: Shard,
) -> Result<Box<dyn WorkloadSource>, Failure> {
    if shard.is_whole() {
        return Ok(source);
    }
    if let Some(t) = source.info().planned_trajectories
        && shard.share(t) == 0
    {
        return Err(Failure::bad(format!(
            "shard (--shard {shard}): the workload has {t} trajectories (users, agents), so this shard would get none; split it over at most {t} shards"
        )));
    }
    Ok(Box::new(ShardedSource::new(source, shard)))
}

/// The run's codec, checked against what the run asks of it (images,
/// reasoning knobs), and the body fields of the run's reasoning knobs in its
/// API; a spec without an endpoint takes the codec's API path, recorded as the
/// one used.
fn codec(
    spec: &mut RunSpec,
    ctx: &BuildContext,
) -> Result<(Box<dyn RequestCodec>, BodyFieldList), Failure> {
    let codec =
        registry::codec(&spec.codec.name, &spec.codec.config, ctx).map_err(plugin_failure)?;
    if let Some(i) = &spec.images {
        i.check().map_err(Failure::bad)?;
    }
    if spec.images.is_some() && !codec.supports_images() {
        return Err(Failure::bad(format!(
            "--images-per-request: the {} codec cannot send images (openai_chat, openai_responses and anthropic_messages can)",
            spec.codec.name
        )));
    }
    if spec.audio.is_some() && !codec.supports_audio() {
        return Err(Failure::bad(format!(
            "--audio-ms/--audio-files: the {} codec cannot send audio (openai_chat and openai_transcriptions can)",
            spec.codec.name
        )));
    }
    if spec.audio.is_none() && codec.requires_audio() {
        return Err(Failure::bad(format!(
            "the {} codec sends audio: give --audio-ms (synthetic clips) or --audio-files",
            spec.codec.name
        )));
    }
    let knobs = codec
        .reasoning_fields(&spec.target.reasoning)
        .map_err(|e| {
            Failure::bad(format!(
                "{}: the {} codec: {e}",
                knob_flags(&spec.target.reasoning),
                spec.codec.name
            ))
        })?;
    // What goes back of earlier reasoning: refused here, before anything is
    // sent, where the API has no place for it (the engine asks again).
    reasoning_history(spec, codec.as_ref())?;
    if spec.target.endpoint.is_empty() {
        spec.target.endpoint = codec.endpoint().to_owned();
    }
    Ok((codec, knobs))
}

/// How much of the run can be active at once, and the connections kept.
struct Sizes {
    /// Trajectories active at once.
    cap: u64,
    /// The load, with a shard's share of its caps.
    load: LoadSpec,
    /// Connections per endpoint.
    pool: u64,
}

impl Sizes {
    /// Closed loop: every trajectory active at once unless capped. Open
    /// loop: no cap unless given. The connection pool is sized for what can
    /// be active. A shard takes its share of the run's caps (checked to be at
    /// least one).
    fn of(spec: &RunSpec, info: &WorkloadInfo, shard: Shard, open: bool) -> Self {
        let planned = info.planned_trajectories;
        let cap = match (spec.admission.max_active, open) {
            (Some(n), _) => shard.share(n),
            (None, false) => planned.unwrap_or(u64::from(u32::MAX)),
            (None, true) => u64::from(u32::MAX),
        };
        let mut load = spec.load.clone();
        load.max_concurrency = load.max_concurrency.map(|n| shard.share(n));
        load.warmup_requests = load.warmup_requests.map(|n| shard.share(n));
        let pool = match (spec.load.is_open(), load.max_concurrency) {
            (_, Some(n)) => n,
            // Arrivals do not wait for replies: as many connections as are in flight.
            (true, None) => OPEN_POOL,
            (false, None) => cap.min(planned.unwrap_or(cap)),
        }
        .max(1);
        Self { cap, load, pool }
    }
}

/// The simulated replicas of a `sim://` target, started on loopback (none
/// for servers).
async fn start_sims(
    target: &Target,
    tokenizer: Option<&Arc<TokenizerHandle>>,
    own: Vec<(String, Arc<TokenizerHandle>)>,
) -> Result<Vec<Sim>, Failure> {
    let Target::Sim(cfg) = target else {
        return Ok(Vec::new());
    };
    let tok = tokenizer
        .cloned()
        .ok_or_else(|| Failure::bad("--host sim:// needs a tokenizer (--tokenizer-model)"))?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut sims = Vec::with_capacity(cfg.replicas as usize);
    for i in 0..cfg.replicas {
        sims.push(
            Sim::start_with_models(cfg.replica(i), tok.clone(), own.clone(), addr)
                .await
                .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the simulator: {e}")))?,
        );
    }
    Ok(sims)
}

/// One transport per endpoint base, in order: the codec's API and headers,
/// the spec's target settings, and `pool` connections each.
fn transports(
    spec: &RunSpec,
    codec: &dyn RequestCodec,
    bases: &[String],
    pool: u64,
    api_key: Option<String>,
) -> Result<Vec<Transport>, Failure> {
    let t = &spec.target;
    let ca_pem = t
        .ca_cert
        .as_deref()
        .map(TlsConfig::read_ca)
        .transpose()
        .map_err(|e| Failure::bad(e.0))?;
    let target = |base: &str| TargetConfig {
        url: join_url(base, &t.endpoint),
        api_key: api_key.clone(),
        api_key_header: codec.api_key_header().map(str::to_owned),
        timeout: Duration::from_secs_f64(t.request_timeout_secs),
        max_retries: t.max_retries,
        retry_delay: Duration::from_millis(t.retry_delay_ms),
        // The API's own headers, then the run's, which win.
        headers: codec
            .headers()
            .into_iter()
            .chain(t.headers.clone())
            .collect(),
        content_type: codec.content_type().to_owned(),
        pool_size: usize::try_from(pool).unwrap_or(usize::MAX),
        verbose: spec.output.verbose,
        tls: TlsConfig {
            ca_pem: ca_pem.clone(),
            insecure: t.insecure,
        },
        max_response_bytes: t
            .max_response_bytes
            .unwrap_or(batchbench_engine::transport::MAX_RESPONSE_BYTES),
        request_id_header: batchbench_engine::transport::header_name(t.ids.header()),
    };
    let transports = bases
        .iter()
        .map(|base| {
            Transport::new(target(base))
                .map_err(|e| Failure::bad(format!("--host/--endpoint: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if transports.is_empty() {
        return Err(Failure::bad("--host: no host given"));
    }
    Ok(transports)
}

/// The metrics URLs scraped: `target` is each endpoint's own `/metrics`.
fn scraped(urls: &[String], bases: &[String]) -> Vec<String> {
    urls.iter()
        .flat_map(|u| match u.as_str() {
            "target" => bases.iter().map(|b| join_url(b, "/metrics")).collect(),
            _ => vec![u.clone()],
        })
        .collect()
}

async fn run_source(engine: Engine, source: Box<dyn WorkloadSource>) -> Result<RunOutput, Failure> {
    engine.run(source).await.map_err(engine_failure)
}

/// The reasoning flags a spec's knobs stand for, for an error naming them.
/// The answer formats of a run with `--response-format` (read and checked
/// by [`response_formats`](super::check::response_formats)), each with its
/// codec's body fields: a codec whose API has no structured outputs is bad
/// input, before anything is sent.
pub(super) fn structured(
    spec: &RunSpec,
    codec: &dyn RequestCodec,
) -> Result<Option<Arc<batchbench_engine::measurement::structured::Structured>>, Failure> {
    use batchbench_engine::measurement::structured::Structured;
    let Some(formats) = super::check::response_formats(spec)? else {
        return Ok(None);
    };
    let flag = "target.response_format (--response-format)";
    let with_fields = formats
        .into_iter()
        .map(|f| {
            let fields = codec
                .response_format_fields(&f)
                .map_err(|e| Failure::bad(format!("{flag}: the {} codec: {e}", spec.codec.name)))?;
            Ok((f, fields))
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    Structured::new(with_fields)
        .map(|s| Some(Arc::new(s)))
        .map_err(|e| Failure::bad(format!("{flag}: {e}")))
}

/// What the run sends back of earlier reasoning: its choice, else its
/// codec's default; a choice the codec's API cannot carry is bad input.
pub(super) fn reasoning_history(
    spec: &RunSpec,
    codec: &dyn RequestCodec,
) -> Result<batchbench_contract::spec::ReasoningHistory, Failure> {
    codec
        .reasoning_history(spec.target.reasoning.history)
        .map_err(|e| {
            Failure::bad(format!(
                "target.reasoning.history (--reasoning-history {}): the {} codec: {e}",
                spec.target
                    .reasoning
                    .history
                    .map_or("", batchbench_contract::spec::ReasoningHistory::as_str),
                spec.codec.name
            ))
        })
}

fn knob_flags(k: &batchbench_contract::spec::ReasoningKnobs) -> String {
    let mut flags = Vec::new();
    if k.effort.is_some() {
        flags.push("target.reasoning.effort (--reasoning-effort)");
    }
    if k.budget_tokens.is_some() {
        flags.push("target.reasoning.budget_tokens (--thinking-budget)");
    }
    if k.off {
        flags.push("target.reasoning.off (--no-thinking)");
    }
    flags.join(", ")
}

/// Top-level body fields, by name.
type BodyFieldList = Vec<(String, serde_json::Value)>;

/// A run of several models: each model's own tokenizer, in the mix's order
/// (`None`: the run's), loaded once per distinct name. One that cannot be
/// loaded is bad input naming its model.
async fn model_tokenizers(spec: &RunSpec) -> Result<Vec<Option<Arc<TokenizerHandle>>>, Failure> {
    let Some(mix) = &spec.target.mix else {
        return Ok(Vec::new());
    };
    let mut loaded: Vec<(&str, Arc<TokenizerHandle>)> = Vec::new();
    let mut out = Vec::with_capacity(mix.models.len());
    for (i, m) in mix.models.iter().enumerate() {
        let Some(name) = mix.tokenizer(i) else {
            out.push(None);
            continue;
        };
        if let Some((_, t)) = loaded.iter().find(|(n, _)| *n == name) {
            out.push(Some(t.clone()));
            continue;
        }
        let t = batchbench_engine::tokens::load(name).await.map_err(|e| {
            Failure::bad(format!(
                "--model-tokenizer {}={name} (the tokenizer of model '{}'): {e}",
                m.base
                    .as_deref()
                    .filter(|_| m.tokenizer.is_none())
                    .unwrap_or(&m.name),
                m.name
            ))
        })?;
        loaded.push((name, t.clone()));
        out.push(Some(t));
    }
    Ok(out)
}

/// The simulator's tokenizer for each name a request of the mix may carry
/// in its `model` field (the models, and the bases of adapters named by
/// another field), where the model has one of its own.
fn sim_tokenizers(
    spec: &RunSpec,
    own: &[Option<Arc<TokenizerHandle>>],
) -> Vec<(String, Arc<TokenizerHandle>)> {
    let Some(mix) = &spec.target.mix else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (m, t) in mix.models.iter().zip(own) {
        let Some(t) = t else { continue };
        out.push((m.name.clone(), t.clone()));
        if let Some(b) = &m.base
            && mix.index(b).is_none()
        {
            out.push((b.clone(), t.clone()));
        }
    }
    out
}

/// `--check-models`: endpoint `endpoint` at `base` lists every name the
/// requests it may be sent carry in their `model` field (those of the models
/// the map gives it, else of every model), in its `/v1/models`; one it does
/// not is bad input naming it, before anything is sent.
async fn served(
    t: &Transport,
    base: &str,
    mix: &batchbench_contract::models::ModelMixSpec,
    endpoint: usize,
) -> Result<(), Failure> {
    let url = join_url(base, "/v1/models");
    let fail = |why: String| Failure::bad(format!("--check-models: {url}: {why}"));
    let client = t
        .side_client(Duration::from_secs(10))
        .map_err(|e| fail(e.0))?;
    let cfg = t.config();
    let mut req = client.get(&url);
    if let Some(key) = &cfg.api_key {
        req = match &cfg.api_key_header {
            Some(h) => req.header(h.as_str(), key.as_str()),
            None => req.bearer_auth(key),
        };
    }
    let resp = req.send().await.map_err(|e| fail(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status().as_u16())));
    }
    let doc: serde_json::Value = resp
        .json()
        .await
        .map_err(|e| fail(format!("not a model list: {e}")))?;
    let listed: Vec<&str> = doc["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    for name in mix.served_names_of(|m| mix.serves(endpoint, m)) {
        if !listed.contains(&name) {
            return Err(fail(format!(
                "model '{name}' of --model-mix is not listed (it lists: {})",
                if listed.is_empty() {
                    "none".to_owned()
                } else {
                    listed.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// What a dry run's requests carry besides their text: each conversation's
/// first user message's images and audio clips.
fn attachments_line(spec: &RunSpec) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(i) = &spec.images {
        parts.push(format!(
            "{} image(s) of {}x{} ({})",
            i.per_request,
            i.width,
            i.height,
            i.format.media_type()
        ));
    }
    if let Some(a) = &spec.audio {
        parts.push(match (&a.files, &a.duration_ms) {
            (Some(dir), _) => format!(
                "{} audio clip(s) picked from {}",
                a.per_request,
                dir.display()
            ),
            (None, Some(d)) => format!(
                "{} synthetic WAV clip(s) of {} ms ({} Hz, {} channel(s))",
                a.per_request,
                match d {
                    batchbench_contract::dist::LengthDist::Fixed { value, vary: 0 } =>
                        value.to_string(),
                    batchbench_contract::dist::LengthDist::Fixed { value, vary } =>
                        format!("{value} +- {vary}"),
                    d => format!("a median {:.0}", d.nominal()),
                },
                a.sample_rate,
                a.channels
            ),
            (None, None) => return None,
        });
    }
    (!parts.is_empty()).then(|| {
        format!(
            "each conversation's first user message carries {}",
            parts.join(" and ")
        )
    })
}
