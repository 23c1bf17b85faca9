//! zinstall(8) with its command pages (zinstall-copy(8) ...) and the
//! command line agree: every flag of every `zinstall`
//! subcommand (as clap defines it, so as `--help` prints it) is in the
//! page's SYNOPSIS and in its OPTIONS, under that subcommand, and the
//! page names no flag the command does not take.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::CommandFactory;

type Flags = BTreeMap<String, BTreeSet<String>>;

/// Each visible subcommand's flags (`--long` and `-s`), those of its own
/// subcommands included (`cache list`, `cache gc`); help and version
/// are clap's and left out.
fn clap_flags() -> Flags {
    fn collect(
        cmd: &clap::Command,
        global: &BTreeSet<String>,
        out: &mut BTreeSet<String>,
    ) {
        for arg in cmd.get_arguments() {
            // zinstall's own global flags are documented once, under
            // "global".
            if arg.is_hide_set()
                || global.contains(arg.get_id().as_str())
                || ["help", "version"].contains(&arg.get_id().as_str())
            {
                continue;
            }
            if let Some(long) = arg.get_long() {
                out.insert(format!("--{long}"));
            }
            if let Some(short) = arg.get_short() {
                out.insert(format!("-{short}"));
            }
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            collect(sub, global, out);
        }
    }
    let mut cli = zinstall::cli::Cli::command();
    cli.build();
    let global_ids: BTreeSet<String> = cli
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| a.get_id().to_string())
        .collect();
    let mut all: Flags = cli
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| {
            let mut flags = BTreeSet::new();
            collect(s, &global_ids, &mut flags);
            (s.get_name().to_string(), flags)
        })
        .collect();
    // The top level's own flags (`--daemon`, also taken after the
    // commands it applies to) are documented once, under Global options.
    let global: BTreeSet<String> = cli
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| !["help", "version"].contains(l))
        .map(|l| format!("--{l}"))
        .collect();
    for flags in all.values_mut() {
        flags.retain(|f| !global.contains(f));
    }
    all.insert("global".into(), global);
    all
}

/// True for an mdoc macro name (`Fl`, `Ar`, `Op`, `Ns`...).
fn is_macro(word: &str) -> bool {
    let b = word.as_bytes();
    (2..=3).contains(&b.len())
        && b[0].is_ascii_uppercase()
        && b[1..].iter().all(u8::is_ascii_lowercase)
}

/// The flags the `Fl` macros of one mdoc line print: `Fl q | \-quiet`
/// is `-q` and `--quiet`; a bare `Fl \-` (the `--` before a command) is
/// no flag.
fn line_flags(line: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let mut in_fl = false;
    for word in line.trim_start_matches('.').split_whitespace() {
        if word == "Fl" {
            in_fl = true;
        } else if is_macro(word) {
            in_fl = false;
        } else if in_fl && !["|", ",", ".", ";", ":", "(", ")"].contains(&word)
        {
            let flag =
                format!("-{}", word.replace("\\-", "-").replace("\\&", ""));
            if flag != "--" && flag != "-" {
                flags.push(flag);
            }
        }
    }
    flags
}

/// From zinstall(8): each subcommand's flags in SYNOPSIS (a line `.Nm`
/// starts a form; its first `.Cm` names the subcommand, and flags before
/// it are global), and in OPTIONS (the `.It` lines under `.Ss zinstall
/// SUB`, and under `.Ss Global options`).
fn page_flags(page: &str) -> (Flags, Flags) {
    let mut synopsis = Flags::new();
    let mut options = Flags::new();
    let mut section = "";
    let mut sub: Option<String> = None;
    for line in page.lines() {
        if let Some(name) = line.strip_prefix(".Sh ") {
            section = match name {
                "SYNOPSIS" => "SYNOPSIS",
                "OPTIONS" => "OPTIONS",
                _ => "",
            };
            sub = None;
            continue;
        }
        match section {
            "SYNOPSIS" => {
                // A command's own page names the program, as
                // zinstall-copy(8) does: `.Nm zinstall`.
                if line == ".Nm" || line == ".Nm zinstall" {
                    sub = None;
                } else if let (None, Some(rest)) =
                    (&sub, line.strip_prefix(".Cm "))
                {
                    let name =
                        rest.split_whitespace().next().unwrap_or_default();
                    sub = Some(name.to_string());
                    synopsis.entry(name.to_string()).or_default();
                }
                match &sub {
                    Some(s) => {
                        synopsis.get_mut(s).unwrap().extend(line_flags(line))
                    }
                    None => synopsis
                        .entry("global".into())
                        .or_default()
                        .extend(line_flags(line)),
                }
            }
            "OPTIONS" => {
                if let Some(rest) = line.strip_prefix(".Ss ") {
                    sub = match rest {
                        "Global options" => Some("global".to_string()),
                        _ => rest.strip_prefix("zinstall ").map(str::to_string),
                    };
                    if let Some(s) = &sub {
                        options.entry(s.clone()).or_default();
                    }
                } else if let (Some(s), Some(item)) =
                    (&sub, line.strip_prefix(".It "))
                {
                    options.get_mut(s).unwrap().extend(line_flags(item));
                }
            }
            _ => {}
        }
    }
    (synopsis, options)
}

