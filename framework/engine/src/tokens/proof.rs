//! The load-time proof that lets synthesis skip the tokenizer at run time.
//!
//! Synthetic text is a concatenation of table words, each a space followed by 2 to
//! 12 lowercase ASCII letters (`" alpha beta gamma"`). Its full encoding has exactly
//! one token per word when
//!
//! 1. **no added token can match** inside such text (an added token is split out
//!    before anything else runs): every added token holds a character other than an
//!    ASCII letter, a space, `Ġ` or `▁`;
//! 2. **the normalizer leaves it unchanged**: none, or Unicode normalization forms
//!    and lowercasing, which are the identity on lowercase ASCII and spaces;
//! 3. **the pre-tokenizer splits it exactly before each space**, so that each word
//!    reaches the model alone. This holds for the byte-level pre-tokenizer with the
//!    GPT-2 pattern and for `Split` steps with the GPT-2, Llama 3, Qwen 2 and DeepSeek
//!    patterns (listed in [`KNOWN_SPLITS`]) followed by a regex-free byte-level step.
//!    In each, matching starts at a space; the alternatives before the letter-run
//!    alternative need an apostrophe, a digit, a CJK character, punctuation or a
//!    line break, none of which occur; the letter-run alternative (` ?\p{L}+` or
//!    `[^\r\n\p{L}\p{N}]?\p{L}+`) takes the space and the whole run of letters and
//!    stops at the next space. Digit and CJK patterns match nothing and leave the
//!    text whole. The byte-level step maps bytes to characters one to one
//!    (`' '` to `Ġ`) without splitting, and adds no prefix space to text that
//!    starts with one;
//! 4. **the model turns each split into its one token**: a BPE model without
//!    dropout encodes each split on its own, and each word was checked at load to
//!    encode alone to exactly its own id.
//!
//! Conditions 1, 2 and 4 are read from the tokenizer; 3 is recognised by the exact
//! pre-tokenizer configuration, since a regex's behaviour is not decidable from a
//! sample. After the structural proof, `confirm` compares the claim against the
//! full encoding of every word in a shuffled run and of many random short runs, so
//! a mistake in this reasoning shows up as a refused proof, not as inexact prompts.

use serde_json::Value;

/// `Split` patterns whose splitting of space-joined lowercase words is one split
/// per word (see the module docs), as tokenizer.json files and llama.cpp spell them.
pub const KNOWN_SPLITS: &[&str] = &[
    // GPT-2 (also the byte-level pre-tokenizer's built-in pattern); llama.cpp
    // drops the trailing `|\s+`.
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    // Llama 3.
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // Qwen 2 and 3.
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    // DeepSeek V3 and R1: digits, CJK runs, then words and punctuation.
    r"\p{N}{1,3}",
    "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    // Isolated digits (llama.cpp's SmolLM and StarCoder, before GPT-2's pattern).
    r"\p{N}",
];

/// Whether the structure of `tok` proves one token per word (conditions 1 to 3 of
/// the module docs, and the BPE part of 4; the per-word part is the word table's).
pub(crate) fn structure_proves(tok: &tokenizers::Tokenizer) -> bool {
    let bpe = matches!(tok.get_model(), tokenizers::ModelWrapper::BPE(b) if b.dropout.is_none());
    bpe && added_tokens_inert(tok)
        && normalizer_is_identity(tok.get_normalizer().map(serde_json::to_value))
        && pre_tokenizer_splits_words(tok.get_pre_tokenizer().map(serde_json::to_value))
}

/// Whether no added token can match inside text of spaces and ASCII letters (or
/// their byte-level and Metaspace stand-ins).
pub(crate) fn added_tokens_inert(tok: &tokenizers::Tokenizer) -> bool {
    let inert = |c: char| c.is_ascii_alphabetic() || matches!(c, ' ' | 'Ġ' | '▁');
    tok.get_added_tokens_decoder()
        .values()
        .all(|t| t.content.chars().any(|c| !inert(c)))
}

