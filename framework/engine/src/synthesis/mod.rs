//! Synthesis: what a request's content is made of. Exact-length prompts made
//! ready off the async threads (`synth`), structured (schema version 2)
//! content blocks ([`blocks`]), synthetic images ([`images`]), and the prefix
//! caching a plan allows ([`prefix`]). Audio clips are the engine's
//! [`audio`](crate::audio) module, which the run's options hold.

pub mod blocks;
pub mod images;
pub mod prefix;
pub(crate) mod synth;
