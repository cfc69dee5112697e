//! The Target flags: where requests go, the API, the model and tokenizer, and
//! how requests are sent.

use super::set_codec_option;
use super::{Given, json_config, non_negative, positive, retries};
use crate::exit::Failure;
use batchbench_contract::spec::{
    ClientThreads, Hosts, ImageFormat, ImageSpec, PluginSpec, ReasoningEffort, ReasoningHistory,
    RunSpec, defaults,
};

/// Target and protocol flags, shared by `batchbench` and `batchbench-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// Base URL of the server, or sim:// for the built-in simulator. Given
    /// more than once: a fleet, each request sent to the endpoint a routing
    /// policy picks (--router round_robin, the default, random,
    /// least_outstanding, session_affinity, prefix_affinity).
    #[arg(long, default_value = defaults::HOST, help_heading = "Target")]
    pub host: Vec<String>,
    /// Request path, or a full URL [default: the codec's path: /v1/chat/completions
    /// for openai_chat, /v1/completions, /v1/responses, /v1/messages, /generate,
    /// /v1/embeddings for the others].
    #[arg(long, default_value = defaults::ENDPOINT, hide_default_value = true, help_heading = "Target")]
    pub endpoint: String,
    /// The request's model field; also the tokenizer unless --tokenizer-model is given.
    #[arg(long, default_value = defaults::MODEL, help_heading = "Target")]
    pub model: String,
    /// Tokenizer: a Hugging Face model id, a tokenizer.json, a directory holding one, or
    /// a .gguf model file (its embedded byte-level BPE tokenizer).
    #[arg(long, help_heading = "Target")]
    pub tokenizer_model: Option<String>,
    /// Several models in one run: NAME=WEIGHT or ADAPTER@BASE=WEIGHT (a LoRA
    /// adapter of BASE), comma separated, for example
    /// 'base=0.5,sql-lora@base=0.3,chat-lora@base=0.2'. Each conversation
    /// goes to one model, picked by --model-selection; the summary gives
    /// each model's figures.
    #[arg(long, value_name = "MIX", help_heading = "Models")]
    pub model_mix: Option<String>,
    /// How each conversation's model is picked: random (by weight, seeded),
    /// round_robin (by weight, in turn) or session (every request of an
    /// agent to one model) [default: random].
    #[arg(long, value_name = "POLICY", value_parser = parse_selection, help_heading = "Models")]
    pub model_selection: Option<batchbench_contract::models::ModelSelection>,
    /// Where an adapter's name goes: model (the request's model, as vLLM
    /// serves adapters), lora_path (SGLang; model is the base), lora_id
    /// (llama.cpp's per-request lora list; ids are the adapters' order in
    /// the mix) [default: model].
    #[arg(long, value_name = "FIELD", value_parser = parse_adapter_field, help_heading = "Models")]
    pub adapter_field: Option<batchbench_contract::models::AdapterField>,
    /// A model's own tokenizer, NAME=TOKENIZER (repeatable); a model without
    /// one takes its base's, else the run's (--tokenizer-model).
    #[arg(long, value_name = "NAME=TOKENIZER", help_heading = "Models")]
    pub model_tokenizer: Vec<String>,
    /// Before anything is sent, check that each endpoint's /v1/models lists
    /// every model name the mix's requests carry (exit 2 naming the one
    /// missing).
    #[arg(long, help_heading = "Models")]
    pub check_models: bool,
    /// Against a fleet: the models one endpoint serves, I=NAME,NAME (I the
    /// endpoint's index in the order of the hosts, from 0; repeatable). A
    /// request goes to an endpoint that serves its model, the routing policy
    /// picking among them; an endpoint not named serves every model.
    #[arg(long, value_name = "I=NAME,NAME", help_heading = "Models")]
    pub endpoint_models: Vec<String>,
    /// Bearer token; else read from the variable named by --api-key-env.
    #[arg(long, help_heading = "Target")]
    pub api_key: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long, default_value = defaults::API_KEY_ENV, help_heading = "Target")]
    pub api_key_env: String,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = defaults::REQUEST_TIMEOUT_SECS as u64, value_parser = positive, help_heading = "Target")]
    pub request_timeout_secs: u64,
    /// Retries after the first attempt (5xx, 408, 429, timeouts, broken connections).
    #[arg(long, default_value_t = defaults::MAX_RETRIES, value_parser = retries, help_heading = "Target")]
    pub max_retries: u32,
    /// Base delay of the exponential retry backoff, in milliseconds.
    #[arg(long, default_value_t = defaults::RETRY_DELAY_MS, value_parser = non_negative, help_heading = "Target")]
    pub retry_delay_ms: u64,
    /// Threads of the client's async runtime, or `auto`: one thread per 10,000
    /// arrivals a second at the run's highest rate, up to the cores present (one
    /// for a closed loop). One costs the least CPU per request; raise it when
    /// the run's verdict says the client is CPU-bound.
    #[arg(long, value_name = "N|auto", default_value_t = ClientThreads::Fixed(defaults::CLIENT_THREADS), value_parser = ClientThreads::parse, help_heading = "Target")]
    pub client_threads: ClientThreads,
    /// Trust the CA certificates of this PEM file too (a private CA); server
    /// certificates are always verified unless --insecure.
    #[arg(long, value_name = "FILE", help_heading = "Target")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Accept any TLS certificate, unverified (self-signed test servers only);
    /// the summary says so.
    #[arg(long, help_heading = "Target")]
    pub insecure: bool,
    /// The most bytes one response may hold; a larger one fails as `decode`
    /// [default: 67108864, 64 MiB].
    #[arg(long, value_name = "BYTES", value_parser = positive, help_heading = "Target")]
    pub max_response_bytes: Option<u64>,
    /// The server's KV-cache block size in tokens, for the prefix-cache
    /// estimates of the report [default: 16].
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..=1_048_576), help_heading = "Target")]
    pub cache_block_tokens: Option<u32>,
    /// The header that carries a request's id: read from every response as
    /// the server's id of the request (recorded per request), and sent with
    /// --send-request-ids [default: X-Request-Id].
    #[arg(long, value_name = "NAME", help_heading = "Target")]
    pub request_id_header: Option<String>,
    /// Send this client's own id of every request in the request-id header,
    /// drawn from the seed (a rerun sends the same ids); recorded per request.
    #[arg(long, help_heading = "Target")]
    pub send_request_ids: bool,
    /// Send a W3C traceparent (sampled) with every request, its trace id
    /// recorded per request, so a server that traces joins it to its spans.
    #[arg(long, help_heading = "Target")]
    pub trace_context: bool,

    /// The request codec: how bodies are written and responses read (see
    /// `batchbench plugins`).
    #[arg(long, value_name = "NAME", default_value = defaults::CODEC, help_heading = "Protocol")]
    pub codec: String,
    /// The codec's config, a JSON object (openai_chat: {"sglang": bool, "ignore_eos": bool};
    /// `batchbench plugins` lists each codec's).
    #[arg(long, value_name = "JSON", help_heading = "Protocol")]
    pub codec_config: Option<String>,
    /// Send min_new_tokens/max_new_tokens (SGLang) instead of min_tokens/max_tokens
    /// (openai_chat, openai_completions).
    #[arg(long, help_heading = "Protocol")]
    pub sglang: bool,
    /// Send "ignore_eos": true so outputs run to their length (every built-in codec
    /// that generates).
    #[arg(long, help_heading = "Protocol")]
    pub ignore_eos: bool,
    /// Stream responses (SSE); adds TTFT, inter-token latency and TPOT to the report.
    #[arg(long, help_heading = "Protocol")]
    pub stream: bool,
    /// A reasoning model's effort: none, minimal, low, medium or high
    /// (chat `reasoning_effort`, Responses `reasoning.effort`).
    #[arg(long, value_name = "LEVEL", value_parser = parse_effort, help_heading = "Reasoning")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The most tokens a reasoning model may think (Anthropic
    /// `thinking.budget_tokens`, at least 1024).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Reasoning")]
    pub thinking_budget: Option<u32>,
    /// Turn a reasoning model's thinking off (the chat template's
    /// `enable_thinking: false`, Anthropic `thinking.type: disabled`).
    #[arg(long, help_heading = "Reasoning")]
    pub no_thinking: bool,
    /// What an agent loop or replay sends back of earlier reasoning: keep
    /// (with the answer, as generated) or drop (the answer alone). Default:
    /// what the API expects (openai_chat and anthropic_messages keep, the
    /// others drop). The prefix-cache estimate follows the choice.
    #[arg(long, value_name = "CHOICE", value_parser = parse_history, help_heading = "Reasoning")]
    pub reasoning_history: Option<ReasoningHistory>,
    /// Structured outputs: json_object (any JSON object), or
    /// json_schema:FILE[,FILE...] (JSON valid against a JSON Schema; several
    /// rotate over the requests), in the API's own field (chat
    /// `response_format`, Responses `text.format`). Every answer is parsed
    /// and validated: the summary gives the valid share. --output-tokens is
    /// then the cap alone (no min_tokens: the answer ends where its JSON
    /// does), and --ignore-eos is refused.
    #[arg(long, value_name = "FORMAT", value_parser = parse_response_format, help_heading = "Protocol")]
    pub response_format: Option<batchbench_contract::spec::ResponseFormatSpec>,
    /// Synthetic images on each conversation's first user message (vision models;
    /// openai_chat, openai_responses, anthropic_messages).
    #[arg(long, value_name = "N", help_heading = "Images")]
    pub images_per_request: Option<u32>,
    /// Size of each image, WIDTHxHEIGHT.
    #[arg(
        long,
        value_name = "WxH",
        default_value = "512x512",
        help_heading = "Images"
    )]
    pub image_size: String,
    /// Encoding of each image.
    #[arg(long, value_name = "FORMAT", default_value = "png", value_parser = ["png", "jpeg"], help_heading = "Images")]
    pub image_format: String,
    /// Audio clips on each conversation's first user message.
    #[command(flatten)]
    pub audio: super::AudioArgs,
}

