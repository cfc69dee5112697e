//! Exact-length synthesis with real byte-level BPE tokenizers.

use batchbench_contract::rng;
use batchbench_engine::tokens::{SynthesisPath, TokenizerHandle, cache};
use batchbench_tests::tokenizer;

const TOKENIZERS: [&str; 3] = ["qwen", "llama3.2", "deepseek"];

#[test]
fn text_reencodes_to_exactly_the_requested_count() {
    for name in TOKENIZERS {
        let tok = tokenizer(name);
        assert!(
            tok.word_count() >= 1000,
            "{name}: only {} words",
            tok.word_count()
        );
        for (i, n) in [1usize, 2, 7, 128, 257, 1000, 4096].into_iter().enumerate() {
            for seed in 0..3u64 {
                let key = rng::derive(seed, &[i as u64]);
                let text = tok
                    .exact_text(key, n, &|| format!("{name} n={n}"))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(tok.count(&text).unwrap_or(0), n, "{name} n={n}");
            }
        }
    }
}

#[test]
fn equal_keys_give_identical_bytes_and_longer_texts_extend_shorter_ones() {
    let tok = tokenizer("qwen");
    let ctx = || "test".to_owned();
    let a = tok.exact_text(42, 300, &ctx).unwrap_or_default();
    let b = tok.exact_text(42, 300, &ctx).unwrap_or_default();
    assert_eq!(a, b);
    let short = tok.exact_text(42, 100, &ctx).unwrap_or_default();
    assert!(a.starts_with(&short));
    assert_ne!(a, tok.exact_text(43, 300, &ctx).unwrap_or_default());
}

#[test]
fn shared_prefix_is_exact_in_tokens() {
    for name in TOKENIZERS {
        let tok = tokenizer(name);
        let ctx = || "prefix".to_owned();
        let shared = 77u64;
        let a = tok
            .exact_text_with_prefix(Some((shared, 40)), 1, 200, &ctx)
            .unwrap_or_default();
        let b = tok
            .exact_text_with_prefix(Some((shared, 40)), 2, 150, &ctx)
            .unwrap_or_default();
        let (ia, ib) = (
            tok.ids(&a).unwrap_or_default(),
            tok.ids(&b).unwrap_or_default(),
        );
        assert_eq!((ia.len(), ib.len()), (200, 150), "{name}");
        assert_eq!(ia[..40], ib[..40], "{name}: the first 40 tokens are shared");
        assert_ne!(ia[40..50], ib[40..50], "{name}: the rest differs");
    }
}

