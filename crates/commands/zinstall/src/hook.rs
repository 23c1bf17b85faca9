//! The zoneadm brand hook: `brand -z ZONE -R ZONEPATH VERB [ARGS...]`.
//!
//! zoneadm, zoneadmd and zonecfg run it (through config.xml) for each
//! hook. Arguments arrive re-split by `/bin/sh`, so no argument holds a
//! space; they are OS strings, never assumed UTF-8. Exit statuses follow
//! `ZONE_SUBPROC_*`, each chosen by what zoneadm then does (zinstall(7)
//! has the table): 0 success; 253 bad usage; 254 only when zoneadm may
//! clean the zonepath (`cleanup_zonepath()` removes `ZONEPATH/root`)
//! because nothing in it is worth keeping; 255 for every other failure,
//! which leaves the zone incomplete and removes nothing. 1, what a Rust
//! `main` returning an error gives, is never used, and a panic exits 255
//! (see `bin/brand.rs`).
//!
//! | verb | what it does |
//! |---|---|
//! | `install [-x nodataset] [IMAGE...]` | lays out `ZONEPATH/root` from the profile (see `install`) |
//! | `uninstall [-F] [-x foreign]` | removes a root zinstall made (the marker says so), or one with nothing in it; `-x foreign` also one it did not make; `-F` is zoneadm's and means nothing more |
//! | `attach [ARG...]` | checks the root against the profile; adopts an unmarked root that matches; with `-u` or `-U`, updates it from the profile's trees |
//! | `verify_cfg XMLFILE` | checks the zone's configuration: exclusive IP, our brand |
//! | `verify_adm SUBCMD ...` | 0; zoneadm asks before nearly every subcommand |
//! | `query ...` | prints nothing, 0, whatever the query (no implicit datasets) |
//! | `prestatechange`/`poststatechange STATE CMD [ALTROOT]` | checks the numbers |
//! | `sysboot` | nothing to do at system boot |
//!
//! detach and clone are not hooks of this brand: zoneadm's built-in
//! detach (a manifest, files untouched) and clone (a ZFS clone of the
//! zonepath's dataset, or a copy of the zonepath) carry the zonepath's
//! marker along, which is all zinstall needs.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::settings::TunableArgs;
use zinstall_install::{self as install, Install, Profile, profile};

/// `ZONE_SUBPROC_OK`.
pub const OK: u8 = 0;
/// `ZONE_SUBPROC_USAGE`.
pub const USAGE: u8 = 253;
/// `ZONE_SUBPROC_NOTCOMPLETE`.
pub const NOTCOMPLETE: u8 = 254;
/// `ZONE_SUBPROC_FATAL`.
pub const FATAL: u8 = 255;

/// Deepest element nesting `verify_cfg` reads; zonecfg's documents are
/// four deep.
pub const MAX_XML_DEPTH: usize = 64;
/// Largest configuration `verify_cfg` reads.
pub const MAX_XML_BYTES: u64 = 16 << 20;

const USAGE_TEXT: &str = "\
usage: brand -z ZONE -R ZONEPATH install [-x nodataset] [IMAGE...]
       brand -z ZONE -R ZONEPATH uninstall [-F] [-x foreign]
       brand -z ZONE -R ZONEPATH attach [ARG...]
       brand -z ZONE -R ZONEPATH verify_adm SUBCOMMAND [ARG...]
       brand -z ZONE -R ZONEPATH query [ARG...]
       brand -z ZONE -R ZONEPATH prestatechange|poststatechange STATE CMD [ALTROOT]
       brand -z ZONE -R ZONEPATH sysboot
       brand verify_cfg XMLFILE
       brand --version
environment: ZINSTALL_PROFILE (default /etc/zinstall/profile.toml),
             ZINSTALL_DEFAULTS (default /etc/default/zinstall)";

