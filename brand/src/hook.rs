//! The zoneadm brand hook: `brand -z ZONE -R ZONEPATH VERB [ARGS...]`.
//!
//! zoneadm, zoneadmd and zonecfg run it (through config.xml) for each
//! hook. Arguments arrive re-split by `/bin/sh`, so no argument holds a
//! space. Exit statuses follow `ZONE_SUBPROC_*`: 0 success, 253 bad usage,
//! 254 did not complete (nothing to recover: zoneadm cleans up and the
//! install can be retried), 255 failed (recovery needed). 1, what a Rust
//! `main` returning an error gives, is never used: zoneadm would read it
//! as fatal without saying so.
//!
//! | verb | what it does |
//! |---|---|
//! | `install [-x nodataset] [IMAGE...]` | lays out `ZONEPATH/root` from the profile (see `install`) |
//! | `uninstall [-F]` | removes the root without following symlinks |
//! | `verify_cfg XMLFILE` | checks the zone's configuration: exclusive IP, our brand |
//! | `verify_adm SUBCMD ...` | 0; zoneadm asks before nearly every subcommand |
//! | `query QUERY` | `datasets`: none (prints nothing); unknown: nothing |
//! | `prestatechange`/`poststatechange STATE CMD [ALTROOT]` | checks the numbers, logs |
//! | `sysboot` | nothing to do at system boot |
//! | `attach`, `detach`, `clone` | not supported: 254, nothing changed |

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::install::{self, Install, Profile, profile};
use crate::settings::TunableArgs;

/// `ZONE_SUBPROC_OK`.
pub const OK: u8 = 0;
/// `ZONE_SUBPROC_USAGE`.
pub const USAGE: u8 = 253;
/// `ZONE_SUBPROC_NOTCOMPLETE`.
pub const NOTCOMPLETE: u8 = 254;
/// `ZONE_SUBPROC_FATAL`.
pub const FATAL: u8 = 255;

const USAGE_TEXT: &str = "\
usage: brand -z ZONE -R ZONEPATH install [-x nodataset] [IMAGE...]
       brand -z ZONE -R ZONEPATH uninstall [-F]
       brand -z ZONE -R ZONEPATH verify_adm SUBCOMMAND [ARG...]
       brand -z ZONE -R ZONEPATH query QUERY
       brand -z ZONE -R ZONEPATH prestatechange|poststatechange STATE CMD [ALTROOT]
       brand -z ZONE -R ZONEPATH sysboot|attach|detach|clone [ARG...]
       brand verify_cfg XMLFILE
environment: ZINSTALL_PROFILE (default /etc/zinstall/profile.toml),
             ZINSTALL_DEFAULTS (default /etc/default/zinstall)";

fn usage(why: &str) -> u8 {
    let mut e = std::io::stderr();
    let _ = writeln!(e, "zinstall brand: {why}\n{USAGE_TEXT}");
    USAGE
}

fn fail(msg: impl std::fmt::Display) {
    let _ = writeln!(
        std::io::stderr(),
        "ERROR: zinstall: {}",
        crate::output::escape(&msg.to_string())
    );
}

