//! The APIs the simulator serves, each read into one prompt model and answered
//! in its own format: chat completions, completions, Responses (with stored
//! conversation state), Anthropic Messages and SGLang's `/generate`.
//!
//! A templated API (chat, Responses, Messages) counts the template overhead,
//! a per-message overhead and every message's text, tool calls and tool
//! definitions, in the chat-completions shape, so that one conversation counts
//! the same whichever of them carries it. A plain-prompt API (completions,
//! `/generate`) counts its prompt's tokens alone.

use serde_json::{Value, json};

/// An API the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
    /// `/v1/responses`.
    Responses,
    /// `/v1/messages`.
    Messages,
    /// `/generate`.
    Generate,
    /// `/v1/embeddings`.
    Embeddings,
    /// `/v1/rerank` and `/v2/rerank` (vLLM, Jina, Cohere): a query and
    /// documents, answered with each document's relevance.
    Rerank,
    /// `/v1/score` (vLLM): a text scored against each of several.
    Score,
    /// `/v1/audio/transcriptions` and `/v1/audio/translations`: a form
    /// upload of a clip, answered with its transcript.
    Transcription,
}

impl Api {
    /// Whether the API generates text (the others answer their inputs:
    /// vectors, relevance, scores).
    pub fn generates(self) -> bool {
        !matches!(self, Self::Embeddings | Self::Rerank | Self::Score)
    }
}

/// One message of a templated prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Msg {
    /// The role; `None` continues the previous (stored) assistant message:
    /// tool calls on a reply the server keeps.
    pub role: Option<String>,
    /// The text.
    pub content: String,
    /// Tool calls: `(name, arguments)`.
    pub calls: Vec<(String, String)>,
    /// Images: `(tokens, hash of the bytes)`.
    pub images: Vec<(u64, u64)>,
    /// Audio clips: `(seconds, hash of the bytes)`; their tokens are the
    /// server's rate per second (`--audio-tokens-per-second`).
    pub audio: Vec<(f64, u64)>,
    /// An assistant message's reasoning sent back (chat `reasoning_content`
    /// or `reasoning`, Anthropic thinking blocks), counted before its text
    /// as a template that renders reasoning does.
    pub reasoning: String,
}

/// The tokens a vision model spends on a `width` x `height` image: one per
/// 28 x 28 pixels, rounded up (Qwen2-VL merges 2 x 2 patches of 14 pixels).
pub fn image_tokens(width: u32, height: u32) -> u64 {
    u64::from(width.div_ceil(28).max(1)) * u64::from(height.div_ceil(28).max(1))
}

/// An image part's tokens and hash, from a data URL or base64 data.
fn image(data: &str, what: &str) -> Result<(u64, u64), String> {
    use base64::Engine as _;
    let b64 = match data.strip_prefix("data:") {
        Some(rest) => rest
            .split_once(";base64,")
            .map(|(_, d)| d)
            .ok_or_else(|| format!("{what}: a data URL with base64 data is expected"))?,
        None => data,
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("{what}: the image is not valid base64: {e}"))?;
    let (w, h) = batchbench_engine::synthesis::images::dimensions(&bytes)
        .ok_or_else(|| format!("{what}: the image is neither a PNG nor a JPEG"))?;
    Ok((image_tokens(w, h), fnv_bytes(&bytes)))
}

/// A content's text, images and audio: a string, or an array of parts
/// (`text` / `input_text`; `image_url`, `input_image` or Anthropic `image`
/// parts; chat's `input_audio` parts).
fn content_of(v: Option<&Value>, what: &str) -> Result<Content, String> {
    let Some(Value::Array(parts)) = v else {
        return Ok((text_of(v, what)?, Vec::new(), Vec::new()));
    };
    let mut text = String::new();
    let mut images = Vec::new();
    let mut audio = Vec::new();
    for p in parts {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            text.push_str(t);
        }
        if p.get("type").and_then(Value::as_str) == Some("input_audio") {
            let data = p
                .pointer("/input_audio/data")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{what}: an input_audio part has no data"))?;
            audio.push(clip_of_base64(data, what)?);
        }
        let url = match p.get("type").and_then(Value::as_str) {
            Some("image_url") => p.pointer("/image_url/url").and_then(Value::as_str),
            Some("input_image") => p.get("image_url").and_then(Value::as_str),
            Some("image") => p.pointer("/source/data").and_then(Value::as_str),
            _ => None,
        };
        if let Some(u) = url {
            images.push(image(u, what)?);
        }
    }
    Ok((text, images, audio))
}

/// A content's text, images `(tokens, hash)` and audio `(seconds, hash)`.
type Content = (String, Vec<(u64, u64)>, Vec<(f64, u64)>);

/// A clip's `(seconds, hash of its bytes)` from base64 WAV data.
fn clip_of_base64(data: &str, what: &str) -> Result<(f64, u64), String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("{what}: the audio is not valid base64: {e}"))?;
    audio_clip(&bytes, what)
}

/// A clip's `(seconds, hash of its bytes)`, from its WAV header.
pub fn audio_clip(bytes: &[u8], what: &str) -> Result<(f64, u64), String> {
    let info = batchbench_contract::audio::wav_info(bytes)
        .map_err(|e| format!("{what}: the audio does not decode: {e}"))?;
    Ok((info.seconds(), fnv_bytes(bytes)))
}

/// A request's prompt, as the simulator counts it.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// A templated conversation: tool definitions (chat-completions shape,
    /// serialised) and messages.
    Templated {
        /// Tool definitions.
        tools: Vec<String>,
        /// Messages.
        messages: Vec<Msg>,
    },
    /// A plain prompt text.
    Text(String),
    /// Prompt token ids.
    Ids(Vec<u32>),
    /// Embedding inputs, each counted alone.
    Inputs(Vec<Prompt>),
}