impl TargetArgs {
    /// Sets the target and codec fields these flags name.
    pub fn apply(&self, spec: &mut RunSpec, g: &Given) -> Result<(), Failure> {
        let t = &mut spec.target;
        if g.has("host") {
            t.host = Hosts::new(self.host.clone())
                .ok_or_else(|| Failure::bad("--host: no host given"))?;
        }
        if g.has("endpoint") {
            t.endpoint.clone_from(&self.endpoint);
        }
        if g.has("model") {
            t.model.clone_from(&self.model);
        }
        if self.tokenizer_model.is_some() {
            t.tokenizer_model.clone_from(&self.tokenizer_model);
        }
        if g.has("api_key_env") {
            t.api_key_env.clone_from(&self.api_key_env);
        }
        if g.has("request_timeout_secs") {
            t.request_timeout_secs = self.request_timeout_secs as f64;
        }
        if g.has("max_retries") {
            t.max_retries = self.max_retries;
        }
        if g.has("retry_delay_ms") {
            t.retry_delay_ms = self.retry_delay_ms;
        }
        if g.has("client_threads") {
            t.client_threads = self.client_threads;
        }
        if self.stream {
            t.stream = true;
        }
        if self.ca_cert.is_some() {
            t.ca_cert.clone_from(&self.ca_cert);
        }
        if self.insecure {
            t.insecure = true;
        }
        if self.max_response_bytes.is_some() {
            t.max_response_bytes = self.max_response_bytes;
        }
        if self.cache_block_tokens.is_some() {
            t.cache_block_tokens = self.cache_block_tokens;
        }
        if self.request_id_header.is_some() {
            t.ids.header.clone_from(&self.request_id_header);
        }
        if self.send_request_ids {
            t.ids.send = true;
        }
        if self.trace_context {
            t.ids.trace_context = true;
        }
        if g.has("codec") && spec.codec.name != self.codec {
            spec.codec = PluginSpec::new(self.codec.clone(), json_config("--codec-config", None)?);
        }
        if self.codec_config.is_some() {
            spec.codec.config = json_config("--codec-config", self.codec_config.as_deref())?;
        }
        if let Some(n) = self.images_per_request {
            let (width, height) = ImageSpec::parse_size(&self.image_size).map_err(Failure::bad)?;
            let images = ImageSpec {
                per_request: n,
                width,
                height,
                format: if self.image_format == "jpeg" {
                    ImageFormat::Jpeg
                } else {
                    ImageFormat::Png
                },
            };
            images.check().map_err(Failure::bad)?;
            spec.images = Some(images);
        } else if g.explicit("image_size") || g.explicit("image_format") {
            return Err(Failure::bad(
                "--image-size and --image-format shape the images of --images-per-request: give it too",
            ));
        }
        self.audio.apply(spec, g)?;
        let r = &mut spec.target.reasoning;
        if g.has("reasoning_effort") {
            r.effort = self.reasoning_effort;
        }
        if g.has("thinking_budget") {
            r.budget_tokens = self.thinking_budget;
        }
        if g.has("no_thinking") {
            r.off = self.no_thinking;
        }
        if g.has("reasoning_history") {
            r.history = self.reasoning_history;
        }
        if g.has("response_format") {
            spec.target.response_format = self.response_format.clone();
        }
        self.apply_mix(spec, g)?;
        // The flags set the codec's own fields of those names (every built-in
        // generating codec has `ignore_eos`; the OpenAI ones `sglang`); a codec without
        // them refuses the field, naming it.
        for (on, field) in [(self.sglang, "sglang"), (self.ignore_eos, "ignore_eos")] {
            if on {
                set_codec_option(spec, field)
                    .map_err(|e| Failure::bad(format!("--{}: {e}", field.replace('_', "-"))))?;
            }
        }
        Ok(())
    }
}