/// Runs the hook with `args` (without the program name); returns the
/// exit status.
pub fn main(args: &[String]) -> u8 {
    let mut zone: Option<String> = None;
    let mut zonepath: Option<PathBuf> = None;
    let mut i = 0;
    // Global options stop at the first word that is not one (the verb).
    while i < args.len() {
        match args[i].as_str() {
            "-z" | "-R" if i + 1 >= args.len() => {
                return usage(&format!("{} needs a value", args[i]));
            }
            "-z" => zone = Some(args[i + 1].clone()),
            "-R" => zonepath = Some(PathBuf::from(&args[i + 1])),
            _ => break,
        }
        i += 2;
    }
    let Some(verb) = args.get(i) else {
        return usage("no subcommand");
    };
    let rest = &args[i + 1..];
    if verb == "verify_cfg" {
        return match rest {
            [xml] => verify_cfg(Path::new(xml)),
            _ => usage("verify_cfg takes one XML file"),
        };
    }
    let (Some(zone), Some(zonepath)) = (zone, zonepath) else {
        return usage(&format!("{verb} needs -z ZONE and -R ZONEPATH"));
    };
    match verb.as_str() {
        "install" => cmd_install(&zone, &zonepath, rest, args),
        "uninstall" => match rest {
            [] => cmd_uninstall(&zonepath, false, args),
            [f] if f == "-F" => cmd_uninstall(&zonepath, true, args),
            _ => usage("uninstall takes only -F"),
        },
        // zoneadm asks before nearly every subcommand; saying no to one
        // we do not know would break it.
        "verify_adm" => OK,
        "query" => match rest {
            // No datasets are delegated implicitly: print nothing, which
            // zoneadmd reads as an empty list.
            [_] => OK,
            _ => usage("query takes one query"),
        },
        "prestatechange" | "poststatechange" => statechange(rest),
        "sysboot" => OK,
        "attach" | "detach" | "clone" => {
            fail(format!(
                "{verb} is not supported by the zinstall brand; install the \
                 zone instead (nothing was changed)"
            ));
            NOTCOMPLETE
        }
        other => usage(&format!("unknown subcommand {other:?}")),
    }
}

/// `STATE CMD [ALTROOT]`: states 2 to 7, commands ready (0), boot (1) or
/// halt (4), the only ones zoneadmd passes.
fn statechange(rest: &[String]) -> u8 {
    let (state, cmd) = match rest {
        [s, c] | [s, c, _] => (s.parse::<u32>(), c.parse::<u32>()),
        _ => return usage("statechange takes STATE CMD [ALTROOT]"),
    };
    match (state, cmd) {
        (Ok(2..=7), Ok(0 | 1 | 4)) => OK,
        _ => usage(&format!("bad state or command: {rest:?}")),
    }
}

fn profile_path() -> PathBuf {
    std::env::var_os("ZINSTALL_PROFILE")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(profile::DEFAULT_PATH), PathBuf::from)
}

fn cmd_install(
    zone: &str,
    zonepath: &Path,
    rest: &[String],
    argv: &[String],
) -> u8 {
    let mut images = Vec::new();
    let mut j = 0;
    while j < rest.len() {
        match rest[j].as_str() {
            "-?" => return usage("help"),
            // zoneadm passes -x through; there is no dataset to skip here.
            "-x" if j + 1 < rest.len() => j += 1,
            s if s.starts_with('-') => {
                return usage(&format!("unknown install option {s}"));
            }
            s => images.push(PathBuf::from(s)),
        }
        j += 1;
    }
    if !zonepath.is_dir() {
        fail(format!(
            "zonepath {} does not exist (zoneadm makes it before install)",
            zonepath.display()
        ));
        return NOTCOMPLETE;
    }
    let profile = match Profile::load(&profile_path()) {
        Ok(p) => p,
        Err(e) => {
            fail(e);
            return NOTCOMPLETE;
        }
    };
    let tunables = match TunableArgs::default().resolve() {
        Ok(t) => t,
        Err(e) => {
            fail(e);
            return NOTCOMPLETE;
        }
    };
    let (log, warning) = install::log::open(&profile.log, argv);
    if let Some(w) = warning {
        println!("INFO: zinstall: note: {w}");
    }
    let mut say = |line: &str| println!("{}", crate::output::escape(line));
    let mut job = Install {
        zone: zone.to_string(),
        zonepath: zonepath.to_path_buf(),
        profile,
        images,
        tunables,
        log,
        say: &mut say,
    };
    match job.run() {
        Ok(_) => OK,
        Err(e) => {
            fail(&e);
            e.zoneadm_status()
        }
    }
}

fn cmd_uninstall(zonepath: &Path, force: bool, argv: &[String]) -> u8 {
    let log_path = Profile::load(&profile_path())
        .map(|p| p.log)
        .unwrap_or_else(|_| "/var/log/zinstall.log".into());
    let (log, _) = install::log::open(&log_path, argv);
    let mut say = |line: &str| println!("{}", crate::output::escape(line));
    match install::uninstall(zonepath, force, &log, &mut say) {
        Ok(()) => OK,
        Err(e) => {
            fail(&e);
            e.zoneadm_status()
        }
    }
}

