//! A prefix cache of hashed token blocks with LRU eviction.

use batchbench_engine::synthesis::prefix::LruCache;

/// One worker's prefix cache: the prompt's full blocks of token ids, hashed in
/// a chain, in an LRU cache of block hashes (the one `analyze` uses).
#[derive(Debug)]
pub struct PrefixCache {
    block: usize,
    lru: LruCache,
}

impl PrefixCache {
    /// A cache of `capacity_tokens` in blocks of `block` tokens.
    pub fn new(block: usize, capacity_tokens: u64) -> Self {
        let block = block.max(1);
        Self {
            block,
            lru: LruCache::new((capacity_tokens / block as u64) as usize),
        }
    }

    /// Looks up the prompt's full blocks, then stores them. Returns the cached
    /// prefix length in tokens.
    #[cfg(test)]
    pub fn lookup_and_insert(&mut self, tokens: &[u32]) -> u64 {
        self.lookup_and_insert_for(tokens, 0)
    }

    /// [`PrefixCache::lookup_and_insert`] for the model (or LoRA adapter)
    /// `salt` names: blocks of another model's never match, as a server keys
    /// its cache blocks by adapter too.
    pub fn lookup_and_insert_for(&mut self, tokens: &[u32], salt: u64) -> u64 {
        let mut hash: u64 = 0x84222325cbf29ce4 ^ salt;
        let hashes: Vec<u64> = tokens
            .chunks_exact(self.block)
            .map(|chunk| {
                for &t in chunk {
                    hash = batchbench_contract::rng::mix64(
                        hash ^ u64::from(t).wrapping_mul(0x100000001b3),
                    );
                }
                hash
            })
            .collect();
        (self.lru.lookup_and_insert(&hashes) * self.block) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::PrefixCache;

    #[test]
    fn shared_prefixes_hit_and_lru_evicts() {
        let mut c = PrefixCache::new(4, 1000);
        let a: Vec<u32> = (0..10).collect();
        assert_eq!(c.lookup_and_insert(&a), 0);
        assert_eq!(c.lookup_and_insert(&a), 8); // two full blocks
        let mut b = a[..8].to_vec();
        b.extend([99, 98, 97, 96, 95]);
        assert_eq!(c.lookup_and_insert(&b), 8);
        let mut small = PrefixCache::new(4, 8);
        small.lookup_and_insert(&a);
        let other: Vec<u32> = (100..108).collect();
        small.lookup_and_insert(&other);
        assert_eq!(small.lookup_and_insert(&a), 0, "evicted");
        // Another model's blocks are its own.
        assert_eq!(c.lookup_and_insert_for(&a, 7), 0);
        assert_eq!(c.lookup_and_insert_for(&a, 7), 8);
    }
}