/// What a request asks for, whatever its API.
#[derive(Debug, Clone)]
pub struct Request {
    /// The prompt.
    pub prompt: Prompt,
    /// Items in the request (messages, input items), for the log.
    pub items: u64,
    /// Output cap (absent: the server's default).
    pub max: Option<u32>,
    /// Output floor.
    pub min: u32,
    /// `ignore_eos`.
    pub ignore_eos: bool,
    /// Streamed.
    pub stream: bool,
    /// Usage in the stream (always, except chat and completions without
    /// `stream_options.include_usage`).
    pub usage_in_stream: bool,
    /// The model field.
    pub model: Option<String>,
    /// Responses: the stored response this one continues.
    pub previous_response_id: Option<String>,
    /// Responses: store this response for a later `previous_response_id`.
    pub store: bool,
    /// The `user` field.
    pub user: Option<String>,
    /// What the request asks of the model's reasoning.
    pub thinking: Thinking,
    /// Structured outputs: the answer is JSON (`Some(None)`: any object;
    /// `Some(Some(schema))`: an instance of the schema).
    pub structured: Option<Option<Value>>,
}

impl Request {
    /// Seconds of audio in the prompt (chat `input_audio`, a transcription's
    /// file).
    pub fn audio_seconds(&self) -> f64 {
        match &self.prompt {
            Prompt::Templated { messages, .. } => {
                messages.iter().flat_map(|m| &m.audio).map(|(s, _)| s).sum()
            }
            _ => 0.0,
        }
    }
}

/// The answer format a request asks for: chat completions'
/// `response_format`, the Responses API's `text.format`, SGLang's
/// `sampling_params.json_schema` (a string; `req` is the sampling
/// parameters for `/generate`).
fn structured(req: &Value) -> Result<Option<Option<Value>>, String> {
    if let Some(s) = req.get("json_schema").and_then(Value::as_str) {
        return serde_json::from_str::<Value>(s)
            .map(|schema| Some(Some(schema)))
            .map_err(|e| format!("sampling_params.json_schema is not JSON: {e}"));
    }
    let (f, at) = match (req.get("response_format"), req.pointer("/text/format")) {
        (Some(f), _) => (f, "response_format"),
        (None, Some(f)) => (f, "text.format"),
        (None, None) => return Ok(None),
    };
    match f.get("type").and_then(Value::as_str) {
        None | Some("text") => Ok(None),
        Some("json_object") => Ok(Some(None)),
        Some("json_schema") => f
            .pointer("/json_schema/schema")
            .or_else(|| f.get("schema"))
            .map(|s| Some(Some(s.clone())))
            .ok_or_else(|| format!("{at}.json_schema.schema: Field required")),
        Some(other) => Err(format!(
            "{at}.type: Input should be 'text', 'json_object' or 'json_schema', got '{other}'"
        )),
    }
}

/// What a request asks of the model's reasoning, in any API's words:
/// `reasoning_effort` (chat), `reasoning.effort` (Responses),
/// `chat_template_kwargs.enable_thinking` (the chat template's switch of
/// vLLM and SGLang), Anthropic's `thinking` (`budget_tokens`, or `disabled`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Thinking {
    /// Thinking turned off: no reasoning at all.
    pub off: bool,
    /// How much the effort scales the reasoning (1: as configured).
    pub scale: Option<f64>,
    /// The most reasoning tokens (a thinking budget).
    pub budget: Option<u32>,
}

impl Thinking {
    /// The reasoning tokens of a reply whose model would reason `base`.
    pub fn tokens(&self, base: u32) -> u32 {
        if self.off {
            return 0;
        }
        let scaled = match self.scale {
            Some(k) => (f64::from(base) * k).round() as u32,
            None => base,
        };
        self.budget.map_or(scaled, |b| scaled.min(b))
    }
}

/// The effort levels, as scales of the configured reasoning.
fn effort_scale(effort: &str) -> Result<Option<f64>, String> {
    Ok(match effort {
        "none" => Some(0.0),
        "minimal" => Some(0.25),
        "low" => Some(0.5),
        "medium" => Some(1.0),
        "high" => Some(2.0),
        other => {
            return Err(format!(
                "reasoning effort '{other}' is not one of none, minimal, low, medium, high"
            ));
        }
    })
}

/// The reasoning knobs of a request.
fn thinking(req: &Value) -> Result<Thinking, String> {
    let mut t = Thinking::default();
    let effort = req
        .get("reasoning_effort")
        .or_else(|| req.pointer("/reasoning/effort"))
        .and_then(Value::as_str);
    if let Some(e) = effort {
        t.scale = effort_scale(e)?;
        t.off = t.scale == Some(0.0);
    }
    if req.pointer("/chat_template_kwargs/enable_thinking") == Some(&Value::Bool(false)) {
        t.off = true;
    }
    if let Some(th) = req.get("thinking") {
        match th.get("type").and_then(Value::as_str) {
            Some("disabled") => t.off = true,
            Some("enabled") => {
                let budget = th
                    .get("budget_tokens")
                    .and_then(Value::as_u64)
                    .ok_or("thinking.enabled.budget_tokens: Field required")?;
                if budget < 1024 {
                    return Err(
                        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                            .into(),
                    );
                }
                if let Some(max) = req.get("max_tokens").and_then(Value::as_u64)
                    && budget >= max
                {
                    return Err(format!(
                        "`max_tokens` must be greater than `thinking.budget_tokens` ({budget})"
                    ));
                }
                t.budget = Some(u32::try_from(budget).unwrap_or(u32::MAX));
            }
            _ => return Err("thinking.type: Input should be 'enabled' or 'disabled'".into()),
        }
    }
    Ok(t)
}

fn as_u32(v: &Value) -> Option<u32> {
    v.as_u64().map(|x| x.min(u64::from(u32::MAX)) as u32)
}

fn text_of(v: Option<&Value>, what: &str) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("")),
        Some(Value::Null) | None => Ok(String::new()),
        Some(_) => Err(format!("{what} must be a string or an array of parts")),
    }
}

