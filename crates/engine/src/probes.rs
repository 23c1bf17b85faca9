//! USDT probes: the `zinstall` provider, defined in `dtrace/zinstall.d`.
//!
//! The build script compiles the provider into one macro per probe. A
//! probe's arguments are computed in a closure that runs only while a
//! tracer has the probe enabled, so a disabled probe costs a load and a
//! branch. On illumos the probes must be registered with the kernel
//! before DTrace can see them: binaries call [`register`] first. On Linux
//! they are SystemTap notes in the binary (`readelf -n`), which bpftrace
//! attaches to without registration.

#![allow(missing_docs)]
// The probe macros expand to the usdt crate's semaphore read and probe
// site (`asm!`), which are `unsafe`; they are expanded here alone, in the
// functions below, so the rest of the crate stays under
// `deny(unsafe_code)`.
#![allow(unsafe_code)]
// The macros take only a closure's text (`|| ...`), not a closure's name.
#![allow(clippy::redundant_closure)]

#[cfg(feature = "usdt-probes")]
include!(concat!(env!("OUT_DIR"), "/zinstall.rs"));

/// Built without the `usdt-probes` feature: every probe is nothing at
/// all (the argument closures are never called). Used to measure what
/// the probes cost when no tracer is attached.
#[cfg(not(feature = "usdt-probes"))]
pub(crate) mod zinstall {
    macro_rules! walk__start {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use walk__start;
    macro_rules! walk__done {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use walk__done;
    macro_rules! batch__dispatch {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use batch__dispatch;
    macro_rules! dir__start {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use dir__start;
    macro_rules! dir__done {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use dir__done;
    macro_rules! walker__idle {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use walker__idle;
    macro_rules! job__start {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use job__start;
    macro_rules! job__done {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use job__done;
    macro_rules! worker__idle {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use worker__idle;
    macro_rules! worker__busy {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use worker__busy;
    macro_rules! archive__entry__start {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use archive__entry__start;
    macro_rules! archive__entry__done {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use archive__entry__done;
    macro_rules! step__start {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use step__start;
    macro_rules! step__done {
        ($args:expr) => {{
            let _ = || $args;
        }};
    }
    pub(crate) use step__done;
}

/// Why the probes could not be registered: usdt's error.
#[cfg(feature = "usdt-probes")]
pub type RegisterError = usdt::Error;
/// Without the probes compiled in, registering cannot fail.
#[cfg(not(feature = "usdt-probes"))]
pub type RegisterError = std::convert::Infallible;

/// Registers the probes with DTrace (illumos); a no-op elsewhere. A
/// failure only means the probes are not visible, so callers should log
/// it and go on.
pub fn register() -> Result<(), RegisterError> {
    #[cfg(feature = "usdt-probes")]
    return usdt::register_probes();
    #[cfg(not(feature = "usdt-probes"))]
    Ok(())
}

/// `step-start`: an install step begins.
pub fn step_start(zone: &str, step: &str) {
    zinstall::step__start!(|| (zone, step));
}

/// `step-done`: an install step ended after `ns` nanoseconds.
pub fn step_done(zone: &str, step: &str, ns: u64, failed: bool) {
    zinstall::step__done!(|| (zone, step, ns, i32::from(failed)));
}

// The engine's probes, one function each. Each takes a closure for its
// arguments, called only while a tracer has the probe enabled. Inlined,
// so that each stays one probe site in its caller as the macro was.

#[inline(always)]
pub(crate) fn walk_start<S: AsRef<str>, D: AsRef<str>>(
    args: impl FnOnce() -> (S, D),
) {
    zinstall::walk__start!(|| args());
}

#[inline(always)]
pub(crate) fn walk_done(args: impl FnOnce() -> (u64, u64, u64)) {
    zinstall::walk__done!(|| args());
}

#[inline(always)]
pub(crate) fn batch_dispatch(args: impl FnOnce() -> (u32, u64, u64)) {
    zinstall::batch__dispatch!(|| args());
}

#[inline(always)]
pub(crate) fn dir_start<S: AsRef<str>>(args: impl FnOnce() -> (u32, S)) {
    zinstall::dir__start!(|| args());
}

#[inline(always)]
pub(crate) fn dir_done<S: AsRef<str>>(
    args: impl FnOnce() -> (u32, S, u64, i32),
) {
    zinstall::dir__done!(|| args());
}

#[inline(always)]
pub(crate) fn walker_idle(walker: u32) {
    zinstall::walker__idle!(|| walker);
}

#[inline(always)]
pub(crate) fn job_start<K: AsRef<str>, S: AsRef<str>>(
    args: impl FnOnce() -> (u32, K, S),
) {
    zinstall::job__start!(|| args());
}

#[inline(always)]
pub(crate) fn job_done<K: AsRef<str>, S: AsRef<str>>(
    args: impl FnOnce() -> (u32, K, S, u64, i32),
) {
    zinstall::job__done!(|| args());
}

#[inline(always)]
pub(crate) fn worker_idle(worker: u32) {
    zinstall::worker__idle!(|| worker);
}

#[inline(always)]
pub(crate) fn worker_busy(args: impl FnOnce() -> (u32, u64, u64)) {
    zinstall::worker__busy!(|| args());
}

#[inline(always)]
pub(crate) fn archive_entry_start<A: AsRef<str>, E: AsRef<str>>(
    args: impl FnOnce() -> (A, E),
) {
    zinstall::archive__entry__start!(|| args());
}

#[inline(always)]
pub(crate) fn archive_entry_done<A: AsRef<str>, E: AsRef<str>>(
    args: impl FnOnce() -> (A, E, u64, i32),
) {
    zinstall::archive__entry__done!(|| args());
}

/// The errno a probe reports for a result: 0, the system call's, or -1.
pub(crate) fn errno<T>(r: &crate::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}
