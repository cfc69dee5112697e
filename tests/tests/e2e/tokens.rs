//! Exact-length synthesis with real byte-level BPE tokenizers.

use batchbench_core::rng;
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
    let e = batchbench_core::tokens::TokenizerHandle::load(&bad.display().to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot load tokenizer") && e.contains(&bad.display().to_string()),
        "{e}"
    );
    let e = batchbench_core::tokens::TokenizerHandle::load(
        &dir.path().join("nothing").display().to_string(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no such file"), "{e}");
}

#[test]
fn the_pre_tokenizer_check_agrees_with_full_encoding() {
    for name in TOKENIZERS {
        let tok = tokenizer(name);
        assert!(
            tok.fast_check(),
            "{name}: the pre-tokenizer check should be sound for byte-level BPE"
        );
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