fn normalizer_is_identity(n: Option<Result<Value, serde_json::Error>>) -> bool {
    fn identity(v: &Value) -> bool {
        match v["type"].as_str() {
            Some("NFC" | "NFD" | "NFKC" | "NFKD" | "Lowercase") => true,
            Some("Sequence") => v["normalizers"]
                .as_array()
                .is_some_and(|a| a.iter().all(identity)),
            _ => false,
        }
    }
    match n {
        None => true,
        Some(Ok(v)) => identity(&v),
        Some(Err(_)) => false,
    }
}

fn pre_tokenizer_splits_words(p: Option<Result<Value, serde_json::Error>>) -> bool {
    let Some(Ok(v)) = p else { return false };
    let byte_level = |v: &Value, regex: bool| {
        v["type"] == "ByteLevel" && v["use_regex"].as_bool() == Some(regex)
    };
    let known_split = |v: &Value| {
        v["type"] == "Split"
            && v["behavior"] == "Isolated"
            && v["invert"] == false
            && v["pattern"]["Regex"]
                .as_str()
                .is_some_and(|r| KNOWN_SPLITS.contains(&r))
    };
    if byte_level(&v, true) {
        return true;
    }
    let Some(steps) = v["pretokenizers"]
        .as_array()
        .filter(|_| v["type"] == "Sequence")
    else {
        return false;
    };
    // Known splits, one of which splits words, then a regex-free byte-level step.
    match steps.split_last() {
        Some((last, splits)) if byte_level(last, false) && !splits.is_empty() => {
            splits.iter().all(known_split)
        }
        _ => false,
    }
}

/// The runs the proof is checked against: the whole table shuffled, then random
/// runs of 1 to 64 words.
pub(super) fn confirm(words: &super::WordTable, encode: &dyn Fn(&str) -> Option<Vec<u32>>) -> bool {
    let (order, mut rng) = super::shuffled(words.len());
    let agrees = |picked: &[usize]| {
        let text: String = picked.iter().map(|&i| words.word(i)).collect();
        let want: Vec<u32> = picked.iter().map(|&i| words.ids[i]).collect();
        encode(&text).is_some_and(|got| got == want)
    };
    if !agrees(&order) {
        return false;
    }
    (0..512).all(|_| {
        let n = 1 + rng.below(64) as usize;
        let picked: Vec<usize> = (0..n)
            .map(|_| rng.below(words.len() as u64) as usize)
            .collect();
        agrees(&picked)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pre(v: Value) -> bool {
        pre_tokenizer_splits_words(Some(Ok(v)))
    }

    #[test]
    fn known_pre_tokenizers_are_recognised_and_others_are_not() {
        assert!(pre(json!({"type": "ByteLevel", "use_regex": true})));
        assert!(!pre(json!({"type": "ByteLevel", "use_regex": false})));
        let split = |r: &str| json!({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": false});
        let seq = |steps: Vec<Value>| json!({"type": "Sequence", "pretokenizers": steps});
        let bl = json!({"type": "ByteLevel", "use_regex": false});
        assert!(pre(seq(vec![split(KNOWN_SPLITS[2]), bl.clone()])));
        assert!(pre(seq(vec![
            split(r"\p{N}"),
            split(KNOWN_SPLITS[1]),
            bl.clone()
        ])));
        // An unknown pattern, a changed behaviour, no byte-level step, no split.
        assert!(!pre(seq(vec![split(r"\w+|\s"), bl.clone()])));
        let mut merged = split(KNOWN_SPLITS[2]);
        merged["behavior"] = json!("MergedWithPrevious");
        assert!(!pre(seq(vec![merged, bl.clone()])));
        assert!(!pre(seq(vec![split(KNOWN_SPLITS[2])])));
        assert!(!pre(seq(vec![bl])));
        assert!(!pre(json!({"type": "Metaspace"})));
        assert!(!pre_tokenizer_splits_words(None));
    }

    #[test]
    fn only_normalizers_that_keep_lowercase_ascii_are_identity() {
        let n = |v: Value| normalizer_is_identity(Some(Ok(v)));
        assert!(normalizer_is_identity(None));
        assert!(n(json!({"type": "NFC"})));
        assert!(n(json!({"type": "Sequence", "normalizers": []})));
        assert!(n(
            json!({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})
        ));
        assert!(!n(json!({"type": "Prepend", "prepend": "▁"})));
        assert!(!n(
            json!({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip"}]})
        ));
    }
}
