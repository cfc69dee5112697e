//! Where a tokenizer spec points: a local `tokenizer.json`, a directory
//! holding one, or a Hugging Face hub id, read from the standard hub cache and
//! downloaded into it unless `HF_HUB_OFFLINE` is set.

use super::TokenError;
use std::path::{Path, PathBuf};

/// Where a tokenizer spec points locally: a file, a directory holding
/// `tokenizer.json`, or a hub id already in the cache.
pub fn resolve_local(spec: &str) -> Result<PathBuf, TokenError> {
    let err = |reason: String| TokenError::Load {
        spec: spec.to_owned(),
        reason,
    };
    let p = Path::new(spec);
    if p.is_file() {
        return Ok(p.to_owned());
    }
    if p.is_dir() {
        let f = p.join("tokenizer.json");
        return if f.is_file() {
            Ok(f)
        } else {
            Err(err(format!(
                "directory {} holds no tokenizer.json",
                p.display()
            )))
        };
    }
    if spec.ends_with(".json")
        || spec.ends_with(".gguf")
        || spec.starts_with('.')
        || spec.starts_with('/')
        || p.exists()
    {
        return Err(err("no such file or directory".to_owned()));
    }
    if let Some(f) = hub_cached(spec) {
        return Ok(f);
    }
    Err(err(format!(
        "not a local file or directory, and not in the Hugging Face cache ({}); {}",
        hub_cache_dir().display(),
        if hub_offline() {
            "HF_HUB_OFFLINE is set, so it was not downloaded"
        } else {
            "it can be downloaded with network access to the hub"
        }
    )))
}

/// Resolves a spec to a local `tokenizer.json`, downloading a hub id into the
/// standard cache when it is not there and offline mode is not set.
pub async fn resolve(spec: &str) -> Result<PathBuf, TokenError> {
    match resolve_local(spec) {
        Ok(p) => Ok(p),
        Err(e) if !looks_like_hub_id(spec) || hub_offline() => Err(e),
        Err(_) => download(spec).await,
    }
}

fn looks_like_hub_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    (1..=2).contains(&parts.len())
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

fn hub_offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
        .unwrap_or(false)
}

/// The hub cache directory: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `~/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HF_HUB_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("HF_HOME") {
        return PathBuf::from(d).join("hub");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("huggingface").join("hub")
}

fn repo_dir(id: &str) -> PathBuf {
    hub_cache_dir().join(format!("models--{}", id.replace('/', "--")))
}

fn hub_cached(id: &str) -> Option<PathBuf> {
    if !looks_like_hub_id(id) {
        return None;
    }
    let dir = repo_dir(id);
    let rev = std::fs::read_to_string(dir.join("refs").join("main")).ok()?;
    let f = dir
        .join("snapshots")
        .join(rev.trim())
        .join("tokenizer.json");
    f.is_file().then_some(f)
}

async fn download(id: &str) -> Result<PathBuf, TokenError> {
    let err = |reason: String| TokenError::Load {
        spec: id.to_owned(),
        reason,
    };
    let endpoint =
        std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".to_owned());
    let url = format!(
        "{}/{id}/resolve/main/tokenizer.json",
        endpoint.trim_end_matches('/')
    );
    crate::transport::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .map_err(|e| err(e.to_string()))?;
    let mut req = client.get(&url);
    if let Ok(token) = std::env::var("HF_TOKEN") {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.map_err(|e| {
        err(format!("download failed ({e}); pass a local tokenizer.json with --tokenizer-model, or set HF_HUB_OFFLINE=1 to use the cache only"))
    })?;
    if !resp.status().is_success() {
        return Err(err(format!(
            "the hub answered HTTP {} for {url}",
            resp.status()
        )));
    }
    let commit = resp
        .headers()
        .get("x-repo-commit")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("main")
        .to_owned();
    let bytes = resp.bytes().await.map_err(|e| err(e.to_string()))?;
    let dir = repo_dir(id);
    let snap = dir.join("snapshots").join(&commit);
    let io = |e: std::io::Error| err(format!("cannot write the hub cache: {e}"));
    std::fs::create_dir_all(&snap).map_err(io)?;
    std::fs::create_dir_all(dir.join("refs")).map_err(io)?;
    let file = snap.join("tokenizer.json");
    let tmp = snap.join("tokenizer.json.part");
    std::fs::write(&tmp, &bytes).map_err(io)?;
    std::fs::rename(&tmp, &file).map_err(io)?;
    std::fs::write(dir.join("refs").join("main"), &commit).map_err(io)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_recognised() {
        assert!(looks_like_hub_id("Qwen/Qwen3-8B"));
        assert!(looks_like_hub_id("gpt2"));
        assert!(!looks_like_hub_id("a/b/c"));
        assert!(!looks_like_hub_id("./x"));
        assert!(!looks_like_hub_id("has space/x"));
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let e = resolve_local("/nonexistent/tokenizer.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/tokenizer.json") && e.contains("no such file"),
            "{e}"
        );
    }
}