#[test]
fn inexact_text_is_an_error_naming_the_piece() {
    let tok = tokenizer("qwen");
    let e = tok
        .check("hello world", 5, &|| {
            "trajectory t-1, request 3, block 2".to_owned()
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("trajectory t-1, request 3, block 2") && e.contains("re-encodes to 2"),
        "{e}"
    );
}

#[test]
fn unreadable_tokenizer_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bad = dir.path().join("tokenizer.json");
    std::fs::write(&bad, "{ not a tokenizer").unwrap_or_else(|e| panic!("{e}"));
    let e = batchbench_engine::tokens::TokenizerHandle::load(&bad.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot load tokenizer") && e.contains(&bad.display().to_string()),
        "{e}"
    );
    let e = batchbench_engine::tokens::TokenizerHandle::load(
        &dir.path().join("nothing").display().to_string(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no such file"), "{e}");
}

#[test]
fn the_pre_tokenizer_check_agrees_with_full_encoding() {
    for name in TOKENIZERS {
        // The path a tokenizer outside the proof takes, on a real one.
        let path = batchbench_tests::tokenizer_path(name);
        let tok = TokenizerHandle::from_file_uncached(name, &path)
            .and_then(TokenizerHandle::without_proof)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tok.synthesis_path(), SynthesisPath::PreTokenized, "{name}");
        for seed in 0..20u64 {
            let mut text = String::new();
            tok.push_words(
                &mut rng::Stream::new(seed),
                50 + seed as usize * 37,
                &mut text,
            );
            assert_eq!(
                tok.count_synthetic(&text).ok(),
                tok.count(&text).ok(),
                "{name} seed {seed}"
            );
        }
        // Text that is not made of table words falls back to the full encoding.
        for text in [
            "Hello, world! 123",
            "  spaced   out  ",
            "<|endoftext|> the",
            "naïve café",
        ] {
            assert_eq!(
                tok.count_synthetic(text).ok(),
                tok.count(text).ok(),
                "{name}: {text:?}"
            );
        }
    }
}

#[test]
fn the_proof_holds_for_real_tokenizers_and_agrees_with_full_encoding() {
    for name in TOKENIZERS {
        let path = batchbench_tests::tokenizer_path(name);
        let proven =
            TokenizerHandle::from_file_uncached(name, &path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(proven.synthesis_path(), SynthesisPath::Proven, "{name}");
        let checked = TokenizerHandle::from_file_uncached(name, &path)
            .and_then(TokenizerHandle::without_proof)
            .unwrap_or_else(|e| panic!("{e}"));
        batchbench_tests::check_synthesis_property(name, &proven, &checked, 300);
    }
}

#[test]
fn a_pre_tokenizer_outside_the_proof_keeps_the_checked_path() {
    // Qwen's tokenizer with its split pattern changed (digits in pairs): the proof
    // does not know the pattern, so every piece is checked, and still exact.
    let files = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = files.path().join("tokenizer.json");
    let json =
        std::fs::read_to_string(batchbench_tests::tokenizer_path("qwen")).unwrap_or_default();
    let changed = json.replacen(r"|\\p{N}|", r"|\\p{N}{1,2}|", 1);
    assert_ne!(changed, json, "the pattern to change was not found");
    std::fs::write(&file, changed).unwrap_or_else(|e| panic!("{e}"));
    let tok =
        TokenizerHandle::from_file_uncached("changed", &file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.synthesis_path(), SynthesisPath::PreTokenized);
    let text = tok
        .exact_text(1, 900, &|| "changed".into())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(tok.count(&text).ok(), Some(900));
}

#[test]
fn the_proven_table_is_cached_by_digest_and_a_bad_entry_is_rebuilt() {
    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = files.path().join("tokenizer.json");
    std::fs::copy(batchbench_tests::tokenizer_path("qwen"), &file)
        .unwrap_or_else(|e| panic!("{e}"));
    let load = || {
        TokenizerHandle::from_file_with_cache("qwen", &file, cache.path())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let cold = load();
    assert!(!cold.table_from_cache() && cold.full_loaded());
    let key = cache::key(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        Some(&key),
        cache::file_digest(&file).ok().as_ref(),
        "a tokenizer.json is keyed by its file's digest"
    );
    let entry = cache::entry_path(cache.path(), &key);
    assert!(entry.is_file(), "{} was not written", entry.display());

    // Warm: the same table, without parsing the tokenizer, and the same text.
    let warm = load();
    assert!(warm.table_from_cache() && !warm.full_loaded());
    assert_eq!(
        warm.words().collect::<Vec<_>>(),
        cold.words().collect::<Vec<_>>()
    );
    let ctx = || "cache".to_owned();
    let text = warm.exact_text(3, 700, &ctx).unwrap_or_default();
    assert_eq!(text, cold.exact_text(3, 700, &ctx).unwrap_or_default());
    assert!(
        !warm.full_loaded(),
        "making a proven prompt parsed the tokenizer"
    );
    // Text that is not a run of table words gets no lookup answer.
    for other in [
        "",
        "hello",
        " Hello",
        "  the",
        " the,",
        " the\n",
        " abcdefghijklmnop",
    ] {
        assert_eq!(warm.proven_ids(other), None, "{other:?}");
    }
    // Something that needs the full tokenizer still gets it.
    assert_eq!(warm.count(&text).ok(), Some(700));

    // A damaged entry (a word changed, its digest not) is detected and rebuilt.
    let good = std::fs::read_to_string(&entry).unwrap_or_default();
    let (w0, _) = cold.words().next().unwrap_or_default();
    let damaged = good.replacen(&format!("\"{w0}\""), "\" zzzzzz\"", 1);
    assert_ne!(damaged, good);
    std::fs::write(&entry, damaged).unwrap_or_else(|e| panic!("{e}"));
    assert!(!load().table_from_cache(), "a damaged entry was used");
    assert_eq!(std::fs::read_to_string(&entry).unwrap_or_default(), good);
    // Garbage too.
    std::fs::write(&entry, "{ not json").unwrap_or_else(|e| panic!("{e}"));
    assert!(!load().table_from_cache());
    assert!(load().table_from_cache());

    // A changed tokenizer file has another digest: its own entry, built afresh.
    let mut json = std::fs::read_to_string(&file).unwrap_or_default();
    json.push('\n');
    std::fs::write(&file, json).unwrap_or_else(|e| panic!("{e}"));
    assert!(!load().table_from_cache());
    assert!(load().table_from_cache());
}

/// Writes a GGUF file (metadata only) holding the vocabulary and merges of a
/// tokenizer.json, the way llama.cpp's converter does, with `pre` as its
/// pre-tokenizer name. Test fixture code: a malformed input is a test bug.
#[allow(clippy::unwrap_used)]
fn gguf_from_tokenizer_json(json_path: &std::path::Path, pre: &str, out: &std::path::Path) {
    use batchbench_engine::tokens::gguf::{MetaValue, write_metadata};
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json_path).unwrap()).unwrap();
    let mut pieces: Vec<(u64, String, i64)> = doc["model"]["vocab"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (v.as_u64().unwrap(), k.clone(), 1))
        .collect();
    for t in doc["added_tokens"].as_array().unwrap() {
        let ty = if t["special"] == true { 3 } else { 4 };
        let id = t["id"].as_u64().unwrap();
        pieces.retain(|p| p.0 != id);
        pieces.push((id, t["content"].as_str().unwrap().to_owned(), ty));
    }
    pieces.sort();
    let n = pieces.last().unwrap().0 + 1;
    let mut tokens = Vec::with_capacity(n as usize);
    let mut types = Vec::with_capacity(n as usize);
    let mut next = pieces.into_iter().peekable();
    for id in 0..n {
        match next.next_if(|p| p.0 == id) {
            Some((_, s, ty)) => {
                tokens.push(MetaValue::Str(s));
                types.push(MetaValue::Int(ty));
            }
            None => {
                tokens.push(MetaValue::Str(format!("[PAD{id}]")));
                types.push(MetaValue::Int(5));
            }
        }
    }
    let merges: Vec<MetaValue> = doc["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            serde_json::Value::String(s) => MetaValue::Str(s.clone()),
            pair => MetaValue::Str(format!(
                "{} {}",
                pair[0].as_str().unwrap(),
                pair[1].as_str().unwrap()
            )),
        })
        .collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    write_metadata(
        &mut f,
        &[
            ("general.architecture", MetaValue::Str("test".into())),
            ("tokenizer.ggml.model", MetaValue::Str("gpt2".into())),
            ("tokenizer.ggml.pre", MetaValue::Str(pre.into())),
            ("tokenizer.ggml.tokens", MetaValue::Array(tokens)),
            ("tokenizer.ggml.token_type", MetaValue::Array(types)),
            ("tokenizer.ggml.merges", MetaValue::Array(merges)),
        ],
    )
    .unwrap();
    std::io::Write::flush(&mut f).unwrap();
}

