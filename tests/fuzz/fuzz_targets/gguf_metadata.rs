//! A GGUF file's header and metadata, and the tokenizer built from them: an
//! error, never a panic or an allocation the file's counts ask for blindly.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(meta) = batchbench_core::gguf::read_metadata_from(data) {
        let _ = batchbench_core::gguf::tokenizer_json(&meta);
    }
});
