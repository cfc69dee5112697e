//! The proven word table on disk, keyed by the tokenizer (see [`key`]), so that a
//! run whose client needs no full tokenizer starts without parsing it.
//!
//! An entry is `<cache>/word-tables/<key>.json`. It names its format, the key it
//! was made for and a digest of its own words and ids; an entry that does not
//! parse, names another key or fails its own digest is rebuilt and replaced.
//! Writing is atomic (a temporary file renamed into place), and a cache that cannot
//! be written costs the next run the proof again, nothing else.
//!
//! The key of a GGUF model file is read from its tokenizer metadata alone, never
//! from its tensors: a start does not cost a hash of gigabytes.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Bump when the table's meaning changes (word rules, proof rules).
const FORMAT: u32 = 1;

/// A proven table as stored.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    format: u32,
    /// The [`key`] of the tokenizer it was made for (entries written before GGUF
    /// files had keys of their own called it the tokenizer file's SHA-256, which
    /// a `tokenizer.json`'s key still is).
    #[serde(alias = "tokenizer_sha256")]
    key: String,
    /// The words, each with its leading space.
    pub(crate) words: Vec<String>,
    /// Each word's token id.
    pub(crate) ids: Vec<u32>,
    /// SHA-256 of the words and ids, to detect a damaged entry.
    check: String,
}

fn check_of(words: &[String], ids: &[u32]) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.to_le_bytes());
    for (w, id) in words.iter().zip(ids) {
        h.update((w.len() as u32).to_le_bytes());
        h.update(w.as_bytes());
        h.update(id.to_le_bytes());
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// SHA-256 of a file, hex, read in blocks.
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    batchbench_contract::manifest::digest(path)
}

/// The cache key of a tokenizer file. A GGUF model file: `gguf-` and the digest
/// of the tokenizer in its metadata ([`crate::tokens::gguf::tokenizer_digest`]), which
/// reads the header and metadata only, so its cost does not grow with the
/// model's tensors. Anything else (a `tokenizer.json`, megabytes): the file's
/// SHA-256 ([`file_digest`]). Either changes whenever the tokenizer read from
/// the file does.
pub fn key(path: &Path) -> Result<String, String> {
    if crate::tokens::gguf::is_gguf(path) {
        crate::tokens::gguf::tokenizer_digest(path).map(|d| format!("gguf-{d}"))
    } else {
        file_digest(path).map_err(|e| e.to_string())
    }
}

/// What [`remembered_key`] keeps of a file: its [`key`], under its size and
/// modification time.
#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    path: PathBuf,
    len: u64,
    mtime_ns: u128,
    key: String,
}

/// The file's size and modification time, in nanoseconds.
fn stamp(path: &Path) -> Option<(u64, u128)> {
    let m = std::fs::metadata(path).ok()?;
    let t = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some((m.len(), t.as_nanos()))
}

/// The [`key`] of `path`, remembered under the cache directory `dir` with the
/// file's size and modification time: a start whose tokenizer file has not
/// changed reads its key instead of hashing megabytes again (a SHA-256 of
/// Qwen's 11 MB `tokenizer.json` is most of the instructions a warm start
/// runs). A file whose size or time moved is hashed again, and a memo that
/// cannot be read or written costs that hash, nothing else.
pub fn remembered_key(dir: &Path, path: &Path) -> Result<String, String> {
    let Some((len, mtime_ns)) = stamp(path) else {
        return key(path);
    };
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let memo = dir.join("word-tables").join("keys").join(format!(
        "{:016x}.json",
        batchbench_contract::rng::hash_str(&abs.to_string_lossy())
    ));
    if let Some(r) = std::fs::read(&memo)
        .ok()
        .and_then(|b| serde_json::from_slice::<Remembered>(&b).ok())
        && r.path == abs
        && r.len == len
        && r.mtime_ns == mtime_ns
    {
        return Ok(r.key);
    }
    let k = key(path)?;
    let r = Remembered {
        path: abs,
        len,
        mtime_ns,
        key: k.clone(),
    };
    if let (Some(parent), Ok(bytes)) = (memo.parent(), serde_json::to_vec(&r)) {
        let tmp = memo.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::create_dir_all(parent)
            .and_then(|()| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &memo));
    }
    Ok(k)
}

/// The cache directory: `BATCHBENCH_CACHE`, else `XDG_CACHE_HOME/batchbench`, else
/// `~/.cache/batchbench`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("BATCHBENCH_CACHE") {
        return PathBuf::from(d);
    }
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"))
        .join("batchbench")
}

/// Where the entry for a tokenizer [`key`] lives under the cache directory `dir`.
pub fn entry_path(dir: &Path, key: &str) -> PathBuf {
    dir.join("word-tables").join(format!("{key}.json"))
}

/// The valid entry for `key`, if there is one.
pub(crate) fn read(dir: &Path, key: &str) -> Option<Entry> {
    let bytes = std::fs::read(entry_path(dir, key)).ok()?;
    let e: Entry = serde_json::from_slice(&bytes).ok()?;
    let valid = e.format == FORMAT
        && e.key == key
        && e.words.len() == e.ids.len()
        && e.check == check_of(&e.words, &e.ids);
    valid.then_some(e)
}

/// Stores a proven table; failures are ignored (see the module docs).
pub(super) fn write(dir: &Path, key: &str, table: &super::WordTable) {
    let words: Vec<String> = (0..table.len()).map(|i| table.word(i).to_owned()).collect();
    let entry = Entry {
        format: FORMAT,
        key: key.to_owned(),
        check: check_of(&words, &table.ids),
        words,
        ids: table.ids.clone(),
    };
    let path = entry_path(dir, key);
    let Some(dir) = path.parent() else { return };
    let Ok(json) = serde_json::to_vec(&entry) else {
        return;
    };
    let tmp = dir.join(format!(".{key}.{}.part", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok()
        && std::fs::write(&tmp, json).is_ok()
        && std::fs::rename(&tmp, &path).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&tmp);
    }
}
