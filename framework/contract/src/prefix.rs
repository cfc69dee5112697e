//! What the engine's prefix-cache estimate reports for each request (the
//! estimate itself is the engine's `prefix` module): a request's prompt as
//! blocks of tokens, and how many of them a perfect prefix cache would have
//! held when it was sent.

/// The block size of the estimate unless a run gives one: vLLM's default.
pub const DEFAULT_BLOCK_TOKENS: u32 = 16;

/// What a perfect prefix cache would have given one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Shared by every request of the run.
    pub global: u64,
    /// On the request's data-parallel rank, when it has one (in a run of
    /// several models, on that rank's cache of the request's model).
    pub rank: Option<u64>,
    /// In a run of several models: on a perfect cache of the request's model
    /// alone (on its rank when it has one), as a server's prefix cache does
    /// not cross models or adapters.
    pub model: Option<u64>,
}