/// A tool definition in the chat-completions shape: `{"type": "function",
/// "function": {...}}`, from a Responses (`{"type": "function", "name", ...}`)
/// or Anthropic (`{"name", "input_schema", ...}`) definition.
fn chat_tool(t: &Value, api: Api) -> String {
    let Some(o) = t.as_object() else {
        return t.to_string();
    };
    let mut f = o.clone();
    match api {
        Api::Responses if !f.contains_key("function") => {
            f.remove("type");
        }
        Api::Messages => {
            if let Some(s) = f.remove("input_schema") {
                f.insert("parameters".into(), s);
            }
        }
        _ => return t.to_string(),
    }
    json!({"type": "function", "function": Value::Object(f)}).to_string()
}

fn tools(req: &Value, api: Api) -> Vec<String> {
    req.get("tools")
        .and_then(Value::as_array)
        .map(|ts| ts.iter().map(|t| chat_tool(t, api)).collect())
        .unwrap_or_default()
}

fn common(req: &Value, prompt: Prompt, items: u64) -> Result<Request, String> {
    let get = |k: &str| req.get(k).and_then(as_u32);
    let max = get("max_new_tokens")
        .or_else(|| get("max_completion_tokens"))
        .or_else(|| get("max_output_tokens"))
        .or_else(|| get("max_tokens"));
    let min = get("min_new_tokens")
        .or_else(|| get("min_tokens"))
        .unwrap_or(0);
    Ok(Request {
        prompt,
        items,
        max,
        min,
        ignore_eos: req
            .get("ignore_eos")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        stream: req.get("stream").and_then(Value::as_bool).unwrap_or(false),
        usage_in_stream: true,
        model: req.get("model").and_then(Value::as_str).map(str::to_owned),
        previous_response_id: None,
        store: false,
        user: req.get("user").and_then(Value::as_str).map(str::to_owned),
        thinking: thinking(req)?,
        structured: structured(req)?,
    })
}

/// Reads a request of `api`; an error is the 400 message.
pub fn parse(api: Api, req: &Value, headers: &axum::http::HeaderMap) -> Result<Request, String> {
    match api {
        Api::Chat => chat(req),
        Api::Completions => completions(req),
        Api::Responses => responses(req),
        Api::Messages => messages(req, headers),
        Api::Generate => generate(req),
        Api::Embeddings => embeddings(req),
        Api::Rerank => pairs(req, "query", "documents"),
        Api::Score => pairs(req, "text_1", "text_2"),
        Api::Transcription => Err("a transcription is a multipart form upload".into()),
    }
}

fn chat(req: &Value) -> Result<Request, String> {
    let messages = req
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("field 'messages' must be an array")?;
    if messages.is_empty() {
        return Err("field 'messages' must not be empty".into());
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages[{i}].role is missing"))?;
        let mut msg = Msg {
            role: Some(role.to_owned()),
            content: String::new(),
            calls: Vec::new(),
            images: Vec::new(),
            audio: Vec::new(),
            reasoning: String::new(),
        };
        (msg.content, msg.images, msg.audio) =
            content_of(m.get("content"), &format!("messages[{i}].content"))?;
        if role == "assistant" {
            if let Some(r) = m
                .get("reasoning_content")
                .or_else(|| m.get("reasoning"))
                .and_then(Value::as_str)
            {
                msg.reasoning = r.to_owned();
            }
        }
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let f = c
                    .get("function")
                    .ok_or_else(|| format!("messages[{i}].tool_calls entry has no function"))?;
                let s = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                msg.calls.push((s("name"), s("arguments")));
            }
        }
        out.push(msg);
    }
    let mut r = common(
        req,
        Prompt::Templated {
            tools: tools(req, Api::Chat),
            messages: out,
        },
        messages.len() as u64,
    )?;
    r.usage_in_stream = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(r)
}

fn completions(req: &Value) -> Result<Request, String> {
    let prompt = match req.get("prompt") {
        Some(Value::String(s)) => Prompt::Text(s.clone()),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            Prompt::Text(a[0].as_str().unwrap_or("").to_owned())
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_u64) => {
            Prompt::Ids(a.iter().filter_map(as_u32).collect())
        }
        _ => return Err("field 'prompt' must be a string or an array of token ids".into()),
    };
    let mut r = common(req, prompt, 1)?;
    r.usage_in_stream = req
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(r)
}

fn generate(req: &Value) -> Result<Request, String> {
    let prompt = match (req.get("text"), req.get("input_ids")) {
        (Some(Value::String(s)), None) => Prompt::Text(s.clone()),
        (None, Some(Value::Array(a))) if a.iter().all(Value::is_u64) => {
            Prompt::Ids(a.iter().filter_map(as_u32).collect())
        }
        _ => {
            return Err(
                "give one of 'text' (a string) and 'input_ids' (an array of token ids)".into(),
            );
        }
    };
    let empty = json!({});
    let sp = req.get("sampling_params").unwrap_or(&empty);
    let mut r = common(sp, prompt, 1)?;
    r.stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    r.model = None;
    r.user = None;
    Ok(r)
}

fn embeddings(req: &Value) -> Result<Request, String> {
    let one = |v: &Value| match v {
        Value::String(s) => Some(Prompt::Text(s.clone())),
        Value::Array(a) if a.iter().all(Value::is_u64) => {
            Some(Prompt::Ids(a.iter().filter_map(as_u32).collect()))
        }
        _ => None,
    };
    let bad = || "field 'input' must be a string, an array of strings or of token-id arrays";
    let inputs: Vec<Prompt> = match req.get("input") {
        Some(Value::Array(a)) if a.is_empty() => {
            return Err("field 'input' must not be empty".into());
        }
        Some(Value::Array(a)) if !a.iter().all(Value::is_u64) => {
            a.iter().map(one).collect::<Option<_>>().ok_or_else(bad)?
        }
        Some(v) => vec![one(v).ok_or_else(bad)?],
        None => return Err(bad().into()),
    };
    if inputs.is_empty() {
        return Err("field 'input' must not be empty".into());
    }
    let n = inputs.len() as u64;
    let mut r = common(req, Prompt::Inputs(inputs), n)?;
    r.stream = false;
    Ok(r)
}

