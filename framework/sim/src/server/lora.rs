//! Several models on one server: each model's own tokenizer for its prompts,
//! and LoRA adapters, at most `max-loras` resident on a worker at once, the
//! least recently used evicted when another is needed, each load costing
//! `lora-load-ms` before the request's first token (as vLLM's LRU adapter
//! cache does).

use super::*;

/// The server's state, counting with the tokenizer of one request's model.
pub(super) struct Counter<'a> {
    st: &'a AppState,
    pub(super) tok: &'a TokenizerHandle,
    salt: u64,
}

impl<'a> Counter<'a> {
    /// The counter of a request for `model` (`None`, or a model without a
    /// tokenizer of its own: the server's).
    pub(super) fn of(st: &'a AppState, model: Option<&str>) -> Self {
        match model.and_then(|m| st.model_toks.get(m)) {
            Some((tok, salt)) => Self {
                st,
                tok,
                salt: *salt,
            },
            None => Self {
                st,
                tok: &st.tok,
                salt: 0,
            },
        }
    }

    /// `text`'s ids by the model's tokenizer.
    pub(super) fn ids(&self, text: &str) -> Result<Arc<[u32]>, String> {
        self.st.ids_by(self.tok, self.salt, text)
    }
}

impl std::ops::Deref for Counter<'_> {
    type Target = AppState;
    fn deref(&self) -> &AppState {
        self.st
    }
}

/// The adapter a request asks for, by index in `lora-adapters`: SGLang's
/// `lora_path`, llama.cpp's `lora` list (the entry of a positive scale, by
/// id), else a `model` that names an adapter (vLLM). An adapter the server
/// does not hold is refused (the 400's message).
pub(super) fn adapter(cfg: &SimConfig, req: &Value) -> Result<Option<usize>, String> {
    let names = &cfg.lora_adapters;
    if let Some(p) = req.get("lora_path").and_then(Value::as_str) {
        return names.iter().position(|n| n == p).map(Some).ok_or_else(|| {
            format!(
                "lora_path '{p}' is not a loaded adapter ({})",
                names.join(", ")
            )
        });
    }
    if let Some(list) = req.get("lora").and_then(Value::as_array) {
        let mut chosen = None;
        for (i, e) in list.iter().enumerate() {
            let id = e.get("id").and_then(Value::as_u64);
            let scale = e.get("scale").and_then(Value::as_f64);
            let (Some(id), Some(scale)) = (id, scale) else {
                return Err(format!("lora[{i}]: needs an integer id and a scale"));
            };
            if id as usize >= names.len() {
                return Err(format!(
                    "lora[{i}].id {id}: the server holds {} adapters",
                    names.len()
                ));
            }
            if scale > 0.0 {
                if chosen.is_some() {
                    return Err("lora: the simulator applies one adapter per request".into());
                }
                chosen = Some(id as usize);
            }
        }
        return Ok(chosen);
    }
    Ok(req
        .get("model")
        .and_then(Value::as_str)
        .and_then(|m| names.iter().position(|n| n == m)))
}

impl AppState {
    /// Makes adapter `a` resident on `worker` for a request; returns whether
    /// it had to be loaded.
    pub(super) fn take_adapter(&self, worker: usize, a: usize) -> bool {
        lock(&self.loras[worker]).take(a)
    }

    /// With `strict_models`, vLLM's 404 for a `model` that is neither served
    /// nor a LoRA adapter.
    pub(super) fn unknown_model(&self, model: Option<&str>) -> Option<Response> {
        let m = model.filter(|_| self.cfg.strict_models)?;
        let known = self.cfg.served_models.iter().any(|s| s == m)
            || self.cfg.lora_adapters.iter().any(|s| s == m);
        (!known).then(|| {
            let body = serde_json::json!({"error": {
                "message": format!("The model `{m}` does not exist."),
                "type": "NotFoundError",
                "param": "model",
                "code": 404,
            }});
            (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
        })
    }

    /// The tokenizer of `model` (its own, else the server's) and the salt of
    /// its ids-cache entries.
    pub(super) fn model_tok(&self, model: Option<&str>) -> (Arc<TokenizerHandle>, u64) {
        match model.and_then(|m| self.model_toks.get(m)) {
            Some((tok, salt)) => (tok.clone(), *salt),
            None => (self.tok.clone(), 0),
        }
    }

    /// The latency factor of a request for `model` (`model_slowdown`).
    pub(super) fn slowdown(&self, model: Option<&str>) -> f64 {
        model
            .and_then(|m| self.model_factors.iter().find(|(n, _)| n == m))
            .map_or(1.0, |(_, k)| *k)
    }

    /// The adapters resident on `worker`, by name.
    pub(super) fn resident_adapters(&self, worker: usize) -> Vec<&str> {
        lock(&self.loras[worker])
            .resident()
            .iter()
            .map(|&a| self.cfg.lora_adapters[a].as_str())
            .collect()
    }
}
