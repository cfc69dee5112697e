//! A GGUF file's header and metadata, the tokenizer built from them and the
//! digest that names it: an error, never a panic or an allocation the file's
//! counts ask for blindly; and the digest reads exactly what the metadata
//! reader accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let meta = batchbench_engine::tokens::gguf::read_metadata_from(data);
    let digest = batchbench_engine::tokens::gguf::tokenizer_digest_from(data);
    assert_eq!(meta.is_ok(), digest.is_ok(), "{meta:?} {digest:?}");
    if let Ok(meta) = meta {
        let _ = batchbench_engine::tokens::gguf::tokenizer_json(&meta);
    }
});