/// A query (`first`) and the texts it is ranked or scored against (`rest`):
/// the query counted once, then each text; the inputs are the texts.
fn pairs(req: &Value, first: &str, rest: &str) -> Result<Request, String> {
    let query = req
        .get(first)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("field '{first}' must be a string"))?;
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let docs: Vec<String> = match req.get(rest) {
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(format!("field '{rest}' must not be empty"));
        }
        Some(Value::Array(a)) => a
            .iter()
            .map(text)
            .collect::<Option<_>>()
            .ok_or_else(|| format!("field '{rest}' must be an array of strings"))?,
        Some(v) => vec![
            text(v)
                .ok_or_else(|| format!("field '{rest}' must be a string or an array of strings"))?,
        ],
        None => return Err(format!("field '{rest}' is required")),
    };
    let n = docs.len() as u64;
    let inputs = std::iter::once(Prompt::Text(query.to_owned()))
        .chain(docs.into_iter().map(Prompt::Text))
        .collect();
    let mut r = common(req, Prompt::Inputs(inputs), n)?;
    r.stream = false;
    Ok(r)
}

fn responses(req: &Value) -> Result<Request, String> {
    let previous = req
        .get("previous_response_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut messages: Vec<Msg> = Vec::new();
    let items: Vec<Value> = match req.get("input") {
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(a)) => a.clone(),
        _ => return Err("field 'input' must be a string or an array of items".into()),
    };
    if items.is_empty() {
        return Err("field 'input' must not be empty".into());
    }
    if let Some(s) = req.get("instructions").and_then(Value::as_str) {
        messages.push(Msg {
            role: Some("system".into()),
            content: s.to_owned(),
            calls: Vec::new(),
            images: Vec::new(),
            audio: Vec::new(),
            reasoning: String::new(),
        });
    }
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match kind {
            "message" => {
                let role = item
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("input[{i}].role is missing"))?;
                let (content, images, audio) =
                    content_of(item.get("content"), &format!("input[{i}].content"))?;
                messages.push(Msg {
                    role: Some(role.to_owned()),
                    content,
                    calls: Vec::new(),
                    images,
                    audio,
                    reasoning: String::new(),
                });
            }
            "function_call" => {
                let call = (s("name"), s("arguments"));
                match messages.last_mut() {
                    // An assistant message, or the stored reply a call continues.
                    Some(m) if m.role.is_none() || m.role.as_deref() == Some("assistant") => {
                        m.calls.push(call);
                    }
                    // A call on the stored reply continues it.
                    None if previous.is_some() => messages.push(Msg {
                        role: None,
                        content: String::new(),
                        calls: vec![call],
                        images: Vec::new(),
                        audio: Vec::new(),
                        reasoning: String::new(),
                    }),
                    _ => messages.push(Msg {
                        role: Some("assistant".into()),
                        content: String::new(),
                        calls: vec![call],
                        images: Vec::new(),
                        audio: Vec::new(),
                        reasoning: String::new(),
                    }),
                }
            }
            "function_call_output" => messages.push(Msg {
                role: Some("tool".into()),
                content: s("output"),
                calls: Vec::new(),
                images: Vec::new(),
                audio: Vec::new(),
                reasoning: String::new(),
            }),
            other => return Err(format!("input[{i}]: unsupported item type '{other}'")),
        }
    }
    let mut r = common(
        req,
        Prompt::Templated {
            tools: tools(req, Api::Responses),
            messages,
        },
        items.len() as u64,
    )?;
    r.previous_response_id = previous;
    r.store = req.get("store").and_then(Value::as_bool).unwrap_or(true);
    Ok(r)
}

fn messages(req: &Value, headers: &axum::http::HeaderMap) -> Result<Request, String> {
    if headers.get("anthropic-version").is_none() {
        return Err("anthropic-version: header is required".into());
    }
    if req.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Err("max_tokens: Field required".into());
    }
    let list = req
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: Field required")?;
    if list.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    let mut out = Vec::new();
    match req.get("system") {
        None | Some(Value::Null) => {}
        s => out.push(Msg {
            role: Some("system".into()),
            content: text_of(s, "system")?,
            calls: Vec::new(),
            images: Vec::new(),
            audio: Vec::new(),
            reasoning: String::new(),
        }),
    }
    // The tool_use ids of the previous assistant message, to be answered.
    let mut open: Vec<String> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages.{i}.role: Field required"))?;
        let blocks: Vec<Value> = match m.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(a)) => a.clone(),
            _ => return Err(format!("messages.{i}.content: Field required")),
        };
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        let mut answered = Vec::new();
        let mut images = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            match b.get("type").and_then(Value::as_str) {
                Some("text") => text.push_str(&s("text")),
                Some("thinking") if role == "assistant" => {
                    let think = s("thinking");
                    if b.get("signature").and_then(Value::as_str) != Some(&signature(&think)) {
                        return Err(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        ));
                    }
                    reasoning.push_str(&think);
                }
                // Encrypted thinking: sent back as it came, nothing of it is read.
                Some("redacted_thinking") if role == "assistant" => {}
                Some("tool_use") if role == "assistant" => {
                    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    calls.push((s("id"), s("name"), input.to_string()));
                }
                Some("tool_result") if role == "user" => {
                    let id = s("tool_use_id");
                    if !open.contains(&id) {
                        return Err(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                    answered.push(id);
                    results.push(text_of(b.get("content"), "tool_result.content")?);
                }
                Some("image") => images.push(image(
                    b.pointer("/source/data")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                    &format!("messages.{i}.content.{j}"),
                )?),
                other => {
                    return Err(format!(
                        "messages.{i}.content.{j}: unsupported block type {other:?} in a {role} message"
                    ));
                }
            }
        }
        let missing: Vec<&String> = open.iter().filter(|id| !answered.contains(id)).collect();
        if !missing.is_empty() {
            return Err(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        open = calls.iter().map(|(id, _, _)| id.clone()).collect();
        for r in results {
            out.push(Msg {
                role: Some("tool".into()),
                content: r,
                calls: Vec::new(),
                images: Vec::new(),
                audio: Vec::new(),
                reasoning: String::new(),
            });
        }
        if role == "assistant" || !text.is_empty() || !images.is_empty() || out.is_empty() {
            out.push(Msg {
                role: Some(role.to_owned()),
                content: text,
                calls: calls.into_iter().map(|(_, n, a)| (n, a)).collect(),
                images,
                audio: Vec::new(),
                reasoning,
            });
        }
    }
    if !open.is_empty() {
        return Err(format!(
            "the last message has `tool_use` ids without `tool_result` blocks: {}",
            open.join(", ")
        ));
    }
    common(
        req,
        Prompt::Templated {
            tools: tools(req, Api::Messages),
            messages: out,
        },
        list.len() as u64,
    )
}