#[test]
fn a_gguf_tokenizer_encodes_like_the_models_tokenizer_json() {
    // The pre-tokenizer patterns of llama.cpp's table (qwen2, llama-bpe) against the
    // tokenizer.json files the models ship: identical ids on text built to stress the
    // split rules (digits, contractions, whitespace runs, newlines, non-Latin scripts).
    let corpus = [
        "Hello, world! It's 2026: 12345 apples, 3.14159 pies, 1000000 tokens.",
        "  leading and   inner   spaces, trailing spaces   ",
        "line one\nline two\n\n\ttabbed\r\nwindows\n\n\n",
        "I'M SURE THEY'LL SAY WE'VE DONE WHAT YOU'D DO, DON'T YOU?",
        "naïve café déjà vu — “quotes” ‘single’ … ±§",
        "日本語のテキストと中文文本 and emoji 🚀🔥 Ünïcödé",
        "fn main() { println!(\"{}\", x + 1); } // code with    indentation",
        "<|im_start|>user\nhello<|im_end|> <|begin_of_text|>",
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, pre) in [("qwen", "qwen2"), ("llama3.2", "llama-bpe")] {
        let json = batchbench_tests::tokenizer_path(name);
        let gguf = dir.path().join(format!("{name}.gguf"));
        gguf_from_tokenizer_json(&json, pre, &gguf);
        let ours = batchbench_engine::tokens::TokenizerHandle::from_file(name, &gguf)
            .unwrap_or_else(|e| panic!("{e}"));
        let reference = tokenizer(name);
        let mut texts: Vec<String> = corpus.iter().map(|t| (*t).to_owned()).collect();
        texts.push(
            reference
                .exact_text(9, 500, &|| "corpus".into())
                .unwrap_or_default(),
        );
        for t in &texts {
            assert_eq!(
                ours.ids(t).unwrap(),
                reference.ids(t).unwrap(),
                "{name} ({pre}): {t:?}"
            );
        }
        // The synthesiser works on it exactly as on the tokenizer.json, on the
        // proven path.
        assert_eq!(
            ours.synthesis_path(),
            SynthesisPath::Proven,
            "{name} ({pre})"
        );
        let text = ours.exact_text(5, 300, &|| "gguf".into()).unwrap();
        assert_eq!(reference.count(&text).unwrap(), 300);
    }
}
