//! Benchmarks for zinstall: deterministic trees shaped like the ones it
//! copies, the peers it is measured against, and the harness that times
//! them side by side.
//!
//! Every measurement runs zinstall and its peers in the same run,
//! interleaved, on the same source and filesystem, with an untimed warm-up
//! first; a time counts only if the destination it produced is verified
//! equal to the source. Results are medians with min and max, and ratios,
//! since the machines are shared and noisy.

pub mod peers;
pub mod report;
pub mod rng;
pub mod sweep;
pub mod trees;
pub mod tune;