/// What a reply says, for the formatters.
#[derive(Debug, Clone)]
pub struct ReplyFacts<'a> {
    /// The response id.
    pub id: &'a str,
    /// The model.
    pub model: &'a str,
    /// Prompt tokens counted.
    pub prompt: u64,
    /// Of which cached.
    pub cached: u64,
    /// Output tokens, reasoning included.
    pub completion: u32,
    /// Of which reasoning, made before the answer.
    pub reasoning: u32,
    /// Whether the usage reports the reasoning tokens apart.
    pub reasoning_usage: bool,
    /// The output reached its cap.
    pub length: bool,
    /// Items of the request (embedding inputs).
    pub items: u64,
    /// Seconds of audio in the request.
    pub audio_seconds: f64,
}

/// The tag that opens reasoning in the text of completions and `/generate`
/// (a model whose server runs no reasoning parser). Not a token of the count.
pub const THINK_OPEN: &str = "<think>";
/// The tag that closes it, before the answer. Not a token of the count.
pub const THINK_CLOSE: &str = "</think>";

impl ReplyFacts<'_> {
    /// The reasoning count where the usage reports it.
    fn reported_reasoning(&self) -> Option<u32> {
        (self.reasoning > 0 && self.reasoning_usage).then_some(self.reasoning)
    }

    /// The id of a Responses reasoning item.
    fn reasoning_item(&self) -> String {
        format!("rs_{}", self.id)
    }
}

/// The whole text of completions and `/generate`: reasoning in its tags,
/// then the answer.
pub fn tagged(think: &str, text: &str) -> String {
    if think.is_empty() {
        text.to_owned()
    } else {
        format!("{THINK_OPEN}{think}{THINK_CLOSE}{text}")
    }
}

/// The server's own timings of a reply, reported where the API has a place
/// for them (with `--stamps`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timings {
    /// From the request's arrival to its first token, in milliseconds.
    pub prompt_ms: f64,
    /// From the first token to the last, in milliseconds.
    pub predicted_ms: f64,
}

impl Timings {
    /// `v` with the timings where the API reports them: llama.cpp's `timings`
    /// object on chat and completions, SGLang's `meta_info.e2e_latency`.
    pub fn add_to(t: Option<Self>, api: Api, mut v: Value) -> Value {
        let Some(t) = t else { return v };
        match api {
            Api::Chat | Api::Completions => {
                v["timings"] = json!({"prompt_ms": t.prompt_ms, "predicted_ms": t.predicted_ms});
            }
            Api::Generate => {
                if let Some(m) = v.get_mut("meta_info") {
                    m["e2e_latency"] = json!((t.prompt_ms + t.predicted_ms) / 1000.0);
                }
            }
            _ => {}
        }
        v
    }
}

fn openai_usage(f: &ReplyFacts<'_>) -> Value {
    let mut u = json!({
        "prompt_tokens": f.prompt,
        "completion_tokens": f.completion,
        "total_tokens": f.prompt + u64::from(f.completion),
        "prompt_tokens_details": {"cached_tokens": f.cached},
    });
    if let Some(r) = f.reported_reasoning() {
        u["completion_tokens_details"] = json!({"reasoning_tokens": r});
    }
    u
}

fn responses_usage(f: &ReplyFacts<'_>) -> Value {
    let mut u = json!({
        "input_tokens": f.prompt,
        "input_tokens_details": {"cached_tokens": f.cached},
        "output_tokens": f.completion,
        "total_tokens": f.prompt + u64::from(f.completion),
    });
    if f.reasoning_usage {
        u["output_tokens_details"] = json!({"reasoning_tokens": f.reasoning});
    }
    u
}

fn anthropic_usage(f: &ReplyFacts<'_>, output: u32) -> Value {
    json!({
        "input_tokens": f.prompt - f.cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": f.cached,
        "output_tokens": output,
    })
}

fn response_object(f: &ReplyFacts<'_>, think: &str, text: Option<&str>) -> Value {
    let (status, details) = match (text, f.length) {
        (None, _) => ("in_progress", Value::Null),
        (Some(_), true) => ("incomplete", json!({"reason": "max_output_tokens"})),
        (Some(_), false) => ("completed", Value::Null),
    };
    let output = match text {
        None => json!([]),
        Some(t) => {
            let mut items = Vec::new();
            if f.reasoning > 0 {
                items.push(reasoning_item(f, think));
            }
            items.push(json!({
                "type": "message", "id": format!("msg_{}", f.id), "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": t, "annotations": []}],
            }));
            Value::Array(items)
        }
    };
    let mut r = json!({
        "id": f.id, "object": "response", "model": f.model, "status": status,
        "incomplete_details": details, "output": output,
    });
    if text.is_some() {
        r["usage"] = responses_usage(f);
    }
    r
}

/// A Responses reasoning item of `think`.
fn reasoning_item(f: &ReplyFacts<'_>, think: &str) -> Value {
    json!({"type": "reasoning", "id": f.reasoning_item(), "summary": [],
        "content": [{"type": "reasoning_text", "text": think}]})
}

