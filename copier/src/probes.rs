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

/// Registers the probes with DTrace (illumos); a no-op elsewhere. A
/// failure only means the probes are not visible, so callers should log
/// it and go on.
pub fn register() -> Result<(), String> {
    #[cfg(feature = "usdt-probes")]
    return usdt::register_probes().map_err(|e| e.to_string());
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

/// The errno a probe reports for a result: 0, the system call's, or -1.
pub(crate) fn errno<T>(r: &crate::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}
