//! Schedule: when requests go. The arrival times of an open loop
//! ([`arrivals`]), the pacer that sends at them to the sub-millisecond
//! ([`pacer`]), and the trajectories one shard of a sharded run owns
//! ([`shard`]). Pure arithmetic and timing, below everything that runs: the
//! metrics read a stage's rate from it, synthesis its threads' priority.

pub mod arrivals;
pub mod pacer;
pub mod shard;
