//! Reads the tokenizer stored in a GGUF model file (llama.cpp's format).
//!
//! Only the header and metadata are read (the tensors are never touched): the
//! `tokenizer.ggml.*` keys give the vocabulary, merges, token types and the name of
//! the pre-tokenizer, from which the equivalent `tokenizers` tokenizer is built.
//! Supported: byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the
//! pre-tokenizers listed in [`PRE_TOKENIZERS`]; anything else is a clear error that
//! names what was found and what to pass instead.
//!
//! [`tokenizer_digest`] names the tokenizer of a file from those keys alone, so
//! that what is cached for it (see [`crate::tokens::cache`]) is found without
//! reading, let alone hashing, gigabytes of tensors.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

/// The file magic, `GGUF` in little-endian byte order.
const MAGIC: [u8; 4] = *b"GGUF";

/// Corrupt-file guards: no real tokenizer comes near these.
const MAX_STRING: u64 = 64 << 20;
const MAX_ARRAY: u64 = 16 << 20;
const MAX_KEYS: u64 = 1 << 20;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// Any unsigned integer type.
    Uint(u64),
    /// Any signed integer type.
    Int(i64),
    /// `float32` or `float64`.
    Float(f64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    Str(String),
    /// `array` (of one element type).
    Array(Vec<MetaValue>),
}

impl MetaValue {
    fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The header fields and metadata of a GGUF file.
#[derive(Debug, Clone)]
pub struct Metadata {
    /// Format version (2 or 3).
    pub version: u32,
    /// Number of tensors the file declares.
    pub tensors: u64,
    /// Every metadata key.
    pub values: HashMap<String, MetaValue>,
}

impl Metadata {
    fn get(&self, key: &str) -> Option<&MetaValue> {
        self.values.get(key)
    }

    fn string(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("metadata key {key} is missing"))?
            .as_str()
            .ok_or_else(|| format!("metadata key {key} is not a string"))
    }

    fn strings(&self, key: &str) -> Result<Vec<&str>, String> {
        match self.get(key) {
            Some(MetaValue::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| format!("metadata key {key} is not an array of strings"))
                })
                .collect(),
            Some(_) => Err(format!("metadata key {key} is not an array")),
            None => Err(format!("metadata key {key} is missing")),
        }
    }
}

