//! Tokenizers and exact-length synthetic text.
//!
//! A tokenizer comes from a local `tokenizer.json`, a directory holding one, a GGUF
//! model file, or a Hugging Face model id (read from the standard hub cache,
//! downloaded into it unless `HF_HUB_OFFLINE` is set).
//!
//! Synthetic text is a sequence of *words*: vocabulary entries that decode to a space
//! followed by ASCII letters and that re-encode, alone, to exactly their own id.
//! Whether `n` words are exactly `n` tokens is settled in one of three ways, recorded
//! as the run's [`SynthesisPath`]:
//!
//! - **proven**: at load, the tokenizer's structure proves that its normalizer and
//!   pre-tokenizer split such text exactly at word boundaries (see [`proof`]), and a
//!   comparison against the full encoding confirms it. Making a prompt is then
//!   sampling words and copying bytes, with no tokenizer call, and the proven table
//!   is cached on disk by a digest of the tokenizer (of a `tokenizer.json` file, or
//!   of a GGUF file's tokenizer metadata, not its tensors: see [`cache`]), so a
//!   later run starts without parsing the tokenizer at all;
//! - **pre-tokenized**: the proof does not apply, but the model is a BPE without
//!   dropout and no added token can match such text: every piece is run through the
//!   normalizer and pre-tokenizer and every split must be a table word, whose model
//!   step was proven at load;
//! - **encoded**: every piece is fully encoded.
//!
//! On the last two paths a piece that does not come out exact is an error naming
//! what it was for, never a silently different workload.

pub mod cache;
pub mod gguf;
mod hub;
pub mod proof;

use batchbench_contract::rng::Stream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use hub::{hub_cache_dir, resolve, resolve_local};

/// Errors of tokenizer loading and text synthesis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The tokenizer could not be found or read.
    #[error("cannot load tokenizer '{spec}': {reason}")]
    Load {
        /// What the user asked for.
        spec: String,
        /// Why it failed, with what to do next.
        reason: String,
    },
    /// The tokenizer has too few single-token words to synthesise text.
    #[error(
        "tokenizer '{spec}' has only {found} single-token ASCII words; exact-length text needs at least {needed}"
    )]
    Vocabulary {
        /// The tokenizer.
        spec: String,
        /// Words found.
        found: usize,
        /// Words needed.
        needed: usize,
    },
    /// A generated piece did not re-encode to its target.
    #[error("{context}: generated {target}-token text re-encodes to {actual} tokens")]
    Inexact {
        /// Which trajectory, request and block the piece was for.
        context: String,
        /// The requested count.
        target: usize,
        /// What it re-encoded to.
        actual: usize,
    },
    /// Encoding failed inside the tokenizer.
    #[error("tokenizer failed to encode: {0}")]
    Encode(String),
}

const MIN_WORDS: usize = 256;
const MAX_WORDS: usize = 4_096;
/// Longest word, its leading space included: a word is copied as a fixed slot.
const MAX_WORD_BYTES: usize = 13;
const SLOT: usize = 16;

/// How a run knows its synthetic text is exact (recorded in the run's summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynthesisPath {
    /// Proven once, at load, for the whole word table (see [`proof`]): making a
    /// prompt is sampling words and copying bytes, with no tokenizer call.
    Proven,
    /// Every piece is pre-tokenized and its splits looked up in the word table.
    PreTokenized,
    /// Every piece is fully encoded.
    Encoded,
}

impl SynthesisPath {
    /// The name in summaries and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proven => "proven",
            Self::PreTokenized => "pre-tokenized",
            Self::Encoded => "encoded",
        }
    }
}

enum Check {
    Proven,
    /// The words' vocabulary pieces (`Ġword`).
    PreTokenized(std::collections::HashSet<Box<str>>),
    Encoded,
}

/// The single-token words, as fixed slots: bytes `0..len` are the word, byte 15 its
/// length, so a word is appended as one 16-byte copy and a truncation.
struct WordTable {
    slots: Vec<[u8; SLOT]>,
    ids: Vec<u32>,
}

