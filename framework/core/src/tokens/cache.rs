//! The proven word table on disk, keyed by the tokenizer file's SHA-256, so that a
//! run whose client needs no full tokenizer starts without parsing it.
//!
//! An entry is `<cache>/word-tables/<sha256>.json`. It names its format, the
//! digest it was made for and a digest of its own words and ids; an entry that does
//! not parse, names another file or fails its own digest is rebuilt and replaced.
//! Writing is atomic (a temporary file renamed into place), and a cache that cannot
//! be written costs the next run the proof again, nothing else.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Bump when the table's meaning changes (word rules, proof rules).
const FORMAT: u32 = 1;

/// A proven table as stored.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    format: u32,
    tokenizer_sha256: String,
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

/// SHA-256 of a file, hex, read in blocks (a GGUF model file can be gigabytes).
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    crate::manifest::digest(path)
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

/// Where the entry for a tokenizer digest lives under the cache directory `dir`.
pub fn entry_path(dir: &Path, digest: &str) -> PathBuf {
    dir.join("word-tables").join(format!("{digest}.json"))
}

/// The valid entry for `digest`, if there is one.
pub(crate) fn read(dir: &Path, digest: &str) -> Option<Entry> {
    let bytes = std::fs::read(entry_path(dir, digest)).ok()?;
    let e: Entry = serde_json::from_slice(&bytes).ok()?;
    let valid = e.format == FORMAT
        && e.tokenizer_sha256 == digest
        && e.words.len() == e.ids.len()
        && e.check == check_of(&e.words, &e.ids);
    valid.then_some(e)
}

/// Stores a proven table; failures are ignored (see the module docs).
pub(super) fn write(dir: &Path, digest: &str, table: &super::WordTable) {
    let words: Vec<String> = (0..table.len()).map(|i| table.word(i).to_owned()).collect();
    let entry = Entry {
        format: FORMAT,
        tokenizer_sha256: digest.to_owned(),
        check: check_of(&words, &table.ids),
        words,
        ids: table.ids.clone(),
    };
    let path = entry_path(dir, digest);
    let Some(dir) = path.parent() else { return };
    let Ok(json) = serde_json::to_vec(&entry) else {
        return;
    };
    let tmp = dir.join(format!(".{digest}.{}.part", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok()
        && std::fs::write(&tmp, json).is_ok()
        && std::fs::rename(&tmp, &path).is_ok();
    if !ok {
        let _ = std::fs::remove_file(&tmp);
    }
}