fn compare(where_: &str, cli: &Flags, page: &Flags, errors: &mut Vec<String>) {
    let none = BTreeSet::new();
    for (sub, flags) in cli {
        let Some(documented) = page.get(sub) else {
            errors.push(format!("{where_}: no zinstall {sub}"));
            continue;
        };
        for f in flags.difference(documented) {
            errors.push(format!("{where_}: zinstall {sub} {f} is missing"));
        }
    }
    for (sub, documented) in page {
        let flags = cli.get(sub).unwrap_or(&none);
        if !cli.contains_key(sub) {
            errors.push(format!(
                "{where_}: zinstall {sub}, which zinstall does not have"
            ));
        }
        for f in documented.difference(flags) {
            errors.push(format!(
                "{where_}: zinstall {sub} {f}, which zinstall does not take"
            ));
        }
    }
}

/// zinstall(8), the index, then each command's page (zinstall-copy(8)
/// ...) in name order, as one text: each begins with its own `.Sh`.
fn pages() -> String {
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../man");
    let mut names: Vec<String> = std::fs::read_dir(&man)
        .expect("read man/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("zinstall-") && n.ends_with(".8"))
        .collect();
    names.sort();
    names.insert(0, "zinstall.8".into());
    names
        .iter()
        .map(|n| {
            std::fs::read_to_string(man.join(n))
                .unwrap_or_else(|e| panic!("read man/{n}: {e}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The index names every command's page, and every page it names exists.
#[test]
fn the_index_names_each_command_page() {
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../man");
    let index = std::fs::read_to_string(man.join("zinstall.8"))
        .expect("read zinstall.8");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&man).expect("read man/") {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = n
            .strip_prefix("zinstall-")
            .and_then(|n| n.strip_suffix(".8"))
            && !index.contains(&format!(".It Xr zinstall-{stem} 8"))
        {
            missing.push(n);
        }
    }
    for l in index.lines() {
        if let Some(stem) = l
            .strip_prefix(".It Xr zinstall-")
            .and_then(|r| r.strip_suffix(" 8"))
            && !man.join(format!("zinstall-{stem}.8")).exists()
        {
            missing.push(format!("{stem} (named, no page)"));
        }
    }
    assert!(
        missing.is_empty(),
        "zinstall(8)'s command list and man/ differ: {missing:?}"
    );
}

#[test]
fn every_flag_is_in_synopsis_and_options_and_no_other() {
    let page = pages();
    let cli = clap_flags();
    assert!(
        cli.get("copy")
            .is_some_and(|f| f.contains("--merge") && f.contains("-q")),
        "the clap walk found no copy --merge or -q: {cli:?}"
    );
    assert!(
        cli.get("global").is_some_and(|f| f.contains("--daemon")),
        "the clap walk found no global --daemon: {cli:?}"
    );
    let (synopsis, options) = page_flags(&page);
    assert!(
        synopsis.get("copy").is_some_and(|f| f.contains("--quiet")),
        "the SYNOPSIS parse found no copy --quiet: {synopsis:?}"
    );
    let mut errors = Vec::new();
    compare("zinstall(8) pages' SYNOPSIS", &cli, &synopsis, &mut errors);
    compare("zinstall(8) pages' OPTIONS", &cli, &options, &mut errors);
    assert!(
        errors.is_empty(),
        "zinstall(8) and `zinstall SUB --help` disagree:\n  {}",
        errors.join("\n  ")
    );
}

#[test]
fn flags_are_read_from_mdoc_lines() {
    assert_eq!(line_flags(".Op Fl q | \\-quiet"), ["-q", "--quiet"]);
    assert_eq!(
        line_flags(".It Fl o Ar file , Fl \\-output Ar file"),
        ["-o", "--output"]
    );
    assert_eq!(
        line_flags(".Op Fl \\-qemu\\-img Op Ar path"),
        ["--qemu-img"]
    );
    assert_eq!(line_flags(".Fl \\- Ar command ..."), Vec::<String>::new());
    assert_eq!(
        line_flags(".Cm list | gc Op Fl \\-max\\-size Ar size"),
        ["--max-size"]
    );
}