/// The signature of an Anthropic thinking block: opaque, a function of its
/// thinking alone, so that a block sent back changed (or unsigned) is told
/// apart and refused, as the API does.
pub fn signature(think: &str) -> String {
    format!("sig{:016x}", fnv_str(think) ^ 0x5167_7a11_0c0f_fee5)
}

fn finish(f: &ReplyFacts<'_>) -> &'static str {
    if f.length { "length" } else { "stop" }
}

/// The JSON body of a whole reply of reasoning `think` and answer `text`,
/// with the server's timings where the API reports them.
pub fn body(
    api: Api,
    f: &ReplyFacts<'_>,
    think: &str,
    text: &str,
    timings: Option<Timings>,
) -> Value {
    Timings::add_to(timings, api, plain_body(api, f, think, text))
}

fn plain_body(api: Api, f: &ReplyFacts<'_>, think: &str, text: &str) -> Value {
    match api {
        Api::Transcription => transcription_body(f, text),
        Api::Chat => {
            let mut message = json!({"role": "assistant", "content": text});
            if f.reasoning > 0 {
                message["reasoning_content"] = json!(think);
            }
            json!({
                "id": f.id, "object": "chat.completion", "model": f.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish(f)}],
                "usage": openai_usage(f),
            })
        }
        Api::Completions => json!({
            "id": f.id, "object": "text_completion", "model": f.model,
            "choices": [{"index": 0, "text": tagged(think, text), "finish_reason": finish(f)}],
            "usage": openai_usage(f),
        }),
        Api::Responses => response_object(f, think, Some(text)),
        Api::Messages => {
            let mut content = Vec::new();
            if f.reasoning > 0 {
                content.push(
                    json!({"type": "thinking", "thinking": think, "signature": signature(think)}),
                );
            }
            content.push(json!({"type": "text", "text": text}));
            json!({
                "id": f.id, "type": "message", "role": "assistant", "model": f.model,
                "content": content,
                "stop_reason": if f.length { "max_tokens" } else { "end_turn" }, "stop_sequence": null,
                "usage": anthropic_usage(f, f.completion),
            })
        }
        Api::Generate => {
            json!({"text": tagged(think, text), "meta_info": generate_meta(f, f.completion, true)})
        }
        Api::Embeddings => {
            // Unit vectors of a few dimensions, a function of the response id.
            let data: Vec<Value> = (0..f.items)
                .map(|i| {
                    let x = (fnv_str(f.id) ^ i) % 1000;
                    let v = x as f64 / 1000.0;
                    json!({"object": "embedding", "index": i,
                        "embedding": [v, (1.0 - v * v).max(0.0).sqrt(), 0.0, 0.0]})
                })
                .collect();
            json!({"object": "list", "model": f.model, "data": data,
                "usage": {"prompt_tokens": f.prompt, "total_tokens": f.prompt}})
        }
        Api::Rerank => {
            // Relevance a function of the response id and the document,
            // most relevant first.
            let mut results: Vec<(u64, f64)> = (0..f.items)
                .map(|i| {
                    (
                        i,
                        ((fnv_str(f.id) ^ i.wrapping_mul(0x9E37)) % 1000) as f64 / 1000.0,
                    )
                })
                .collect();
            results.sort_by(|a, b| b.1.total_cmp(&a.1));
            let results: Vec<Value> = results
                .into_iter()
                .map(|(i, s)| json!({"index": i, "relevance_score": s}))
                .collect();
            json!({"id": f.id, "model": f.model, "results": results,
                "usage": {"prompt_tokens": f.prompt, "total_tokens": f.prompt}})
        }
        Api::Score => {
            let data: Vec<Value> = (0..f.items)
                .map(|i| {
                    let s = ((fnv_str(f.id) ^ i.wrapping_mul(0x9E37)) % 1000) as f64 / 1000.0;
                    json!({"index": i, "object": "score", "score": s})
                })
                .collect();
            json!({"id": f.id, "object": "list", "model": f.model, "data": data,
                "usage": {"prompt_tokens": f.prompt, "total_tokens": f.prompt}})
        }
    }
}

fn generate_meta(f: &ReplyFacts<'_>, sent: u32, last: bool) -> Value {
    let reason = match (last, f.length) {
        (false, _) => Value::Null,
        (true, true) => json!({"type": "length", "length": f.completion}),
        (true, false) => json!({"type": "stop", "matched": null}),
    };
    let mut m = json!({
        "id": f.id, "prompt_tokens": f.prompt, "completion_tokens": sent,
        "cached_tokens": f.cached, "finish_reason": reason,
    });
    if let (true, Some(r)) = (last, f.reported_reasoning()) {
        m["reasoning_tokens"] = json!(r);
    }
    m
}

/// An SSE event: `data: ...` with an `event:` line where the API names them.
fn event(api: Api, v: &Value) -> String {
    match api {
        Api::Responses | Api::Messages => {
            let name = v.get("type").and_then(Value::as_str).unwrap_or("");
            format!("event: {name}\ndata: {v}\n\n")
        }
        _ => format!("data: {v}\n\n"),
    }
}

/// The events of a stream before its first token.
pub fn stream_start(api: Api, f: &ReplyFacts<'_>) -> Vec<String> {
    match api {
        Api::Transcription => Vec::new(),
        Api::Chat => vec![event(
            api,
            &json!({"id": f.id, "object": "chat.completion.chunk", "model": f.model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
        )],
        Api::Responses => {
            let first = if f.reasoning > 0 {
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "reasoning", "id": f.reasoning_item(), "summary": [], "content": []}})
            } else {
                message_item_added(f)
            };
            vec![
                event(
                    api,
                    &json!({"type": "response.created", "response": response_object(f, "", None)}),
                ),
                event(api, &first),
            ]
        }
        Api::Messages => vec![
            event(
                api,
                &json!({"type": "message_start", "message": {"id": f.id, "type": "message", "role": "assistant",
                    "model": f.model, "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": anthropic_usage(f, 1)}}),
            ),
            event(
                api,
                &if f.reasoning > 0 {
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})
                } else {
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
                },
            ),
        ],
        Api::Completions | Api::Generate | Api::Embeddings | Api::Rerank | Api::Score => Vec::new(),
    }
}

