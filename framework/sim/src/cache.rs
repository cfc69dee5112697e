//! A prefix cache of hashed token blocks with LRU eviction.

use std::collections::{BTreeMap, HashMap};

/// One worker's prefix cache.
#[derive(Debug, Default)]
pub struct PrefixCache {
    block: usize,
    capacity_blocks: usize,
    tick: u64,
    last_used: HashMap<u64, u64>,
    by_age: BTreeMap<u64, u64>,
}

impl PrefixCache {
    /// A cache of `capacity_tokens` in blocks of `block` tokens.
    pub fn new(block: usize, capacity_tokens: u64) -> Self {
        let block = block.max(1);
        Self {
            block,
            capacity_blocks: (capacity_tokens / block as u64) as usize,
            ..Self::default()
        }
    }

    /// Looks up the prompt's full blocks, then stores them. Returns the cached
    /// prefix length in tokens.
    pub fn lookup_and_insert(&mut self, tokens: &[u32]) -> u64 {
        let mut hash: u64 = 0x84222325cbf29ce4;
        let mut hit = true;
        let mut cached = 0u64;
        for chunk in tokens.chunks_exact(self.block) {
            for &t in chunk {
                hash = batchbench_core::rng::mix64(hash ^ u64::from(t).wrapping_mul(0x100000001b3));
            }
            if hit && self.last_used.contains_key(&hash) {
                cached += self.block as u64;
            } else {
                hit = false;
            }
            self.touch(hash);
        }
        self.evict();
        cached
    }

    fn touch(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(old) = self.last_used.insert(hash, self.tick) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.tick, hash);
    }

    fn evict(&mut self) {
        while self.last_used.len() > self.capacity_blocks {
            let Some((_, hash)) = self.by_age.pop_first() else {
                break;
            };
            self.last_used.remove(&hash);
        }
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
    }
}
