//! Timing copies side by side: the trees, the contenders, the medians,
//! and the sweep of `COPY_THREADS` × `COPY_BATCH` behind `zinstall tune`.
//!
//! Every measurement runs zinstall and its peers in the same run,
//! interleaved, on the same source and filesystem, with an untimed warm-up
//! first; a time counts only if the destination it produced is verified
//! equal to the source. Results are medians with min and max, and ratios,
//! since the machines are shared and noisy. The `zinstall-bench` crate builds
//! its benchmarks from these pieces; nothing here depends on it.
//!
//! * [`trees`]: deterministic trees shaped like the ones zinstall copies.
//! * [`peers`]: the contenders (`zinstall copy`, `cp -a`, tar, rsync...).
//! * [`report`]: samples, medians and tables.
//! * [`sweep`]: timing contenders over a grid of tunables.
//! * [`tune`]: the sweep on the user's own tree, and its verdict.
//!
//! ```no_run
//! use zinstall_tune::trees::{self, Shape};
//! let stats = trees::generate(Shape::Usr, std::path::Path::new("/var/tmp/usr"), 0.1, false)?;
//! println!("{} entries", stats.entries());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// `zinstall tune` times copies of trees it makes itself in its own
// scratch directory, and reads back the statemaps it wrote there: no
// file of anyone else's is read.
#![allow(clippy::disallowed_methods)]
#![deny(missing_docs)]
// System calls only in `zinstall-sys`, re-exported by `sys`.
#![forbid(unsafe_code)]

pub mod peers;
pub mod report;
pub mod rng;
pub mod sweep;
mod sys;
pub mod trees;
pub mod tune;