/// Checks the configuration zonecfg hands over: the zone must be of
/// this brand and have an exclusive IP stack (the brand's platform gives
/// it its own network devices only).
fn verify_cfg(xml: &Path) -> u8 {
    let text = match std::fs::read_to_string(xml) {
        Ok(t) => t,
        Err(e) => {
            fail(format!("verify_cfg: read {}: {e}", xml.display()));
            return FATAL;
        }
    };
    match check_config(&text) {
        Ok(()) => OK,
        Err(why) => {
            fail(format!("verify_cfg {}: {why}", xml.display()));
            FATAL
        }
    }
}

/// The checks of `verify_cfg` on a configuration document.
pub fn check_config(text: &str) -> Result<(), String> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(text, opts)
        .map_err(|e| format!("not valid XML: {e}"))?;
    let zone = doc.root_element();
    if zone.tag_name().name() != "zone" {
        return Err(format!(
            "root element is <{}>, not <zone>",
            zone.tag_name().name()
        ));
    }
    match zone.attribute("brand") {
        Some("zinstall") | None => {}
        Some(other) => {
            return Err(format!("brand is {other:?}, not \"zinstall\""));
        }
    }
    match zone.attribute("ip-type") {
        Some("exclusive") => {}
        Some(other) => {
            return Err(format!(
                "ip-type is {other:?}: the zinstall brand needs ip-type=exclusive \
                 (set it with zonecfg: set ip-type=exclusive)"
            ));
        }
        None => return Err(
            "ip-type is not set: the zinstall brand needs ip-type=exclusive"
                .into(),
        ),
    }
    for net in zone.children().filter(|n| n.has_tag_name("network")) {
        if net.attribute("physical").is_none_or(str::is_empty) {
            return Err("a net resource has no physical link (exclusive-IP zones need one)".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn config_checks() {
        let ok = r#"<?xml version="1.0"?><!DOCTYPE zone PUBLIC "-//Sun Microsystems Inc//DTD Zones//EN" "file:///usr/share/lib/xml/dtd/zonecfg.dtd.1">
<zone name="z1" zonepath="/zones/z1" brand="zinstall" ip-type="exclusive"><network physical="z1net0"/></zone>"#;
        check_config(ok).unwrap();
        let shared = ok.replace("exclusive", "shared");
        assert!(
            check_config(&shared)
                .unwrap_err()
                .contains("ip-type=exclusive")
        );
        let other = ok.replace("brand=\"zinstall\"", "brand=\"sparse\"");
        assert!(check_config(&other).unwrap_err().contains("sparse"));
        let nolink = ok.replace(" physical=\"z1net0\"", "");
        assert!(check_config(&nolink).is_err());
        assert!(check_config("<zone").is_err());
    }

    #[test]
    fn verbs_and_exit_codes() {
        let a = |v: &[&str]| {
            main(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "verify_adm", "boot"]), OK);
        assert_eq!(
            a(&["-z", "z", "-R", "/zones/z", "verify_adm", "whatever", "x"]),
            OK
        );
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "query", "datasets"]), OK);
        assert_eq!(
            a(&["-z", "z", "-R", "/zones/z", "prestatechange", "2", "0"]),
            OK
        );
        assert_eq!(
            a(&[
                "-z",
                "z",
                "-R",
                "/zones/z",
                "poststatechange",
                "4",
                "4",
                "/a"
            ]),
            OK
        );
        assert_eq!(
            a(&["-z", "z", "-R", "/zones/z", "prestatechange", "9", "0"]),
            USAGE
        );
        assert_eq!(
            a(&["-z", "z", "-R", "/zones/z", "prestatechange", "2", "2"]),
            USAGE
        );
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "sysboot"]), OK);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "attach"]), NOTCOMPLETE);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "frobnicate"]), USAGE);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "uninstall", "-x"]), USAGE);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "install", "-?"]), USAGE);
        assert_eq!(a(&["install"]), USAGE);
        assert_eq!(a(&[]), USAGE);
        assert_eq!(a(&["verify_cfg"]), USAGE);
    }
}
