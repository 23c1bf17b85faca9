//! The zinstall brand hook, run by zoneadm as
//! `/usr/lib/brand/zinstall/brand -z ZONE -R ZONEPATH VERB ...`.

#![forbid(unsafe_code)]

use std::io::Write;

fn main() {
    // zoneadm reads every status: a panic (an abort is SIGABRT, 134 from
    // a shell) must still be one of its codes, and never 254, which
    // would have zoneadm clean a zonepath in an unknown state.
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(
            std::io::stderr(),
            "ERROR: zinstall: internal error: {info}"
        );
        zinstall::sys::exit_now(zinstall::hook::FATAL)
    }));
    // As Go's runtime and systemd do: a caller's low default (zoneadm's
    // 256 on illumos) must not bound how wide a tree can be copied. A
    // limit that cannot be raised is the one the budget is derived from.
    let _kept = zinstall_engine::descriptors::raise_limit();
    if let Err(e) = zinstall_engine::probes::register() {
        eprintln!("zinstall brand: USDT probes not registered: {e}");
    }
    // Arguments are OS strings: a zone path need not be UTF-8.
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    std::process::exit(i32::from(zinstall::hook::main(&args)));
}
