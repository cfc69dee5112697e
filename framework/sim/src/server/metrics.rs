//! What the simulator serves besides the APIs: `/v1/models`, its request log
//! and counters, and a Prometheus page of vLLM's metric names.

use super::*;
pub(super) async fn models(State(st): State<Arc<AppState>>) -> Response {
    // Its LoRA adapters too, as vLLM lists them: each with its base model
    // as `parent`.
    let base = st.cfg.served_models.first();
    let data: Vec<Value> = st
        .cfg
        .served_models
        .iter()
        .map(|m| serde_json::json!({"id": m, "object": "model", "owned_by": "batchbench-sim"}))
        .chain(st.cfg.lora_adapters.iter().map(|a| {
            serde_json::json!({"id": a, "object": "model", "owned_by": "batchbench-sim", "parent": base})
        }))
        .collect();
    axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

pub(super) async fn requests(State(st): State<Arc<AppState>>) -> Response {
    axum::Json(lock(&st.log).clone()).into_response()
}

pub(super) async fn stats(State(st): State<Arc<AppState>>) -> Response {
    axum::Json(snapshot(&st)).into_response()
}

pub(super) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let s = snapshot(&st);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# HELP sim_requests_total Chat completion requests received.\n# TYPE sim_requests_total counter"
    );
    let _ = writeln!(o, "sim_requests_total {}", s.requests);
    let _ = writeln!(
        o,
        "# HELP sim_rejected_total Requests rejected as invalid.\n# TYPE sim_rejected_total counter"
    );
    let _ = writeln!(o, "sim_rejected_total {}", s.rejected);
    for (name, help, f) in [
        (
            "sim_worker_requests_total",
            "Requests served per worker.",
            (|w: &WorkerStats| w.requests) as fn(&WorkerStats) -> u64,
        ),
        (
            "sim_prompt_tokens_total",
            "Prompt tokens counted per worker.",
            |w| w.prompt_tokens,
        ),
        (
            "sim_cached_tokens_total",
            "Prefix-cache hits in tokens per worker.",
            |w| w.cached_tokens,
        ),
        (
            "sim_completion_tokens_total",
            "Output tokens generated per worker.",
            |w| w.completion_tokens,
        ),
        (
            "sim_lora_loads_total",
            "LoRA adapters loaded per worker (requests for one not resident).",
            |w| w.lora_loads,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (i, w) in s.workers.iter().enumerate() {
            let _ = writeln!(o, "{name}{{worker=\"{i}\"}} {}", f(w));
        }
    }
    vllm_metrics(&st, &s, &mut o);
    let _ = writeln!(
        o,
        "# HELP sim_faults_total Injected faults by kind.\n# TYPE sim_faults_total counter"
    );
    for (k, v) in &s.faults {
        let _ = writeln!(o, "sim_faults_total{{kind=\"{k}\"}} {v}");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], o).into_response()
}

/// The load of each worker under vLLM's metric names (labelled by `engine`,
/// as vLLM labels its data-parallel engines), so that a scraper made for vLLM
/// reads the simulator.
pub(super) fn vllm_metrics(st: &AppState, s: &SimStats, o: &mut String) {
    let model = st
        .cfg
        .served_models
        .first()
        .map_or("batchbench-sim", String::as_str);
    let kv_capacity = st.cfg.kv_capacity_tokens;
    let load = |g: &Gauges| {
        [
            g.running.load(Ordering::Relaxed) as f64,
            g.waiting.load(Ordering::Relaxed) as f64,
            if kv_capacity > 0 {
                g.kv_tokens.load(Ordering::Relaxed) as f64 / kv_capacity as f64
            } else {
                0.0
            },
            g.preemptions.load(Ordering::Relaxed) as f64,
        ]
    };
    let loads: Vec<[f64; 4]> = st.gauges.iter().map(|g| load(g)).collect();
    let served = |w: &WorkerStats| {
        [
            w.prompt_tokens as f64,
            w.cached_tokens as f64,
            w.prompt_tokens as f64,
            w.completion_tokens as f64,
        ]
    };
    let counts: Vec<[f64; 4]> = s.workers.iter().map(served).collect();
    // Name, type, help, the worker rows and the column in them.
    type Family<'a> = (&'a str, &'a str, &'a str, &'a [[f64; 4]], usize);
    let families: [Family<'_>; 8] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Requests in the batch.",
            &loads,
            0,
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting to join the batch.",
            &loads,
            1,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV cache usage (1 is full; 0 without a KV capacity).",
            &loads,
            2,
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Preemptions under KV pressure.",
            &loads,
            3,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache.",
            &counts,
            0,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache.",
            &counts,
            1,
        ),
        (
            "vllm:prompt_tokens_total",
            "counter",
            "Prompt tokens processed.",
            &counts,
            2,
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Output tokens generated.",
            &counts,
            3,
        ),
    ];
    for (name, kind, help, rows, col) in families {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (i, row) in rows.iter().enumerate() {
            let _ = writeln!(
                o,
                "{name}{{model_name=\"{model}\",engine=\"{i}\"}} {}",
                row[col]
            );
        }
    }
    // vLLM's adapter gauge: its labels carry the adapters (the value is the
    // time it was taken); here the resident ones run, none waits.
    if !st.cfg.lora_adapters.is_empty() {
        let name = "vllm:lora_requests_info";
        let _ = writeln!(
            o,
            "# HELP {name} Running stats on lora requests.\n# TYPE {name} gauge"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        for i in 0..st.loras.len() {
            let _ = writeln!(
                o,
                "{name}{{max_lora=\"{}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"\",engine=\"{i}\"}} {now}",
                st.cfg.max_loras,
                st.resident_adapters(i).join(",")
            );
        }
    }
}

pub(super) fn error(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(serde_json::json!({"error": {"message": msg, "type": "invalid_request_error", "code": status.as_u16()}})))
        .into_response()
}

pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