/// The Responses event that adds the answer's message item.
fn message_item_added(f: &ReplyFacts<'_>) -> Value {
    json!({"type": "response.output_item.added", "output_index": answer_index(f),
        "item": {"type": "message", "id": format!("msg_{}", f.id), "role": "assistant", "status": "in_progress", "content": []}})
}

/// Where the answer is among the output's items or content blocks: after
/// the reasoning, when there is one.
fn answer_index(f: &ReplyFacts<'_>) -> u32 {
    u32::from(f.reasoning > 0)
}

/// The event carrying reasoning `text` (`so_far`: the whole output up to and
/// including it, tags and all; `sent` its tokens). In completions and
/// `/generate` the reasoning is text: the caller tags it.
pub fn stream_reasoning(
    api: Api,
    f: &ReplyFacts<'_>,
    text: &str,
    so_far: &str,
    sent: u32,
) -> String {
    let v = match api {
        Api::Chat => json!({"id": f.id, "object": "chat.completion.chunk", "model": f.model,
            "choices": [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": null}]}),
        Api::Responses => {
            json!({"type": "response.reasoning_text.delta", "item_id": f.reasoning_item(),
            "output_index": 0, "content_index": 0, "delta": text})
        }
        Api::Messages => json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": text}}),
        Api::Completions
        | Api::Generate
        | Api::Embeddings
        | Api::Rerank
        | Api::Score
        | Api::Transcription => {
            return stream_delta(api, f, text, so_far, sent);
        }
    };
    event(api, &v)
}

/// The events between the reasoning (all of `think`) and the answer: the
/// reasoning's item or block closed (Anthropic's with its signature), the
/// answer's opened.
pub fn stream_answer_start(api: Api, f: &ReplyFacts<'_>, think: &str) -> Vec<String> {
    match api {
        Api::Responses => vec![
            event(
                api,
                &json!({"type": "response.reasoning_text.done", "item_id": f.reasoning_item(),
                    "output_index": 0, "content_index": 0, "text": think}),
            ),
            event(
                api,
                &json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning_item(f, think)}),
            ),
            event(api, &message_item_added(f)),
        ],
        Api::Messages => vec![
            event(
                api,
                &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "signature_delta", "signature": signature(think)}}),
            ),
            event(api, &json!({"type": "content_block_stop", "index": 0})),
            event(
                api,
                &json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            ),
        ],
        Api::Chat
        | Api::Completions
        | Api::Generate
        | Api::Embeddings
        | Api::Rerank
        | Api::Score
        | Api::Transcription => Vec::new(),
    }
}