impl WordTable {
    fn new(words: &[(Box<str>, u32)]) -> Self {
        let slots = words
            .iter()
            .map(|(w, _)| {
                let mut s = [0u8; SLOT];
                s[..w.len()].copy_from_slice(w.as_bytes());
                s[SLOT - 1] = w.len() as u8;
                s
            })
            .collect();
        Self {
            slots,
            ids: words.iter().map(|(_, id)| *id).collect(),
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn word(&self, i: usize) -> &str {
        let s = &self.slots[i];
        std::str::from_utf8(&s[..usize::from(s[SLOT - 1])]).unwrap_or_default()
    }
}

/// Whether `w` is a word by the table's rules: a space, then 2 to 12 lowercase
/// ASCII letters.
fn is_word(w: &str) -> bool {
    w.len() <= MAX_WORD_BYTES
        && w.len() >= 3
        && w.starts_with(' ')
        && w[1..].bytes().all(|b| b.is_ascii_lowercase())
}

/// A loaded tokenizer with its table of single-token words.
///
/// On the proven path with a cached table the full tokenizer is not parsed until
/// something needs it (a full encoding); then it is parsed once.
pub struct TokenizerHandle {
    spec: String,
    path: PathBuf,
    full: std::sync::OnceLock<Result<tokenizers::Tokenizer, String>>,
    words: WordTable,
    check: Check,
    from_cache: bool,
    /// Word slot to id, built on first use by [`proven_ids`](Self::proven_ids).
    index: std::sync::OnceLock<std::collections::HashMap<[u8; SLOT], u32>>,
}

impl std::fmt::Debug for TokenizerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenizerHandle")
            .field("spec", &self.spec)
            .field("path", &self.path)
            .field("words", &self.words.len())
            .field("synthesis", &self.synthesis_path())
            .finish_non_exhaustive()
    }
}