struct Reader<R> {
    inner: R,
    version: u32,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.inner
            .read_exact(&mut b)
            .map_err(|e| format!("truncated metadata: {e}"))?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, String> {
        self.bytes::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, String> {
        self.bytes::<8>().map(u64::from_le_bytes)
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u64()?;
        if len > MAX_STRING {
            return Err(format!("a metadata string claims {len} bytes"));
        }
        let mut buf = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| format!("truncated metadata: {e}"))?;
        // Vocabularies hold byte-level pieces, valid UTF-8; a lossy read keeps
        // the file usable if one is not.
        Ok(String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into()))
    }

    fn value(&mut self, ty: u32, depth: u32) -> Result<MetaValue, String> {
        Ok(match ty {
            0 => MetaValue::Uint(u64::from(self.bytes::<1>()?[0])),
            1 => MetaValue::Int(i64::from(i8::from_le_bytes(self.bytes::<1>()?))),
            2 => MetaValue::Uint(u64::from(u16::from_le_bytes(self.bytes::<2>()?))),
            3 => MetaValue::Int(i64::from(i16::from_le_bytes(self.bytes::<2>()?))),
            4 => MetaValue::Uint(u64::from(self.u32()?)),
            5 => MetaValue::Int(i64::from(i32::from_le_bytes(self.bytes::<4>()?))),
            6 => MetaValue::Float(f64::from(f32::from_le_bytes(self.bytes::<4>()?))),
            7 => MetaValue::Bool(self.bytes::<1>()?[0] != 0),
            8 => MetaValue::Str(self.string()?),
            9 => {
                if depth > 2 {
                    return Err("metadata arrays nest too deeply".into());
                }
                let item = self.u32()?;
                let n = self.u64()?;
                if n > MAX_ARRAY {
                    return Err(format!("a metadata array claims {n} items"));
                }
                let mut items = Vec::with_capacity(n.min(1 << 16) as usize);
                for _ in 0..n {
                    items.push(self.value(item, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::Uint(self.u64()?),
            11 => MetaValue::Int(i64::from_le_bytes(self.bytes::<8>()?)),
            12 => MetaValue::Float(f64::from_le_bytes(self.bytes::<8>()?)),
            other => return Err(format!("unknown metadata value type {other}")),
        })
    }

    /// Reads `n` bytes and drops them.
    fn skip(&mut self, n: u64) -> Result<(), String> {
        let read = std::io::copy(&mut (&mut self.inner).take(n), &mut std::io::sink())
            .map_err(|e| format!("truncated metadata: {e}"))?;
        if read == n {
            Ok(())
        } else {
            Err("truncated metadata: the file ends inside a value".into())
        }
    }

    /// Reads past a value as [`value`](Self::value) would read it (with the same
    /// guards), keeping nothing.
    fn skip_value(&mut self, ty: u32, depth: u32) -> Result<(), String> {
        if let Some(n) = fixed_size(ty) {
            return self.skip(n);
        }
        match ty {
            8 => {
                let len = self.u64()?;
                if len > MAX_STRING {
                    return Err(format!("a metadata string claims {len} bytes"));
                }
                self.skip(len)
            }
            9 => {
                if depth > 2 {
                    return Err("metadata arrays nest too deeply".into());
                }
                let item = self.u32()?;
                let n = self.u64()?;
                if n > MAX_ARRAY {
                    return Err(format!("a metadata array claims {n} items"));
                }
                match fixed_size(item) {
                    Some(size) => self.skip(n * size),
                    None => (0..n).try_for_each(|_| self.skip_value(item, depth + 1)),
                }
            }
            other => Err(format!("unknown metadata value type {other}")),
        }
    }
}

/// The size of a value of a fixed-size type.
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// A reader that hashes what passes through it while `on`.
struct Tee<R> {
    inner: R,
    hash: Sha256,
    on: bool,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.on {
            self.hash.update(&buf[..n]);
        }
        Ok(n)
    }
}

/// Reads the header (magic, version, tensor and key counts), checked; sets the
/// reader's version and returns the counts.
fn header<R: Read>(r: &mut Reader<R>) -> Result<(u64, u64), String> {
    let magic = r
        .bytes::<4>()
        .map_err(|_| "not a GGUF file (too short)".to_owned())?;
    if magic != MAGIC {
        return Err("not a GGUF file (no GGUF magic)".into());
    }
    r.version = r.u32()?;
    if !(2..=3).contains(&r.version) {
        return Err(format!(
            "GGUF version {} is not supported (2 and 3 are)",
            r.version
        ));
    }
    let tensors = r.u64()?;
    let keys = r.u64()?;
    if keys > MAX_KEYS {
        return Err(format!("the header claims {keys} metadata keys"));
    }
    Ok((tensors, keys))
}

/// Reads the header and metadata of a GGUF file (versions 2 and 3).
pub fn read_metadata(path: &Path) -> Result<Metadata, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    read_metadata_from(BufReader::with_capacity(1 << 20, file))
}

/// As [`read_metadata`], from any reader positioned at the start of the file.
pub fn read_metadata_from(inner: impl Read) -> Result<Metadata, String> {
    let mut r = Reader { inner, version: 0 };
    let (tensors, keys) = header(&mut r)?;
    let mut values = HashMap::new();
    for _ in 0..keys {
        let key = r.string()?;
        let ty = r.u32()?;
        let v = r.value(ty, 0).map_err(|e| format!("key {key}: {e}"))?;
        values.insert(key, v);
    }
    Ok(Metadata {
        version: r.version,
        tensors,
        values,
    })
}

/// Bump when [`tokenizer_json`] builds another tokenizer from the same metadata
/// (the [`PRE_TOKENIZERS`] table is in [`tokenizer_digest`] already).
const CONVERSION: u32 = 1;

/// The metadata keys that describe the tokenizer.
const TOKENIZER_KEYS: &str = "tokenizer.ggml.";

/// A digest of the tokenizer a GGUF file holds, from its header and metadata
/// alone: the tensors are never read, so the cost is that of the vocabulary, not
/// of the model. Hex SHA-256 over the conversion to a `tokenizer.json` (a
/// version and the [`PRE_TOKENIZERS`] table), then every `tokenizer.ggml.*` key,
/// in file order, with its type and its value's bytes as stored. Those keys are
/// all [`tokenizer_json`] reads, so two files with equal digests give the same
/// tokenizer, whatever their other metadata and tensors; a file with the same
/// tokenizer stored otherwise (keys in another order) only has another digest.
pub fn tokenizer_digest(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    tokenizer_digest_from(BufReader::with_capacity(1 << 20, file))
}

/// As [`tokenizer_digest`], from any reader positioned at the start of the file.
pub fn tokenizer_digest_from(inner: impl Read) -> Result<String, String> {
    let mut hash = Sha256::new();
    hash.update(b"batchbench: the tokenizer of a GGUF file\0");
    hash.update(CONVERSION.to_le_bytes());
    let field = |hash: &mut Sha256, bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    hash.update((PRE_TOKENIZERS.len() as u64).to_le_bytes());
    for (names, patterns, ignore_merges) in PRE_TOKENIZERS {
        for list in [names, patterns] {
            hash.update((list.len() as u64).to_le_bytes());
            list.iter().for_each(|s| field(&mut hash, s.as_bytes()));
        }
        hash.update([u8::from(*ignore_merges)]);
    }
    let mut r = Reader {
        inner: Tee {
            inner,
            hash,
            on: false,
        },
        version: 0,
    };
    let (_, keys) = header(&mut r)?;
    for _ in 0..keys {
        let key = r.string()?;
        let ty = r.u32()?;
        let ours = key.starts_with(TOKENIZER_KEYS);
        if ours {
            let hash = &mut r.inner.hash;
            field(hash, key.as_bytes());
            hash.update(ty.to_le_bytes());
        }
        r.inner.on = ours;
        let skipped = r.skip_value(ty, 0);
        r.inner.on = false;
        skipped.map_err(|e| format!("key {key}: {e}"))?;
    }
    Ok(r.inner
        .hash
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// GPT-2's split pattern.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's split pattern (digits in runs of at most three).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's split pattern (single digits).
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// `tokenizer.ggml.pre` names understood, with their split patterns (applied in
/// order) and whether merges are bypassed for whole-vocabulary words, as llama.cpp
/// defines them.
pub const PRE_TOKENIZERS: &[(&[&str], &[&str], bool)] = &[
    (&["gpt-2", "gpt2"], &[GPT2], false),
    (
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
        ],
        &[r"\p{N}", GPT2],
        false,
    ),
    (
        &["llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"],
        &[LLAMA3],
        true,
    ),
    (&["qwen2", "deepseek-r1-qwen"], &[QWEN2], false),
];

/// llama.cpp token types that are special (never produced from plain text).
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Builds the `tokenizer.json` document equivalent to the file's tokenizer.
pub fn tokenizer_json(meta: &Metadata) -> Result<Value, String> {
    let model = meta.string("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(format!(
            "tokenizer.ggml.model is \"{model}\"; only byte-level BPE (\"gpt2\") is read from GGUF files: pass the model's tokenizer.json instead"
        ));
    }
    // llama.cpp applies its own "default" split rules when the key is missing;
    // they are not reproduced here, so that case is an error rather than a guess.
    let pre = match meta.get("tokenizer.ggml.pre") {
        Some(v) => v
            .as_str()
            .ok_or("metadata key tokenizer.ggml.pre is not a string")?,
        None => "default",
    };
    let Some(&(_, patterns, ignore_merges)) = PRE_TOKENIZERS
        .iter()
        .find(|(names, _, _)| names.contains(&pre))
    else {
        let known: Vec<&str> = PRE_TOKENIZERS
            .iter()
            .flat_map(|(n, _, _)| n.iter().copied())
            .collect();
        return Err(format!(
            "pre-tokenizer \"{pre}\" (tokenizer.ggml.pre) is not supported; supported: {}; pass the model's tokenizer.json instead",
            known.join(", ")
        ));
    };
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let merges = meta.strings("tokenizer.ggml.merges")?;
    let types: Vec<i64> = match meta.get("tokenizer.ggml.token_type") {
        Some(MetaValue::Array(items)) => items
            .iter()
            .map(|v| match *v {
                MetaValue::Int(i) => i,
                MetaValue::Uint(u) => i64::try_from(u).unwrap_or(0),
                _ => 0,
            })
            .collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && types.len() != tokens.len() {
        return Err(format!(
            "tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        ));
    }
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        // A repeated piece keeps its first id, as a tokenizer.json vocabulary would.
        if !vocab.contains_key(*piece) {
            vocab.insert((*piece).to_owned(), json!(id));
        }
        let ty = types.get(id).copied().unwrap_or(1);
        if ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED {
            added.push(json!({
                "id": id,
                "content": piece,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": ty == TOKEN_TYPE_CONTROL,
            }));
        }
    }
    let mut pre_tokenizers: Vec<Value> = patterns
        .iter()
        .map(|p| {
            json!({
                "type": "Split",
                "pattern": { "Regex": p },
                "behavior": "Isolated",
                "invert": false,
            })
        })
        .collect();
    pre_tokenizers.push(json!({
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": true,
        "use_regex": false,
    }));
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": { "type": "Sequence", "pretokenizers": pre_tokenizers },
        "post_processor": null,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": true,
            "trim_offsets": true,
            "use_regex": true,
        },
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }))
}