fn usage(why: &str) -> u8 {
    let mut e = std::io::stderr();
    let _ = writeln!(
        e,
        "zinstall brand: {}\n{USAGE_TEXT}",
        crate::output::escape(why)
    );
    USAGE
}

/// `ERROR: zinstall: ` and the message's first line, as zoneadm shows a
/// brand's errors; its other lines (a parser's quoted line and caret)
/// follow as they are, each escaped.
fn fail(msg: impl std::fmt::Display) {
    let msg = msg.to_string();
    let mut lines = msg.split('\n');
    let mut e = std::io::stderr().lock();
    let first = crate::output::escape(lines.next().unwrap_or_default());
    let _ = writeln!(e, "ERROR: zinstall: {first}");
    for l in lines {
        let _ = writeln!(e, "{}", crate::output::escape(l));
    }
}

fn lossy(s: &OsStr) -> String {
    s.to_string_lossy().into_owned()
}

/// Runs the hook with `args` (without the program name); returns the
/// exit status.
pub fn main(args: &[OsString]) -> u8 {
    let mut zone: Option<OsString> = None;
    let mut zonepath: Option<PathBuf> = None;
    let mut i = 0;
    // Global options stop at the first word that is not one (the verb).
    while i < args.len() {
        let opt = args[i].to_str();
        match opt {
            Some("-z" | "-R") if i + 1 >= args.len() => {
                return usage(&format!("{} needs a value", lossy(&args[i])));
            }
            Some("-z") => zone = Some(args[i + 1].clone()),
            Some("-R") => zonepath = Some(PathBuf::from(&args[i + 1])),
            _ => break,
        }
        i += 2;
    }
    let Some(verb) = args.get(i) else {
        return usage("no subcommand");
    };
    let rest = &args[i + 1..];
    let Some(verb) = verb.to_str() else {
        return usage(&format!("unknown subcommand {:?}", lossy(verb)));
    };
    match verb {
        "verify_cfg" => {
            return match rest {
                [xml] => verify_cfg(Path::new(xml)),
                _ => usage("verify_cfg takes one XML file"),
            };
        }
        // zoneadmd asks `query datasets` when it makes the zone; the DTD
        // asks a brand to print nothing and succeed for a query it does
        // not know, whatever its arguments. No datasets are delegated
        // implicitly, and no zone or zonepath is needed to say so.
        "query" => return OK,
        "--version" if rest.is_empty() => {
            let mut out = std::io::stdout();
            return match writeln!(out, "zinstall brand {}", crate::cli::VERSION)
            {
                Ok(()) => OK,
                Err(_) => FATAL,
            };
        }
        _ => {}
    }
    let (Some(zone), Some(zonepath)) = (zone, zonepath) else {
        return usage(&format!("{verb} needs -z ZONE and -R ZONEPATH"));
    };
    let zone = lossy(&zone);
    let strs: Option<Vec<&str>> = rest.iter().map(|a| a.to_str()).collect();
    match verb {
        "install" => cmd_install(&zone, &zonepath, rest, args),
        "uninstall" => {
            let mut foreign = false;
            let mut j = 0;
            while j < rest.len() {
                match rest[j].to_str() {
                    // zoneadm's own: it asked, or was told not to ask.
                    Some("-F") => {}
                    Some("-x")
                        if rest.get(j + 1).is_some_and(|a| a == "foreign") =>
                    {
                        foreign = true;
                        j += 1;
                    }
                    _ => {
                        return usage(&format!(
                            "uninstall takes only -F and -x foreign, not {:?}",
                            lossy(&rest[j])
                        ));
                    }
                }
                j += 1;
            }
            cmd_uninstall(&zonepath, foreign, args)
        }
        "attach" => cmd_attach(&zonepath, rest, args),
        // zoneadm asks before nearly every subcommand; saying no to one
        // we do not know would break it.
        "verify_adm" => OK,
        "prestatechange" | "poststatechange" => match strs {
            Some(s) => statechange(&s),
            None => usage("statechange takes STATE CMD [ALTROOT]"),
        },
        "sysboot" => OK,
        "detach" | "clone" => usage(&format!(
            "{verb} is not a hook of the zinstall brand: zoneadm's built-in \
             {verb} applies (config.xml declares none)"
        )),
        other => usage(&format!("unknown subcommand {other:?}")),
    }
}