fn parse(path: &Path) -> Result<tokenizers::Tokenizer, String> {
    // A GGUF model file carries its tokenizer in its metadata.
    if crate::tokens::gguf::is_gguf(path) {
        crate::tokens::gguf::load_tokenizer(path).map_err(|e| format!("{}: {e}", path.display()))
    } else {
        tokenizers::Tokenizer::from_file(path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl TokenizerHandle {
    /// Loads a tokenizer from a local file or directory, or from the hub cache
    /// (see [`resolve`] to download into it first).
    pub fn load(spec: &str) -> Result<Self, TokenError> {
        let path = resolve_local(spec)?;
        Self::from_file(spec, &path)
    }

    /// Loads a `tokenizer.json` or GGUF file, using the proven word table cached
    /// for this tokenizer's [`cache::key`] when there is one.
    pub fn from_file(spec: &str, path: &Path) -> Result<Self, TokenError> {
        Self::open(spec, path, Some(&cache::cache_dir()))
    }

    /// [`from_file`](Self::from_file) with the word-table cache under `dir`.
    pub fn from_file_with_cache(spec: &str, path: &Path, dir: &Path) -> Result<Self, TokenError> {
        Self::open(spec, path, Some(dir))
    }

    /// Loads a tokenizer without reading or writing the word-table cache: the
    /// table is built and the proof made from the file itself.
    pub fn from_file_uncached(spec: &str, path: &Path) -> Result<Self, TokenError> {
        Self::open(spec, path, None)
    }

    fn open(spec: &str, path: &Path, cache_dir: Option<&Path>) -> Result<Self, TokenError> {
        let load_err = |reason: String| TokenError::Load {
            spec: spec.to_owned(),
            reason,
        };
        let cached = match cache_dir {
            Some(dir) => Some((
                dir,
                cache::remembered_key(dir, path)
                    .map_err(|e| load_err(format!("{}: {e}", path.display())))?,
            )),
            None => None,
        };
        if let Some(entry) = cached.as_ref().and_then(|(dir, d)| cache::read(dir, d)) {
            if entry.words.len() >= MIN_WORDS && entry.words.iter().all(|w| is_word(w)) {
                let words: Vec<(Box<str>, u32)> = entry
                    .words
                    .into_iter()
                    .map(String::into_boxed_str)
                    .zip(entry.ids)
                    .collect();
                return Ok(Self {
                    spec: spec.to_owned(),
                    path: path.to_owned(),
                    full: std::sync::OnceLock::new(),
                    words: WordTable::new(&words),
                    check: Check::Proven,
                    from_cache: true,
                    index: std::sync::OnceLock::new(),
                });
            }
        }
        let inner = parse(path).map_err(load_err)?;
        let words = word_table(&inner);
        if words.len() < MIN_WORDS {
            return Err(TokenError::Vocabulary {
                spec: spec.to_owned(),
                found: words.len(),
                needed: MIN_WORDS,
            });
        }
        let table = WordTable::new(&words);
        let proven = proof::structure_proves(&inner)
            && proof::confirm(&table, &|t| {
                inner
                    .encode_fast(t, false)
                    .ok()
                    .map(|e| e.get_ids().to_vec())
            });
        let check = if proven {
            if let Some((dir, d)) = &cached {
                cache::write(dir, d, &table);
            }
            Check::Proven
        } else {
            unproven_check(&inner, &table)
        };
        let full = std::sync::OnceLock::new();
        let _ = full.set(Ok(inner));
        Ok(Self {
            spec: spec.to_owned(),
            path: path.to_owned(),
            full,
            words: table,
            check,
            from_cache: false,
            index: std::sync::OnceLock::new(),
        })
    }

    /// This handle on the path a tokenizer the proof does not cover takes (every
    /// piece checked at run time), for comparing the two.
    pub fn without_proof(mut self) -> Result<Self, TokenError> {
        let check = unproven_check(self.full()?, &self.words);
        self.check = check;
        Ok(self)
    }

    /// What the user asked for (id or path).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The `tokenizer.json` that was loaded.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The full tokenizer, parsed now if it was not yet (a cached proven table
    /// defers it).
    pub fn full(&self) -> Result<&tokenizers::Tokenizer, TokenError> {
        self.full
            .get_or_init(|| parse(&self.path))
            .as_ref()
            .map_err(|reason| TokenError::Load {
                spec: self.spec.clone(),
                reason: reason.clone(),
            })
    }

    /// Whether the full tokenizer has been parsed.
    pub fn full_loaded(&self) -> bool {
        self.full.get().is_some()
    }

    /// Whether the word table came from the cache.
    pub fn table_from_cache(&self) -> bool {
        self.from_cache
    }

    /// How many single-token words the synthesiser draws from.
    pub fn word_count(&self) -> usize {
        self.words.len()
    }

    /// The words (each with its leading space) and their token ids, by id.
    pub fn words(&self) -> impl Iterator<Item = (&str, u32)> {
        (0..self.words.len()).map(|i| (self.words.word(i), self.words.ids[i]))
    }

    /// How synthetic text is known to be exact.
    pub fn synthesis_path(&self) -> SynthesisPath {
        match self.check {
            Check::Proven => SynthesisPath::Proven,
            Check::PreTokenized(_) => SynthesisPath::PreTokenized,
            Check::Encoded => SynthesisPath::Encoded,
        }
    }

    /// The token count of a synthesised piece: by pre-tokenization when every split
    /// is a table word (see the module docs), else by a full encoding.
    pub fn count_synthetic(&self, text: &str) -> Result<usize, TokenError> {
        match &self.check {
            Check::PreTokenized(pieces) => {
                pre_tokenized_count(self.full()?, pieces, text).map_or_else(|| self.count(text), Ok)
            }
            Check::Proven | Check::Encoded => self.count(text),
        }
    }

    /// The token count of `text`, without special tokens.
    pub fn count(&self, text: &str) -> Result<usize, TokenError> {
        self.full()?
            .encode_fast(text, false)
            .map(|e| e.len())
            .map_err(|e| TokenError::Encode(e.to_string()))
    }

    /// The token ids of `text` when the table is proven and `text` is a run of
    /// table words (each a space and its letters): by the proof, exactly what the
    /// full encoding gives, found by table lookups. `None` otherwise.
    pub fn proven_ids(&self, text: &str) -> Option<Vec<u32>> {
        if !matches!(self.check, Check::Proven) {
            return None;
        }
        let index = self.index.get_or_init(|| {
            self.words
                .slots
                .iter()
                .copied()
                .zip(self.words.ids.iter().copied())
                .collect()
        });
        let b = text.as_bytes();
        if b.first() != Some(&b' ') {
            return None;
        }
        let mut ids = Vec::with_capacity(b.len() / 6 + 1);
        let mut start = 0;
        for end in 1..=b.len() {
            if end < b.len() && b[end] != b' ' {
                continue;
            }
            let word = &b[start..end];
            if word.len() > MAX_WORD_BYTES {
                return None;
            }
            let mut slot = [0u8; SLOT];
            slot[..word.len()].copy_from_slice(word);
            slot[SLOT - 1] = word.len() as u8;
            ids.push(*index.get(&slot)?);
            start = end;
        }
        Some(ids)
    }

    /// The token ids of `text`, without special tokens.
    pub fn ids(&self, text: &str) -> Result<Vec<u32>, TokenError> {
        self.full()?
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenError::Encode(e.to_string()))
    }

    /// Appends `n` words drawn from `stream` to `out`, without checking.
    pub fn push_words(&self, stream: &mut Stream, n: usize, out: &mut String) {
        let mut buf = std::mem::take(out).into_bytes();
        buf.reserve(n * SLOT);
        let slots = &self.words.slots;
        let len = slots.len() as u64;
        for _ in 0..n {
            let slot = &slots[stream.below(len) as usize];
            let end = buf.len() + usize::from(slot[SLOT - 1]);
            buf.extend_from_slice(slot);
            buf.truncate(end);
        }
        // Cannot fail: every slot holds a word that passed `is_word` (ASCII) when
        // the table was built or read from the cache.
        *out = String::from_utf8(buf).unwrap_or_default();
    }

    /// Text of exactly `n` tokens from the stream `key`: equal keys give identical
    /// bytes, and the text for `n` is a prefix of the text for any larger count.
    /// `context` names the piece in the error when it cannot be made exact.
    pub fn exact_text(
        &self,
        key: u64,
        n: usize,
        context: &dyn Fn() -> String,
    ) -> Result<String, TokenError> {
        self.exact_text_with_prefix(None, key, n, context)
    }

    /// Text of exactly `n` tokens whose first `prefix.1` tokens come from the shared
    /// stream `prefix.0` and the rest from `key`.
    pub fn exact_text_with_prefix(
        &self,
        prefix: Option<(u64, usize)>,
        key: u64,
        n: usize,
        context: &dyn Fn() -> String,
    ) -> Result<String, TokenError> {
        let mut out = String::new();
        let shared = prefix.map_or(0, |(_, k)| k.min(n));
        if let Some((pkey, _)) = prefix {
            self.push_words(&mut Stream::new(pkey), shared, &mut out);
        }
        self.push_words(&mut Stream::new(key), n - shared, &mut out);
        // On the proven path `n` words are `n` tokens: nothing to check.
        if !matches!(self.check, Check::Proven) {
            self.check(&out, n, context)?;
        }
        Ok(out)
    }

    /// Checks that `text` re-encodes to exactly `n` tokens.
    pub fn check(
        &self,
        text: &str,
        n: usize,
        context: &dyn Fn() -> String,
    ) -> Result<(), TokenError> {
        let actual = self.count_synthetic(text)?;
        if actual == n {
            Ok(())
        } else {
            Err(TokenError::Inexact {
                context: context(),
                target: n,
                actual,
            })
        }
    }
}

/// The per-piece check for a tokenizer the proof does not cover.
fn unproven_check(tok: &tokenizers::Tokenizer, words: &WordTable) -> Check {
    if !fast_check_sound(tok) {
        return Check::Encoded;
    }
    let pieces: Option<std::collections::HashSet<Box<str>>> = words
        .ids
        .iter()
        .map(|&id| tok.id_to_token(id).map(String::into_boxed_str))
        .collect();
    match pieces {
        Some(p) if pre_tokenized_agrees(tok, &p, words) => Check::PreTokenized(p),
        _ => Check::Encoded,
    }
}

/// Runs the normalizer and pre-tokenizer over `text`: the split count when every
/// split is a table word, else `None`.
fn pre_tokenized_count(
    tok: &tokenizers::Tokenizer,
    pieces: &std::collections::HashSet<Box<str>>,
    text: &str,
) -> Option<usize> {
    use tokenizers::{Normalizer, PreTokenizer};
    let mut pts = tokenizers::PreTokenizedString::from(text);
    if let Some(n) = tok.get_normalizer() {
        pts.normalize(|s| n.normalize(s)).ok()?;
    }
    if let Some(p) = tok.get_pre_tokenizer() {
        p.pre_tokenize(&mut pts).ok()?;
    }
    let splits = pts.get_splits(
        tokenizers::OffsetReferential::Normalized,
        tokenizers::OffsetType::None,
    );
    splits
        .iter()
        .all(|(piece, _, _)| pieces.contains(*piece))
        .then_some(splits.len())
}

/// The load-time self-test of the per-piece check: every word, in a shuffled run,
/// counts the same by pre-tokenization and by full encoding.
fn pre_tokenized_agrees(
    tok: &tokenizers::Tokenizer,
    pieces: &std::collections::HashSet<Box<str>>,
    words: &WordTable,
) -> bool {
    let (order, _) = shuffled(words.len());
    let text: String = order.iter().map(|&i| words.word(i)).collect();
    let full = tok.encode_fast(text.as_str(), false).map(|e| e.len()).ok();
    pre_tokenized_count(tok, pieces, &text) == Some(words.len()) && full == Some(words.len())
}

/// The indices `0..n` in a fixed shuffled order, and the stream that made it (for
/// the load-time self-tests, which must be a pure function of the tokenizer).
fn shuffled(n: usize) -> (Vec<usize>, Stream) {
    let mut rng = Stream::new(0x5e1f_7e57);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    (order, rng)
}

/// Finds the words: vocabulary entries that decode to `" " + [a-z]{2,12}` and encode
/// back to exactly themselves. Ordered by id, so the table is a pure function of the
/// tokenizer file.
fn word_table(tok: &tokenizers::Tokenizer) -> Vec<(Box<str>, u32)> {
    let mut vocab: Vec<(String, u32)> = tok.get_vocab(false).into_iter().collect();
    vocab.sort_unstable_by_key(|(_, id)| *id);
    let mut words = Vec::new();
    for (piece, id) in vocab {
        // Cheap pre-filter on the raw piece: a one-character space marker (byte-level
        // `Ġ`, Metaspace `▁`, or a literal space) followed by lowercase ASCII letters.
        let mut chars = piece.chars();
        let Some(first) = chars.next() else { continue };
        if !matches!(first, 'Ġ' | '▁' | ' ') {
            continue;
        }
        let rest = chars.as_str();
        if !(2..=12).contains(&rest.len()) || !rest.bytes().all(|b| b.is_ascii_lowercase()) {
            continue;
        }
        let Ok(text) = tok.decode(&[id], false) else {
            continue;
        };
        if !is_word(&text) || &text[1..] != rest {
            continue;
        }
        let Ok(enc) = tok.encode_fast(text.as_str(), false) else {
            continue;
        };
        if enc.get_ids() != [id] {
            continue;
        }
        words.push((text.into_boxed_str(), id));
        if words.len() >= MAX_WORDS {
            break;
        }
    }
    words
}

/// Whether counting pre-tokenizer splits of table words equals a full encoding's
/// count: a BPE model without dropout, a pre-tokenizer, and no added token that
/// could match inside text made of spaces and ASCII letters (or their byte-level and
/// Metaspace stand-ins).
fn fast_check_sound(tok: &tokenizers::Tokenizer) -> bool {
    let bpe = matches!(tok.get_model(), tokenizers::ModelWrapper::BPE(b) if b.dropout.is_none());
    bpe && tok.get_pre_tokenizer().is_some() && proof::added_tokens_inert(tok)
}

/// Resolves and loads, on the blocking pool.
pub async fn load(spec: &str) -> Result<Arc<TokenizerHandle>, TokenError> {
    let path = resolve(spec).await?;
    let spec = spec.to_owned();
    tokio::task::spawn_blocking(move || TokenizerHandle::from_file(&spec, &path).map(Arc::new))
        .await
        .map_err(|e| TokenError::Encode(e.to_string()))?
}

/// Structured synthetic pieces whose serialised form re-encodes to an exact count.
impl TokenizerHandle {
    /// A function schema (an entry of a request's `tools` array) whose compact JSON,
    /// with keys in sorted order (so a server that re-serialises it gets the same
    /// bytes), re-encodes to exactly `n` tokens.
    pub fn tool_schema(
        &self,
        key: u64,
        n: usize,
        context: &dyn Fn() -> String,
    ) -> Result<String, TokenError> {
        let name = format!("tool_{:08x}", key as u32);
        let make = |words: &str| {
            format!(
                "{{\"function\":{{\"description\":{},\"name\":\"{name}\",\"parameters\":{{\"properties\":{{}},\"type\":\"object\"}}}},\"type\":\"function\"}}",
                serde_json::Value::String(words.to_owned())
            )
        };
        self.exact_json(key, n, &make, context)
    }

    /// The `arguments` of a synthetic tool call: a JSON object, as a string, that
    /// re-encodes to exactly `n` tokens.
    pub fn tool_arguments(
        &self,
        key: u64,
        n: usize,
        context: &dyn Fn() -> String,
    ) -> Result<String, TokenError> {
        let make = |words: &str| {
            format!(
                "{{\"input\":{}}}",
                serde_json::Value::String(words.to_owned())
            )
        };
        self.exact_json(key, n, &make, context)
    }

    /// Finds the word count for which `make(words)` re-encodes to `n` tokens (full
    /// encoding: JSON punctuation is not made of table words).
    fn exact_json(
        &self,
        key: u64,
        n: usize,
        make: &dyn Fn(&str) -> String,
        context: &dyn Fn() -> String,
    ) -> Result<String, TokenError> {
        let mut words = String::new();
        self.push_words(&mut Stream::new(key), 1, &mut words);
        let base = self.count(&make(&words))?.saturating_sub(1);
        if n <= base {
            return Err(TokenError::Inexact {
                context: format!(
                    "{} (the smallest such JSON is {} tokens)",
                    context(),
                    base + 1
                ),
                target: n,
                actual: base + 1,
            });
        }
        let mut k = n - base;
        for _ in 0..8 {
            words.clear();
            self.push_words(&mut Stream::new(key), k, &mut words);
            let text = make(&words);
            let got = self.count(&text)?;
            if got == n {
                return Ok(text);
            }
            let next = (k as i64 + n as i64 - got as i64).max(1) as usize;
            if next == k {
                break;
            }
            k = next;
        }
        let text = make(&words);
        Err(TokenError::Inexact {
            context: context(),
            target: n,
            actual: self.count(&text)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata of a byte-level BPE tokenizer (GPT-2's pre-tokenizer) of 300
    /// two-letter words (`Ġab`, ...): enough words for a proven table.
    fn word_vocabulary() -> Vec<(&'static str, crate::tokens::gguf::MetaValue)> {
        use crate::tokens::gguf::MetaValue;
        let letters: Vec<char> = ('a'..='z').collect();
        let mut tokens = vec!["Ġ".to_owned()];
        let mut merges = Vec::new();
        tokens.extend(letters.iter().map(char::to_string));
        for l in &letters {
            tokens.push(format!("Ġ{l}"));
            merges.push(format!("Ġ {l}"));
        }
        for i in 0..300 {
            let (a, b) = (letters[i / 26], letters[i % 26]);
            tokens.push(format!("Ġ{a}{b}"));
            merges.push(format!("Ġ{a} {b}"));
        }
        let strings =
            |v: Vec<String>| MetaValue::Array(v.into_iter().map(MetaValue::Str).collect());
        vec![
            ("tokenizer.ggml.model", MetaValue::Str("gpt2".into())),
            ("tokenizer.ggml.pre", MetaValue::Str("gpt2".into())),
            (
                "tokenizer.ggml.token_type",
                MetaValue::Array(vec![MetaValue::Int(1); tokens.len()]),
            ),
            ("tokenizer.ggml.tokens", strings(tokens)),
            ("tokenizer.ggml.merges", strings(merges)),
        ]
    }

    #[test]
    fn a_gguf_table_is_cached_by_its_tokenizer_not_its_tensors() {
        use crate::tokens::gguf::{MetaValue, write_model};
        let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let files = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |name: &str, values: &[(&str, MetaValue)], tensor: &[u8]| {
            let path = files.path().join(name);
            let mut out = Vec::new();
            write_model(&mut out, values, tensor).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(&path, out).unwrap_or_else(|e| panic!("{e}"));
            path
        };
        let load = |path: &Path| {
            TokenizerHandle::from_file_with_cache("gguf", path, cache.path())
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut model = vec![("general.architecture", MetaValue::Str("test".into()))];
        model.extend(word_vocabulary());
        let small = write("small.gguf", &model, &[1; 64]);

        let cold = load(&small);
        assert_eq!(cold.synthesis_path(), SynthesisPath::Proven);
        assert!(!cold.table_from_cache() && cold.word_count() == 300);
        let key = cache::key(&small).unwrap_or_else(|e| panic!("{e}"));
        assert!(key.starts_with("gguf-"), "{key}");
        let entry = cache::entry_path(cache.path(), &key);
        assert!(entry.is_file(), "{} was not written", entry.display());
        let warm = load(&small);
        assert!(warm.table_from_cache() && !warm.full_loaded());
        assert_eq!(
            warm.words().collect::<Vec<_>>(),
            cold.words().collect::<Vec<_>>()
        );

        // Another model with the same tokenizer (other tensors, another size,
        // other general metadata): the same key, the same entry.
        model[0].1 = MetaValue::Str("other".into());
        let large = write("large.gguf", &model, &vec![9; 1 << 20]);
        assert_eq!(cache::key(&large).ok(), Some(key.clone()));
        let reused = load(&large);
        assert!(reused.table_from_cache());
        assert_eq!(reused.count(" ab cd").ok(), Some(2));

        // A changed tokenizer (one merge fewer: `Ġln` is no word any more) has
        // another key: never the stale table.
        let mut fewer = word_vocabulary();
        if let MetaValue::Array(m) = &mut fewer[4].1 {
            m.pop();
        }
        let changed = write("changed.gguf", &fewer, &[1; 64]);
        assert_ne!(cache::key(&changed).ok(), Some(key.clone()));
        let fresh = load(&changed);
        assert!(!fresh.table_from_cache() && fresh.word_count() == 299);
        assert!(load(&changed).table_from_cache());

        // A damaged entry is rebuilt, as for a tokenizer.json.
        let good = std::fs::read_to_string(&entry).unwrap_or_default();
        std::fs::write(&entry, good.replacen("\" ab\"", "\" zz\"", 1))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!load(&small).table_from_cache(), "a damaged entry was used");
        assert_eq!(std::fs::read_to_string(&entry).unwrap_or_default(), good);
    }

    #[test]
    fn a_files_key_is_remembered_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("tokenizer.json");
        std::fs::write(&file, "one").unwrap_or_else(|e| panic!("{e}"));
        let cache = dir.path().join("cache");
        let first = cache::remembered_key(&cache, &file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Some(first.clone()), cache::key(&file).ok());
        // The memo is read, not the file: a forged one with the file's size
        // and time is believed...
        let memo = std::fs::read_dir(cache.join("word-tables").join("keys"))
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "json"))
            .unwrap_or_else(|| panic!("no memo written"));
        let text = std::fs::read_to_string(&memo).unwrap_or_default();
        std::fs::write(&memo, text.replace(&first, "forged")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            cache::remembered_key(&cache, &file).ok().as_deref(),
            Some("forged")
        );
        // ...and a changed file (another size) is hashed again.
        std::fs::write(&file, "two!").unwrap_or_else(|e| panic!("{e}"));
        let changed = cache::remembered_key(&cache, &file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Some(changed.clone()), cache::key(&file).ok());
        assert_ne!(changed, first);
    }
}