/// The event carrying `text`; `so_far` is the whole output up to and
/// including it, `sent` its tokens.
pub fn stream_delta(api: Api, f: &ReplyFacts<'_>, text: &str, so_far: &str, sent: u32) -> String {
    let v = match api {
        Api::Chat => json!({"id": f.id, "object": "chat.completion.chunk", "model": f.model,
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
        Api::Completions => json!({"id": f.id, "object": "text_completion", "model": f.model,
            "choices": [{"index": 0, "text": text, "finish_reason": null}]}),
        Api::Responses => {
            json!({"type": "response.output_text.delta", "item_id": format!("msg_{}", f.id),
            "output_index": answer_index(f), "content_index": 0, "delta": text})
        }
        Api::Messages => json!({"type": "content_block_delta", "index": answer_index(f),
            "delta": {"type": "text_delta", "text": text}}),
        Api::Transcription => transcription_chunk(f, text),
        // SGLang streams the whole output so far.
        Api::Generate | Api::Embeddings | Api::Rerank | Api::Score => {
            json!({"text": so_far, "meta_info": generate_meta(f, sent, false), "index": 0})
        }
    };
    event(api, &v)
}

/// The events that end a stream of reasoning `think` and answer `text` (for
/// `/generate`, the whole tagged output); the server's timings go on the
/// event that finishes the output, where the API reports them.
pub fn stream_end(
    api: Api,
    f: &ReplyFacts<'_>,
    think: &str,
    text: &str,
    usage: bool,
    timings: Option<Timings>,
) -> Vec<String> {
    let timed = |v: Value| Timings::add_to(timings, api, v);
    match api {
        Api::Transcription => transcription_end(f, usage),
        Api::Chat | Api::Completions => {
            let object = if api == Api::Chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let last = if api == Api::Chat {
                json!({"index": 0, "delta": {}, "finish_reason": finish(f)})
            } else {
                json!({"index": 0, "text": "", "finish_reason": finish(f)})
            };
            let mut out = vec![event(
                api,
                &timed(json!({"id": f.id, "object": object, "model": f.model, "choices": [last]})),
            )];
            if usage {
                out.push(event(
                    api,
                    &json!({"id": f.id, "object": object, "model": f.model, "choices": [], "usage": openai_usage(f)}),
                ));
            }
            out.push("data: [DONE]\n\n".into());
            out
        }
        Api::Responses => {
            let r = response_object(f, think, Some(text));
            let kind = if f.length {
                "response.incomplete"
            } else {
                "response.completed"
            };
            vec![
                event(
                    api,
                    &json!({"type": "response.output_text.done", "item_id": format!("msg_{}", f.id),
                        "output_index": answer_index(f), "content_index": 0, "text": text}),
                ),
                event(api, &json!({"type": kind, "response": r})),
            ]
        }
        Api::Messages => vec![
            event(
                api,
                &json!({"type": "content_block_stop", "index": answer_index(f)}),
            ),
            event(
                api,
                &json!({"type": "message_delta",
                    "delta": {"stop_reason": if f.length { "max_tokens" } else { "end_turn" }, "stop_sequence": null},
                    "usage": {"output_tokens": f.completion}}),
            ),
            event(api, &json!({"type": "message_stop"})),
        ],
        Api::Generate | Api::Embeddings | Api::Rerank | Api::Score => vec![
            event(
                api,
                &timed(
                    json!({"text": text, "meta_info": generate_meta(f, f.completion, true), "index": 0}),
                ),
            ),
            "data: [DONE]\n\n".into(),
        ],
    }
}

/// A transcription's non-streamed reply: vLLM's, the text and the audio's duration.
fn transcription_body(f: &ReplyFacts<'_>, text: &str) -> Value {
    json!({"text": text, "usage": {"type": "duration", "seconds": f.audio_seconds.ceil() as u64}})
}

/// A streamed chunk of a transcript.
fn transcription_chunk(f: &ReplyFacts<'_>, text: &str) -> Value {
    json!({"id": f.id, "object": "transcription.chunk", "model": f.model,
        "choices": [{"delta": {"content": text}}]})
}

/// A transcription stream's end: the finish chunk, the usage where asked for, `[DONE]`.
fn transcription_end(f: &ReplyFacts<'_>, usage: bool) -> Vec<String> {
    let mut out = vec![format!(
        "data: {}\n\n",
        json!({"id": f.id, "object": "transcription.chunk", "model": f.model,
            "choices": [{"delta": {}, "finish_reason": if f.length { "length" } else { "stop" }}]})
    )];
    if usage {
        out.push(format!(
            "data: {}\n\n",
            json!({"id": f.id, "object": "transcription.chunk", "model": f.model, "choices": [],
                "usage": {"prompt_tokens": f.prompt, "completion_tokens": f.completion,
                    "total_tokens": f.prompt + u64::from(f.completion)}})
        ));
    }
    out.push("data: [DONE]\n\n".into());
    out
}

/// The response id of a request: each API's own prefix.
pub fn response_id(api: Api, seq: u64) -> String {
    match api {
        Api::Chat => format!("chatcmpl-sim-{seq}"),
        Api::Completions => format!("cmpl-sim-{seq}"),
        Api::Responses => format!("resp_sim{seq}"),
        Api::Messages => format!("msg_sim{seq}"),
        Api::Generate => format!("gen-sim-{seq}"),
        Api::Embeddings => format!("embd-sim-{seq}"),
        Api::Rerank => format!("rerank-sim-{seq}"),
        Api::Score => format!("score-sim-{seq}"),
        Api::Transcription => format!("trsc-sim-{seq}"),
    }
}

/// FNV-1a of a string.
pub(crate) fn fnv_str(s: &str) -> u64 {
    fnv(s.as_bytes())
}

/// FNV-1a of bytes.
pub fn fnv_bytes(b: &[u8]) -> u64 {
    fnv(b)
}

pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anthropic(body: &Value) -> Result<Request, String> {
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            "anthropic-version",
            "2023-06-01".parse().unwrap_or_else(|_| unreachable!()),
        );
        parse(Api::Messages, body, &h)
    }

    #[test]
    fn anthropic_tool_use_must_be_answered_by_the_next_user_turn() {
        let call = json!({"role": "assistant", "content": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "t1", "name": "env", "input": {}}]});
        let answer = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "42"}]});
        let ok = json!({"model": "m", "max_tokens": 4, "system": "sys", "messages": [
            {"role": "user", "content": "go"}, call, answer]});
        let r = anthropic(&ok).unwrap_or_else(|e| panic!("{e}"));
        let Prompt::Templated { messages, .. } = r.prompt else {
            panic!("templated")
        };
        let roles: Vec<_> = messages
            .iter()
            .map(|m| m.role.clone().unwrap_or_default())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!(messages[2].calls, [("env".to_owned(), "{}".to_owned())]);

        let unanswered = json!({"model": "m", "max_tokens": 4, "messages": [
            {"role": "user", "content": "go"}, call, {"role": "user", "content": "and?"}]});
        let e = anthropic(&unanswered).err().unwrap_or_default();
        assert!(
            e.contains("without `tool_result`") && e.contains("t1"),
            "{e}"
        );
        let stray = json!({"model": "m", "max_tokens": 4, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": ""}]}]});
        assert!(anthropic(&stray).is_err());
        let no_max = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]});
        assert!(
            anthropic(&no_max)
                .err()
                .unwrap_or_default()
                .contains("max_tokens")
        );
        assert!(
            parse(Api::Messages, &ok, &axum::http::HeaderMap::new()).is_err(),
            "version header"
        );
    }

    #[test]
    fn responses_items_read_as_chat_messages() {
        let body = json!({"model": "m", "input": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "r"}],
            "tools": [{"type": "function", "name": "f", "parameters": {}}], "max_output_tokens": 3});
        let r = parse(Api::Responses, &body, &axum::http::HeaderMap::new())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.max, r.items, r.store), (Some(3), 4, true));
        let Prompt::Templated { messages, tools } = r.prompt else {
            panic!("templated")
        };
        assert_eq!(messages.len(), 3, "the call rides on the assistant message");
        assert_eq!(messages[1].calls.len(), 1);
        assert_eq!(
            tools,
            [
                json!({"type": "function", "function": {"name": "f", "parameters": {}}})
                    .to_string()
            ]
        );
        // Continuing a stored response: a leading call continues its reply.
        let cont = json!({"model": "m", "previous_response_id": "resp_1", "input": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "d", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "r"}]});
        let r = parse(Api::Responses, &cont, &axum::http::HeaderMap::new())
            .unwrap_or_else(|e| panic!("{e}"));
        let Prompt::Templated { messages, .. } = r.prompt else {
            panic!("templated")
        };
        assert_eq!(messages[0].role, None);
        assert_eq!(
            messages[0].calls.len(),
            2,
            "both calls continue the stored reply"
        );
        assert_eq!(messages.len(), 2);
    }
}