/// `STATE CMD [ALTROOT]`: states 2 to 7, commands ready (0), boot (1) or
/// halt (4), the only ones zoneadmd passes.
fn statechange(rest: &[&str]) -> u8 {
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

/// The structured log, as every install's ([`install::log::open`]): a
/// record that cannot be written (a full disk, `/dev/full`) is said once
/// and then dropped, so the log never decides the hook's exit status.
fn open_log(path: &Path, argv: &[OsString]) -> (slog::Logger, Option<String>) {
    let argv: Vec<String> = argv.iter().map(|a| lossy(a)).collect();
    install::log::open(path, &argv, |m| crate::output::note(m))
}

fn cmd_install(
    zone: &str,
    zonepath: &Path,
    rest: &[OsString],
    argv: &[OsString],
) -> u8 {
    let mut images = Vec::new();
    let mut j = 0;
    while j < rest.len() {
        let a = &rest[j];
        match a.to_str() {
            Some("-?") => return usage("help"),
            // zoneadm passes -x through; there is no dataset to skip here.
            Some("-x") if j + 1 < rest.len() => j += 1,
            _ if a.as_encoded_bytes().starts_with(b"-") => {
                return usage(&format!("unknown install option {}", lossy(a)));
            }
            _ => images.push(PathBuf::from(a)),
        }
        j += 1;
    }
    if !zonepath.is_dir() {
        fail(format!(
            "zonepath {} does not exist (zoneadm makes it before install)",
            zonepath.display()
        ));
        // Nothing there to clean: zoneadm's cleanup finds no zonepath.
        return NOTCOMPLETE;
    }
    let profile = match Profile::load(&profile_path()) {
        Ok(p) => p.for_zone_brand(),
        Err(e) => {
            fail(e);
            return before_root(zonepath);
        }
    };
    let tunables = match TunableArgs::default().resolve() {
        Ok(t) => t,
        Err(e) => {
            fail(e);
            return before_root(zonepath);
        }
    };
    // Images pulled for zoneadm are judged by the profile's trust policy,
    // else the system's, as `zinstall install` judges them.
    let trust = match zinstall_registry::policy::Trust::load(
        profile.policy.as_deref(),
        None,
    ) {
        Ok(t) => t.map(std::sync::Arc::new),
        Err(e) => {
            fail(e);
            return before_root(zonepath);
        }
    };
    let (log, warning) = open_log(&profile.log, argv);
    if let Some(w) = warning {
        println!("INFO: zinstall: note: {}", crate::output::escape(&w));
    }
    let mut show = |e: &install::Event| crate::output::event(e);
    let mut job = Install {
        zone: zone.to_string(),
        zonepath: zonepath.to_path_buf(),
        profile,
        images,
        tunables,
        log,
        events: &mut show,
        cancel: None,
        pool: None,
        listener: None,
        platform: None,
        // `-a REGISTRY/REPO:TAG`: pulled into the host's image cache.
        store: Some(zinstall_provision::store_of(Path::new(
            crate::cmd::provision::DEFAULT_CACHE,
        ))),
        pull: zinstall_registry::PullOptions {
            insecure: Vec::new(),
            events: Some(std::sync::Arc::new(
                |e: &zinstall_registry::Event| {
                    println!(
                        "INFO: zinstall: {}",
                        crate::output::escape(&e.to_string())
                    )
                },
            )),
            trust,
            ..Default::default()
        },
        progress: None,
        sync: true,
        objects: None,
    };
    match job.run() {
        Ok(_) => OK,
        Err(e) => {
            fail(&e);
            e.zoneadm_status()
        }
    }
}

/// The status of a failure before anything was looked at: 254 if the
/// zonepath holds nothing to keep, else 255 (with why).
fn before_root(zonepath: &Path) -> u8 {
    match install::disposable(zonepath) {
        Ok(()) => NOTCOMPLETE,
        Err(why) => {
            fail(format!(
                "{why}, so zoneadm is not told to clean the zonepath (nothing \
                 was changed)"
            ));
            FATAL
        }
    }
}

fn cmd_uninstall(zonepath: &Path, foreign: bool, argv: &[OsString]) -> u8 {
    let log_path = Profile::load(&profile_path())
        .map(|p| p.log)
        .unwrap_or_else(|_| profile::DEFAULT_LOG.into());
    let (log, _) = open_log(&log_path, argv);
    let mut show = |e: &install::Event| crate::output::event(e);
    match install::uninstall(zonepath, foreign, &log, &mut show) {
        Ok(()) => OK,
        Err(e) => {
            fail(&e);
            e.zoneadm_status()
        }
    }
}

/// `attach [-n MANIFEST] [-u | -U] [ARG...]`. zoneadm runs it without
/// `-F` (a forced attach skips the hook) and hands over the attach
/// command's own arguments as they were typed; a dry run (`-n`) passes
/// `-` as the zonepath and has no root to check. Any failure leaves the
/// zone configured and the root it had.
///
/// `-u` (update on attach, as the ipkg brand's `zoneadm attach -u` brings
/// a zone's software in line with the global zone's) and `-U` (which
/// ipkg uses to update everything; here the same, the profile's trees
/// being all a zone takes from the host) run an update
/// ([`zinstall_install::update`]) after the checks: only what changed
/// in the host's trees is written, the zone's own changes are kept and
/// named, and the root is switched whole.
fn cmd_attach(zonepath: &Path, rest: &[OsString], argv: &[OsString]) -> u8 {
    if zonepath == Path::new("-") || rest.iter().any(|a| a == "-n") {
        return OK;
    }
    let profile = match Profile::load(&profile_path()) {
        Ok(p) => p.for_zone_brand(),
        Err(e) => {
            fail(e);
            return FATAL;
        }
    };
    let (log, _) = open_log(&profile.log, argv);
    let mut show = |e: &install::Event| crate::output::event(e);
    let update = rest.iter().any(|a| a == "-u" || a == "-U");
    if let Err(e) = install::attach(zonepath, &profile, &log, &mut show) {
        fail(&e);
        return FATAL;
    }
    if !update {
        return OK;
    }
    slog::info!(log, "attach -u: update");
    let mut stage = |_: &str| {};
    let r = install::update::Update {
        zonepath: zonepath.to_path_buf(),
        profile,
        images: Vec::new(),
        source_root: None,
        force: false,
        dry_run: false,
        // zoneadm attaches only a zone that is not running.
        live: false,
        store: Some(zinstall_provision::store_of(std::path::Path::new(
            crate::cmd::provision::DEFAULT_CACHE,
        ))),
        pull: Default::default(),
        platform: None,
        tunables: zinstall_engine::Tunables::default(),
        stage: &mut stage,
        cancel: None,
    }
    .run();
    match r {
        Ok(r) => {
            let out = crate::output::out;
            if let Some(what) = r.recovered {
                out(format!("INFO: zinstall: {what}"));
            }
            for k in &r.kept {
                out(format!(
                    "INFO: zinstall: kept {}: {}",
                    crate::output::show(&k.path),
                    k.why
                ));
            }
            for k in &r.replaced {
                out(format!(
                    "INFO: zinstall: replaced {}: {}",
                    crate::output::show(&k.path),
                    k.why
                ));
            }
            out(format!(
                "INFO: zinstall: updated {}: {} added, {} removed, {} \
                 changed, {} kept, {} bytes written",
                crate::output::show(&zonepath.join("root")),
                r.added.len(),
                r.removed.len(),
                r.changed.len(),
                r.kept.len(),
                r.bytes
            ));
            OK
        }
        Err(e) => {
            slog::error!(log, "attach -u: update failed"; "error" => %e);
            fail(format!("attach -u: {e}"));
            FATAL
        }
    }
}

/// Checks the configuration zonecfg hands over: the zone must be of
/// this brand and have an exclusive IP stack (the brand's platform gives
/// it its own network devices only).
fn verify_cfg(xml: &Path) -> u8 {
    let kind = zinstall_core::foreign::Kind::Other {
        what: "a zone's configuration",
        cap: MAX_XML_BYTES,
    };
    let read = zinstall_core::foreign::read_to_string(
        xml,
        zinstall_core::foreign::Follow::Yes,
        kind,
    );
    let text = match read {
        Ok(t) => t,
        Err(e) => {
            fail(format!("verify_cfg: {e}"));
            return FATAL;
        }
    };
    if text.len() as u64 > MAX_XML_BYTES {
        fail(format!(
            "verify_cfg {}: larger than {MAX_XML_BYTES} bytes",
            xml.display()
        ));
        return FATAL;
    }
    match check_config(xml, &text) {
        Ok(()) => OK,
        Err(why) => {
            fail(format!("verify_cfg {why}"));
            FATAL
        }
    }
}

/// The checks of `verify_cfg` on `text`, the configuration document
/// `xml`; the error begins with the file's name (and, for XML that does
/// not parse, its line and column, then the line and a caret).
pub fn check_config(xml: &Path, text: &str) -> Result<(), String> {
    check_document(text).map_err(|(why, at)| match at {
        Some(p) => zinstall_engine::Syntax::at_line(
            xml,
            text,
            p.row as usize,
            p.col as usize,
            why,
        )
        .to_string(),
        None => format!("{}: {why}", xml.display()),
    })
}

/// The checks of `verify_cfg`: why the document is refused, and where
/// when its XML does not parse.
fn check_document(
    text: &str,
) -> Result<(), (String, Option<roxmltree::TextPos>)> {
    // Bounded before a parser recurses over it.
    let depth = nesting(text);
    if depth > MAX_XML_DEPTH {
        return Err((
            format!(
                "elements nested {depth} deep; a zone configuration is at \
                 most {MAX_XML_DEPTH}"
            ),
            None,
        ));
    }
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc =
        roxmltree::Document::parse_with_options(text, opts).map_err(|e| {
            // Its position is shown apart, with the line.
            let why = e.to_string();
            let why = why.rsplit_once(" at ").map_or(why.as_str(), |w| w.0);
            (format!("not valid XML: {why}"), Some(e.pos()))
        })?;
    check_zone(&doc).map_err(|why| (why, None))
}

/// The zone element's checks.
fn check_zone(doc: &roxmltree::Document<'_>) -> Result<(), String> {
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

/// How deep elements nest, by a scan that never recurses: `<name`
/// opens (unless it ends `/>`), `</` closes; declarations, comments,
/// processing instructions and CDATA open nothing. Quoted attribute
/// values are skipped. It may overcount on malformed text, which the
/// parser refuses anyway.
fn nesting(text: &str) -> usize {
    let b = text.as_bytes();
    let (mut depth, mut max, mut i) = (0usize, 0usize, 0usize);
    let skip_to = |from: usize, pat: &[u8]| -> usize {
        b[from..]
            .windows(pat.len())
            .position(|w| w == pat)
            .map_or(b.len(), |p| from + p + pat.len())
    };
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &b[i..];
        if rest.starts_with(b"<!--") {
            i = skip_to(i + 4, b"-->");
        } else if rest.starts_with(b"<![CDATA[") {
            i = skip_to(i + 9, b"]]>");
        } else if rest.starts_with(b"<?") {
            i = skip_to(i + 2, b"?>");
        } else if rest.starts_with(b"<!") {
            // A DOCTYPE's internal subset holds '>' of its own: count
            // brackets, not nesting.
            let mut j = i + 2;
            let mut brackets = 0i64;
            while j < b.len() {
                match b[j] {
                    b'[' => brackets += 1,
                    b']' => brackets -= 1,
                    b'>' if brackets <= 0 => break,
                    _ => {}
                }
                j += 1;
            }
            i = j + 1;
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            i = skip_to(i + 2, b">");
        } else {
            let mut j = i + 1;
            let mut quote: Option<u8> = None;
            while j < b.len() {
                match (quote, b[j]) {
                    (Some(q), c) if c == q => quote = None,
                    (Some(_), _) => {}
                    (None, b'"' | b'\'') => quote = Some(b[j]),
                    (None, b'>') => break,
                    _ => {}
                }
                j += 1;
            }
            if !(j > i + 1 && j < b.len() && b[j - 1] == b'/') {
                depth += 1;
                max = max.max(depth);
            }
            i = j + 1;
        }
    }
    max
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn config_checks() {
        let ok = r#"<?xml version="1.0"?><!DOCTYPE zone PUBLIC "-//Sun Microsystems Inc//DTD Zones//EN" "file:///usr/share/lib/xml/dtd/zonecfg.dtd.1">
<zone name="z1" zonepath="/zones/z1" brand="zinstall" ip-type="exclusive"><network physical="z1net0"/></zone>"#;
        let cfg = Path::new("z1.xml");
        check_config(cfg, ok).unwrap();
        let shared = ok.replace("exclusive", "shared");
        assert!(
            check_config(cfg, &shared)
                .unwrap_err()
                .contains("ip-type=exclusive")
        );
        let other = ok.replace("brand=\"zinstall\"", "brand=\"sparse\"");
        assert!(check_config(cfg, &other).unwrap_err().contains("sparse"));
        let nolink = ok.replace(" physical=\"z1net0\"", "");
        assert!(check_config(cfg, &nolink).is_err());
        assert!(check_config(cfg, "<zone").is_err());
        // Broken XML: where, with the line and a caret under the place.
        assert_eq!(
            check_config(cfg, "<zone name=\"a\">\n  <net></zone>\n")
                .unwrap_err(),
            "z1.xml:2:8: not valid XML: expected 'net' tag, not 'zone'\n  |\n\
             2 |   <net></zone>\n  |        ^"
        );
        let deep = format!("{}{}", "<a>".repeat(20_000), "</a>".repeat(20_000));
        assert!(check_config(cfg, &deep).unwrap_err().contains("nested"));
        assert_eq!(nesting(ok), 1);
        assert_eq!(nesting("<a x='>'><b/><!-- <c> --><![CDATA[<d>]]></a>"), 1);
    }

    #[test]
    fn verbs_and_exit_codes() {
        let a = |v: &[&str]| {
            main(&v.iter().map(OsString::from).collect::<Vec<_>>())
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
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "query"]), OK);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "query", "a", "b"]), OK);
        assert_eq!(a(&["query", "datasets"]), OK);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "detach"]), USAGE);
        assert_eq!(a(&["-z", "-", "-R", "-", "attach", "-n", "/m"]), OK);
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(b"z\xff".to_vec());
        let v = [
            OsString::from("-z"),
            odd.clone(),
            "-R".into(),
            odd.clone(),
            "query".into(),
            "datasets".into(),
        ];
        assert_eq!(main(&v), OK);
        let v = ["-z".into(), "z".into(), "-R".into(), "/z".into(), odd];
        assert_eq!(main(&v), USAGE);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "frobnicate"]), USAGE);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "uninstall", "-x"]), USAGE);
        assert_eq!(a(&["-z", "z", "-R", "/zones/z", "install", "-?"]), USAGE);
        assert_eq!(a(&["install"]), USAGE);
        assert_eq!(a(&[]), USAGE);
        assert_eq!(a(&["verify_cfg"]), USAGE);
    }
}