impl TargetArgs {
    /// The model mix flags.
    fn apply_mix(&self, spec: &mut RunSpec, g: &Given) -> Result<(), Failure> {
        use batchbench_contract::models::ModelMixSpec;
        if let Some(given) = &self.model_mix {
            let models = &batchbench_contract::models::parse_mix(given)
                .map_err(|e| Failure::bad(format!("--model-mix: {e}")))?;
            let mix = spec.target.mix.get_or_insert_with(ModelMixSpec::default);
            mix.models.clone_from(models);
            // The run's own model (its label, and the tokenizer's default):
            // the mix's first base model unless --model names one.
            if !g.explicit("model")
                && let Some(m) = models.first()
            {
                spec.target.model = m.base.clone().unwrap_or_else(|| m.name.clone());
            }
        }
        let knobs = [
            ("--model-selection", self.model_selection.is_some()),
            ("--adapter-field", self.adapter_field.is_some()),
            ("--model-tokenizer", !self.model_tokenizer.is_empty()),
            ("--check-models", self.check_models),
            ("--endpoint-models", !self.endpoint_models.is_empty()),
        ];
        let Some(mix) = spec.target.mix.as_mut() else {
            if let Some((flag, _)) = knobs.iter().find(|(_, on)| *on) {
                return Err(Failure::bad(format!(
                    "{flag} shapes a model mix: give --model-mix too"
                )));
            }
            return Ok(());
        };
        if let Some(s) = self.model_selection {
            mix.selection = s;
        }
        if let Some(f) = self.adapter_field {
            mix.adapter_field = f;
        }
        if self.check_models {
            mix.check_served = true;
        }
        for given in &self.endpoint_models {
            mix.endpoints.push(
                batchbench_contract::models::parse_endpoint_models(given)
                    .map_err(|e| Failure::bad(format!("--endpoint-models: {e}")))?,
            );
        }
        for pair in &self.model_tokenizer {
            let (name, tok) = pair.split_once('=').ok_or_else(|| {
                Failure::bad(format!("--model-tokenizer: '{pair}' is not NAME=TOKENIZER"))
            })?;
            let i = mix.index(name.trim()).ok_or_else(|| {
                Failure::bad(format!(
                    "--model-tokenizer: '{}' is not a model of --model-mix",
                    name.trim()
                ))
            })?;
            mix.models[i].tokenizer = Some(tok.trim().to_owned());
        }
        mix.check()
            .map_err(|e| Failure::bad(format!("--model-mix: {e}")))
    }
}

fn parse_selection(s: &str) -> Result<batchbench_contract::models::ModelSelection, String> {
    s.parse()
}

fn parse_adapter_field(s: &str) -> Result<batchbench_contract::models::AdapterField, String> {
    s.parse()
}

/// `--reasoning-effort`'s value.
fn parse_effort(s: &str) -> Result<ReasoningEffort, String> {
    s.parse()
}

/// `--response-format`'s value.
fn parse_response_format(s: &str) -> Result<batchbench_contract::spec::ResponseFormatSpec, String> {
    s.parse()
}

fn parse_history(s: &str) -> Result<ReasoningHistory, String> {
    s.parse()
}
