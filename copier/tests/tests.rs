//! The copier's integration tests, one binary: each module is one concern
//! (a feature, a kind of input, a limit), run against real files.

mod archive;
mod beneath;
mod cancel;
mod common;
mod descriptors;
mod engine;
mod excludes;
mod fidelity;
mod mount_points;
mod on_error;
mod pool;
mod source_fd;
mod statemap;
mod tar_quirks;
mod tar_reader;
mod walk_only;
mod walkers;
mod writeback;