/// Loads the tokenizer stored in a GGUF file.
pub fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, String> {
    let meta = read_metadata(path)?;
    let doc = tokenizer_json(&meta)?;
    let text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
    text.parse::<tokenizers::Tokenizer>()
        .map_err(|e| format!("cannot build the tokenizer from its GGUF metadata: {e}"))
}

/// Whether `path` starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == MAGIC
}

/// Test support: writes a GGUF file holding only metadata.
#[doc(hidden)]
pub fn write_metadata(
    out: &mut impl std::io::Write,
    values: &[(&str, MetaValue)],
) -> std::io::Result<()> {
    write_file(out, values, None)
}

/// Test support: writes a GGUF file holding metadata and one tensor, `data` as
/// a vector of `i8`, after the metadata at the default 32-byte alignment.
#[doc(hidden)]
pub fn write_model(
    out: &mut impl std::io::Write,
    values: &[(&str, MetaValue)],
    data: &[u8],
) -> std::io::Result<()> {
    write_file(out, values, Some(data))
}

fn write_file(
    out: &mut impl std::io::Write,
    values: &[(&str, MetaValue)],
    tensor: Option<&[u8]>,
) -> std::io::Result<()> {
    fn string(out: &mut impl std::io::Write, s: &str) -> std::io::Result<()> {
        out.write_all(&(s.len() as u64).to_le_bytes())?;
        out.write_all(s.as_bytes())
    }
    fn type_of(v: &MetaValue) -> u32 {
        match v {
            MetaValue::Uint(_) => 10,
            MetaValue::Int(_) => 11,
            MetaValue::Float(_) => 12,
            MetaValue::Bool(_) => 7,
            MetaValue::Str(_) => 8,
            MetaValue::Array(_) => 9,
        }
    }
    fn value(out: &mut impl std::io::Write, v: &MetaValue) -> std::io::Result<()> {
        match v {
            MetaValue::Uint(x) => out.write_all(&x.to_le_bytes()),
            MetaValue::Int(x) => out.write_all(&x.to_le_bytes()),
            MetaValue::Float(x) => out.write_all(&x.to_le_bytes()),
            MetaValue::Bool(b) => out.write_all(&[u8::from(*b)]),
            MetaValue::Str(s) => string(out, s),
            MetaValue::Array(items) => {
                let item = items.first().map_or(8, type_of);
                out.write_all(&item.to_le_bytes())?;
                out.write_all(&(items.len() as u64).to_le_bytes())?;
                items.iter().try_for_each(|v| value(out, v))
            }
        }
    }
    let mut head = Vec::new();
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&u64::from(tensor.is_some()).to_le_bytes());
    head.extend_from_slice(&(values.len() as u64).to_le_bytes());
    for (k, v) in values {
        string(&mut head, k)?;
        head.extend_from_slice(&type_of(v).to_le_bytes());
        value(&mut head, v)?;
    }
    if let Some(data) = tensor {
        string(&mut head, "weights")?;
        head.extend_from_slice(&1u32.to_le_bytes()); // dimensions
        head.extend_from_slice(&(data.len() as u64).to_le_bytes());
        head.extend_from_slice(&24u32.to_le_bytes()); // GGML_TYPE_I8
        head.extend_from_slice(&0u64.to_le_bytes()); // offset in the data
        head.resize(head.len().next_multiple_of(32), 0);
    }
    out.write_all(&head)?;
    out.write_all(tensor.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> MetaValue {
        MetaValue::Array(v.iter().map(|s| MetaValue::Str((*s).to_owned())).collect())
    }

    fn file(values: &[(&str, MetaValue)]) -> Vec<u8> {
        let mut out = Vec::new();
        write_metadata(&mut out, values).unwrap();
        out
    }

    fn with_tensor(values: &[(&str, MetaValue)], data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_model(&mut out, values, data).unwrap();
        out
    }

    #[test]
    fn the_tokenizer_digest_reads_the_tokenizer_keys_and_nothing_else() {
        let tokenizer = |tokens: &[&str]| {
            vec![
                ("tokenizer.ggml.model", MetaValue::Str("gpt2".into())),
                ("tokenizer.ggml.pre", MetaValue::Str("qwen2".into())),
                ("tokenizer.ggml.tokens", strings(tokens)),
                (
                    "tokenizer.ggml.token_type",
                    MetaValue::Array(vec![MetaValue::Int(1); tokens.len()]),
                ),
                ("tokenizer.ggml.merges", strings(&["Ġ a", "Ġa b"])),
                ("tokenizer.ggml.eos_token_id", MetaValue::Uint(0)),
            ]
        };
        let digest = |bytes: &[u8]| tokenizer_digest_from(bytes).unwrap();
        let base = tokenizer(&["Ġ", "a", "b", "Ġa", "Ġab"]);
        let model = |arch: &str, layers: u64| {
            let mut v = vec![
                ("general.architecture", MetaValue::Str(arch.into())),
                ("general.block_count", MetaValue::Uint(layers)),
            ];
            v.extend(base.iter().cloned());
            v
        };
        let small = with_tensor(&model("qwen2", 2), &[7; 100]);
        let d = digest(&small);
        assert_eq!(d.len(), 64);
        // Other tensors (bytes and size) and other general metadata: the same
        // tokenizer, the same digest.
        let large = with_tensor(&model("qwen3", 64), &vec![1; 1 << 20]);
        assert_eq!(digest(&large), d);
        assert_eq!(digest(&file(&base)), d);
        // The tensors are never read: a file cut right after its metadata, or
        // with everything after it (tensor list and data) garbage, has the same
        // digest.
        let meta_len = file(&model("qwen2", 2)).len();
        assert_eq!(digest(&small[..meta_len]), d);
        let mut garbage = small.clone();
        garbage[meta_len..].fill(0xff);
        assert_eq!(digest(&garbage), d);
        // Any change to a tokenizer key changes it: a piece, a merge, a token
        // type, the pre-tokenizer, a key of its own.
        let changed = |i: usize, v: MetaValue| {
            let mut t = base.clone();
            t[i].1 = v;
            digest(&file(&t))
        };
        let others = [
            changed(2, strings(&["Ġ", "a", "b", "Ġa", "Ġba"])),
            changed(4, strings(&["Ġ a", "Ġa c"])),
            changed(
                3,
                MetaValue::Array(vec![
                    MetaValue::Int(1),
                    MetaValue::Int(1),
                    MetaValue::Int(1),
                    MetaValue::Int(1),
                    MetaValue::Int(3),
                ]),
            ),
            changed(1, MetaValue::Str("llama-bpe".into())),
            changed(5, MetaValue::Uint(1)),
            digest(&file(&base[..5])),
        ];
        for (i, o) in others.iter().enumerate() {
            assert_ne!(*o, d, "change {i}");
        }
        // A broken header is an error, as when reading the tokenizer.
        assert!(tokenizer_digest_from(&small[..10]).is_err());
        assert!(tokenizer_digest_from(&small[..meta_len - 3]).is_err());
    }

    #[test]
    fn metadata_round_trips() {
        let bytes = file(&[
            ("a.u", MetaValue::Uint(7)),
            ("a.i", MetaValue::Int(-3)),
            ("a.b", MetaValue::Bool(true)),
            ("a.s", MetaValue::Str("hé".into())),
            ("a.arr", strings(&["x", "y"])),
        ]);
        let m = read_metadata_from(&bytes[..]).unwrap();
        assert_eq!(m.version, 3);
        assert_eq!(m.values["a.u"], MetaValue::Uint(7));
        assert_eq!(m.values["a.i"], MetaValue::Int(-3));
        assert_eq!(m.values["a.b"], MetaValue::Bool(true));
        assert_eq!(m.values["a.s"], MetaValue::Str("hé".into()));
        assert_eq!(m.values["a.arr"], strings(&["x", "y"]));
    }

    #[test]
    fn corrupt_files_are_clear_errors() {
        assert!(
            read_metadata_from(&b"GG"[..])
                .unwrap_err()
                .contains("not a GGUF file")
        );
        assert!(
            read_metadata_from(&b"NOPE0000"[..])
                .unwrap_err()
                .contains("no GGUF magic")
        );
        let mut v1 = b"GGUF".to_vec();
        v1.extend_from_slice(&1u32.to_le_bytes());
        assert!(
            read_metadata_from(&v1[..])
                .unwrap_err()
                .contains("version 1")
        );
        let mut bytes = file(&[("k", MetaValue::Str("value".into()))]);
        bytes.truncate(bytes.len() - 2);
        assert!(
            read_metadata_from(&bytes[..])
                .unwrap_err()
                .contains("truncated")
        );
        // A string claiming a terabyte is refused before anything is allocated.
        let mut huge = file(&[]);
        huge[16..24].copy_from_slice(&1u64.to_le_bytes());
        huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(
            read_metadata_from(&huge[..])
                .unwrap_err()
                .contains("claims")
        );
    }

    #[test]
    fn unsupported_vocabularies_name_what_was_found() {
        let m = read_metadata_from(
            &file(&[("tokenizer.ggml.model", MetaValue::Str("llama".into()))])[..],
        )
        .unwrap();
        let e = tokenizer_json(&m).unwrap_err();
        assert!(
            e.contains("\"llama\"") && e.contains("tokenizer.json"),
            "{e}"
        );
        let m = read_metadata_from(
            &file(&[
                ("tokenizer.ggml.model", MetaValue::Str("gpt2".into())),
                ("tokenizer.ggml.pre", MetaValue::Str("mystery".into())),
            ])[..],
        )
        .unwrap();
        let e = tokenizer_json(&m).unwrap_err();
        assert!(e.contains("\"mystery\"") && e.contains("smollm"), "{e}");
    }
}
