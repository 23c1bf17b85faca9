//! The one place in the zinstall workspace that calls the system
//! unsafely.
//!
//! Every other crate is `#![forbid(unsafe_code)]` (the engine's USDT
//! probes aside, whose macros expand to `asm!`): a system call that Rust
//! cannot check, a buffer handed to the kernel, a descriptor taken from a
//! number, code run between `fork` and `exec`, is made here, behind a
//! small safe function. That gives one seam to audit: each `unsafe`
//! block below says, in the `// SAFETY:` comment above it, why it is
//! sound, and a review of this crate is a review of all of them. The
//! calls are plain `libc` ones (and `caps` for Linux capability sets);
//! their flags and retries are the callers' contract, so a change here is
//! a change of behaviour for the whole workspace.
//!
//! The crates that call in keep a `sys` module of their own, a safe
//! facade of re-exports, so that their call sites name
//! `crate::sys::...` as before.
//!
//! | module | what it holds |
//! |---|---|
//! | [`fs`] | files: the `*at` calls on a directory descriptor and a name ([`fs::at`]), `stat` values, `openat2`, `getdents64`, reflinks (`FICLONE`), `copy_file_range`, writeback, `syncfs`, xattrs, inode flags, device numbers |
//! | [`ident`] | credentials: the effective ids, user and group names, a connection's peer, a thread's filesystem identity for a run (`setfsuid`, `setgroups`, capabilities), a job's process made the caller for good |
//! | [`process`] | processes: descriptors handed to a child or taken at start, `close_range`, signals, the parent, `_exit`, `RLIMIT_*`, CPU time, `malloc_trim`, a command run inside a tree in namespaces of its own (`run_in_root`, Linux) |
//! | [`socket`] | a connection's socket: `poll`, systemd's listener and notices |
//! | [`host`] | this machine: its name, its kernel's release |
//! | [`support`] | calls only tests and benchmarks make |
//!
//! Each module that differs between platforms chooses its files once, in
//! its `mod.rs`: `linux.rs` for Linux, `illumos.rs` or `portable.rs` for
//! illumos and other Unix systems, the same signatures in each. What is
//! the same on every Unix (POSIX) sits in a file of its own; items that
//! several files use sit in leaves (`ffi.rs`, `fs/stat.rs`), never in the
//! module that re-exports them.

#![deny(clippy::undocumented_unsafe_blocks)]

mod ffi;
pub mod fs;
pub mod host;
pub mod ident;
pub mod process;
pub mod socket;
pub mod support;
#[cfg(test)]
mod tests;

pub use ffi::{check, cstr};
