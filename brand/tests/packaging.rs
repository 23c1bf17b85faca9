//! The three ways zinstall is shipped name the same files: pkg/Makefile's
//! install layout (run here with the binaries this test was built with),
//! the IPS manifest pkg/zinstall.p5m, and the Debian package's assets in
//! brand/Cargo.toml. Where they differ on purpose, `DIFFERENCES` says so.
//! Also: `--version` names the commit, and the Makefile keeps edited
//! configuration.

#[path = "../../copier/tests/common/tools.rs"]
mod tools;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file whose place is not the same in all three. Columns: the path
/// pkg/Makefile installs it at (PREFIX=/usr), its path in the IPS
/// manifest, its path in the .deb (`None`: not shipped there), and why.
const DIFFERENCES: &[(&str, Option<&str>, Option<&str>, &str)] = &[
    (
        "usr/share/zinstall/dtrace/statemap.bt",
        None,
        Some("usr/share/zinstall/dtrace/statemap.bt"),
        "a bpftrace script: illumos has DTrace and statemap.d instead",
    ),
    (
        "etc/zinstall/profile-linux.toml",
        None,
        Some("etc/zinstall/profile-linux.toml"),
        "the profile of a Linux root, of no use on illumos",
    ),
    (
        "usr/lib/systemd/system/zinstalld.service",
        None,
        Some("usr/lib/systemd/system/zinstalld.service"),
        "a systemd unit: illumos runs the daemon under SMF",
    ),
    (
        "usr/lib/systemd/system/zinstalld.socket",
        None,
        Some("usr/lib/systemd/system/zinstalld.socket"),
        "a systemd unit: illumos runs the daemon under SMF",
    ),
    (
        "usr/share/zsh/site-functions/_zinstall",
        Some("usr/share/zsh/site-functions/_zinstall"),
        Some("usr/share/zsh/vendor-completions/_zinstall"),
        "Debian's zsh searches vendor-completions for packaged functions",
    ),
];

/// Files only the IPS manifest has, with why: pkg/Makefile installs them
/// only on illumos, and this test runs elsewhere.
const P5M_ONLY: &[(&str, &str)] = &[(
    "lib/svc/manifest/system/zinstalld.xml",
    "the SMF manifest, installed by pkg/Makefile where uname is SunOS",
)];

/// Files only the .deb has: Debian's own metadata, and the README.
const DEB_ONLY: &[&str] = &[
    "usr/share/doc/zinstall/README.md",
    "usr/share/lintian/overrides/zinstall",
];

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("brand/ has a parent")
        .to_path_buf()
}

/// Runs `make -C pkg TARGET DESTDIR=dest PREFIX=/usr` with the binaries
/// cargo built for this test.
fn make(target: &str, dest: &Path) -> std::process::Output {
    let zinstall = Path::new(env!("CARGO_BIN_EXE_zinstall"));
    let bin_dir = zinstall.parent().expect("binary in a directory");
    assert_eq!(
        Path::new(env!("CARGO_BIN_EXE_brand")).parent(),
        Some(bin_dir),
        "zinstall and brand are built into different directories"
    );
    let out = tools::tool("make")
        .arg("-C")
        .arg(top().join("pkg"))
        .arg(target)
        .arg(format!("DESTDIR={}", dest.display()))
        .arg("PREFIX=/usr")
        .arg(format!("BIN_DIR={}", bin_dir.display()))
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .output()
        .expect("run make");
    assert!(
        out.status.success(),
        "make {target} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every file and symlink under `root`, relative, with its mode.
fn walk(root: &Path) -> BTreeMap<String, u32> {
    fn go(root: &Path, dir: &Path, out: &mut BTreeMap<String, u32>) {
        for e in fs::read_dir(dir).expect("read_dir") {
            let e = e.expect("dir entry");
            let meta = fs::symlink_metadata(e.path()).expect("lstat");
            if meta.is_dir() {
                go(root, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
                let rel = rel.to_str().expect("UTF-8 path").to_string();
                out.insert(rel, meta.permissions().mode() & 0o7777);
            }
        }
    }
    let mut out = BTreeMap::new();
    go(root, root, &mut out);
    out
}

/// One action of a p5m manifest: its name and its attributes.
#[derive(Debug)]
struct Action {
    line: usize,
    name: String,
    attrs: Vec<(String, String)>,
}

impl Action {
    fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a p5m manifest: `#` comments, `\` continuations, actions of
/// `key=value` attributes whose values may be double-quoted.
fn parse_p5m(text: &str) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut logical = String::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        if logical.is_empty() {
            start = i + 1;
            if line.trim_start().starts_with('#') || line.trim().is_empty() {
                continue;
            }
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                logical.push_str(head);
                logical.push(' ');
                continue;
            }
            None => logical.push_str(line),
        }
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        for c in logical.chars() {
            match c {
                '"' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                }
                c => word.push(c),
            }
        }
        assert!(!quoted, "pkg/zinstall.p5m:{start}: unterminated quote");
        if !word.is_empty() {
            words.push(word);
        }
        let name = words.remove(0);
        let attrs = words
            .into_iter()
            .map(|w| match w.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => {
                    panic!("pkg/zinstall.p5m:{start}: {w:?} is not key=value")
                }
            })
            .collect();
        actions.push(Action {
            line: start,
            name,
            attrs,
        });
        logical.clear();
    }
    actions
}

/// The .deb's files from `[package.metadata.deb]` assets, as cargo-deb
/// places them (a destination ending in `/` takes the source's name),
/// and the units its `systemd-units` names (`UNIT.service` and
/// `UNIT.socket` in `unit-scripts`, into `usr/lib/systemd/system`).
fn deb_files() -> BTreeSet<String> {
    let manifest = fs::read_to_string(top().join("brand/Cargo.toml")).unwrap();
    let doc: toml::Table =
        toml::from_str(&manifest).expect("brand/Cargo.toml parses");
    let deb = &doc["package"]["metadata"]["deb"];
    let assets = deb["assets"]
        .as_array()
        .expect("[package.metadata.deb] assets is an array");
    let mut units = BTreeSet::new();
    if let Some(u) = deb.get("systemd-units") {
        let name = u["unit-name"].as_str().expect("systemd-units names a unit");
        let dir = top()
            .join("brand")
            .join(u["unit-scripts"].as_str().expect("and its directory"));
        for kind in ["service", "socket"] {
            let file = format!("{name}.{kind}");
            if dir.join(&file).is_file() {
                units.insert(format!("usr/lib/systemd/system/{file}"));
            }
        }
    }
    let mut files: BTreeSet<String> = assets
        .iter()
        .map(|a| {
            let a = a.as_array().expect("an asset is [source, dest, mode]");
            let source = a[0].as_str().unwrap();
            let dest = a[1].as_str().unwrap();
            match dest.strip_suffix('/') {
                Some(dir) => {
                    let name = Path::new(source)
                        .file_name()
                        .unwrap()
                        .to_str()
                        .unwrap();
                    format!("{dir}/{name}")
                }
                None => dest.to_string(),
            }
        })
        .collect();
    files.extend(units);
    files
}

/// The differences as three lists, one per way of shipping.
fn expected() -> (Vec<&'static str>, Vec<&'static str>, Vec<&'static str>) {
    let make: Vec<_> = DIFFERENCES.iter().map(|d| d.0).collect();
    let p5m: Vec<_> = DIFFERENCES.iter().filter_map(|d| d.1).collect();
    let deb: Vec<_> = DIFFERENCES.iter().filter_map(|d| d.2).collect();
    (make, p5m, deb)
}

fn compare(
    what: &str,
    want: &BTreeSet<String>,
    got: &BTreeSet<String>,
    errors: &mut Vec<String>,
) {
    for f in want.difference(got) {
        errors.push(format!("{what}: {f} is missing"));
    }
    for f in got.difference(want) {
        errors.push(format!("{what}: {f} is not in pkg/Makefile's layout"));
    }
}

#[test]
fn makefile_manifest_and_deb_ship_the_same_files() {
    let dest = tempfile::tempdir().unwrap();
    make("install-files", dest.path());
    let installed = walk(dest.path());
    assert!(
        installed.contains_key("usr/bin/zinstall"),
        "make install-files laid out no usr/bin/zinstall: {installed:?}"
    );
    let (only_make, p5m_paths, deb_paths) = expected();
    let mut errors = Vec::new();
    for f in &only_make {
        if !installed.contains_key(*f) {
            errors.push(format!(
                "DIFFERENCES names {f}, which pkg/Makefile does not install"
            ));
        }
    }
    // The layout, less what DIFFERENCES moves, is the common part.
    let common: BTreeSet<String> = installed
        .keys()
        .filter(|f| !only_make.contains(&f.as_str()))
        .cloned()
        .collect();

    let text = fs::read_to_string(top().join("pkg/zinstall.p5m")).unwrap();
    let actions = parse_p5m(&text);
    let mut p5m_files = BTreeSet::new();
    let mut p5m_dirs = BTreeSet::new();
    let mut p5m_modes = BTreeMap::new();
    for a in &actions {
        let path = || {
            a.get("path")
                .unwrap_or_else(|| {
                    panic!(
                        "pkg/zinstall.p5m:{}: {} without path=",
                        a.line, a.name
                    )
                })
                .to_string()
        };
        match a.name.as_str() {
            "file" | "link" | "hardlink" => {
                let p = path();
                if a.name == "file" {
                    for key in ["owner", "group", "mode"] {
                        if a.get(key).is_none() {
                            errors.push(format!(
                                "pkg/zinstall.p5m:{}: {p} has no {key}=",
                                a.line
                            ));
                        }
                    }
                    let mode = a.get("mode").map(|m| u32::from_str_radix(m, 8));
                    if let Some(Ok(m)) = mode {
                        p5m_modes.insert(p.clone(), m);
                    }
                    let preserve = a.get("preserve");
                    if p.starts_with("etc/") && preserve != Some("renamenew") {
                        errors.push(format!(
                            "pkg/zinstall.p5m:{}: {p} is configuration: it needs preserve=renamenew",
                            a.line
                        ));
                    }
                }
                if !p5m_files.insert(p.clone()) {
                    errors.push(format!(
                        "pkg/zinstall.p5m:{}: {p} is listed twice",
                        a.line
                    ));
                }
            }
            "dir" => {
                for key in ["owner", "group", "mode"] {
                    if a.get(key).is_none() {
                        errors.push(format!(
                            "pkg/zinstall.p5m:{}: dir {} has no {key}=",
                            a.line,
                            path()
                        ));
                    }
                }
                p5m_dirs.insert(path());
            }
            "set" | "depend" | "license" | "legacy" => {}
            other => errors.push(format!(
                "pkg/zinstall.p5m:{}: unknown action {other}",
                a.line
            )),
        }
    }
    let mut want_p5m = common.clone();
    want_p5m.extend(p5m_paths.iter().map(|s| s.to_string()));
    want_p5m.extend(P5M_ONLY.iter().map(|(f, _why)| f.to_string()));
    for (f, _why) in P5M_ONLY {
        let name = Path::new(f).file_name().unwrap();
        if !top().join("etc/smf").join(name).is_file() {
            errors.push(format!("P5M_ONLY names {f}, which etc/smf/ lacks"));
        }
    }
    compare("pkg/zinstall.p5m", &want_p5m, &p5m_files, &mut errors);
    // Every directory above a shipped file is delivered too.
    for f in &p5m_files {
        let mut d = Path::new(f).parent();
        while let Some(dir) = d.filter(|d| !d.as_os_str().is_empty()) {
            let dir = dir.to_str().unwrap();
            if !p5m_dirs.contains(dir) {
                errors.push(format!(
                    "pkg/zinstall.p5m: no dir action for {dir} (above {f})"
                ));
            }
            d = Path::new(dir).parent();
        }
    }
    // What the Makefile installs executable is executable in the manifest,
    // and nothing else is.
    for (f, mode) in &installed {
        if let Some(m) = p5m_modes.get(f)
            && (mode & 0o111 != 0) != (m & 0o111 != 0)
        {
            errors.push(format!(
                "{f}: pkg/Makefile installs it {mode:04o}, pkg/zinstall.p5m says {m:04o}"
            ));
        }
    }

    let deb = deb_files();
    let mut want_deb = common.clone();
    want_deb.extend(deb_paths.iter().map(|s| s.to_string()));
    want_deb.extend(DEB_ONLY.iter().map(|s| s.to_string()));
    compare(
        "the .deb's assets (brand/Cargo.toml)",
        &want_deb,
        &deb,
        &mut errors,
    );

    assert!(
        errors.is_empty(),
        "the ways of shipping disagree:\n  {}",
        errors.join("\n  ")
    );
}

#[test]
fn completions_are_written_for_each_shell() {
    let dest = tempfile::tempdir().unwrap();
    make("install-files", dest.path());
    for (file, marker) in [
        (
            "usr/share/bash-completion/completions/zinstall",
            "complete -F _zinstall",
        ),
        (
            "usr/share/zsh/site-functions/_zinstall",
            "#compdef zinstall",
        ),
        (
            "usr/share/fish/vendor_completions.d/zinstall.fish",
            "complete -c zinstall",
        ),
    ] {
        let text = fs::read_to_string(dest.path().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(text.contains(marker), "{file} lacks {marker:?}");
        for sub in ["copy", "install", "provision", "verify"] {
            assert!(text.contains(sub), "{file} does not complete {sub}");
        }
        assert!(
            text.contains("max-archive-size"),
            "{file} lacks provision's flags"
        );
        assert!(
            !text.contains("completions"),
            "{file} offers the hidden completions command"
        );
    }
}

#[test]
fn makefile_keeps_edited_configuration() {
    let dest = tempfile::tempdir().unwrap();
    make("install-files", dest.path());
    let conf = dest.path().join("etc/default/zinstall");
    let shipped =
        fs::read_to_string(top().join("etc/default/zinstall")).unwrap();
    assert_eq!(fs::read_to_string(&conf).unwrap(), shipped);
    let edited = format!("{shipped}COPY_THREADS=4\n");
    fs::write(&conf, &edited).unwrap();

    let out = make("install-files", dest.path());
    assert_eq!(
        fs::read_to_string(&conf).unwrap(),
        edited,
        "the edit was overwritten"
    );
    assert_eq!(
        fs::read_to_string(dest.path().join("etc/default/zinstall.new"))
            .unwrap(),
        shipped
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("keeping"),
        "make did not say it kept the file: {said}"
    );
    // An unchanged one is neither rewritten nor given a .new.
    assert!(!dest.path().join("etc/zinstall/profile.toml.new").exists());

    make("uninstall", dest.path());
    let left: Vec<String> = walk(dest.path()).into_keys().collect();
    assert_eq!(
        left,
        ["etc/default/zinstall", "etc/default/zinstall.new"],
        "uninstall left other files, or removed the edited one"
    );
    assert!(!dest.path().join("usr/lib/brand/zinstall").exists());
}

/// `zinstall X.Y.Z (commit C)`; returns C.
fn commit_of(program: &str, line: &str) -> String {
    let rest = line
        .strip_prefix(program)
        .and_then(|r| r.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{line:?} does not start with {program:?}"));
    let (version, commit) = rest
        .split_once(" (commit ")
        .unwrap_or_else(|| panic!("{line:?} names no commit"));
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "{line:?}");
    let commit = commit
        .strip_suffix(')')
        .unwrap_or_else(|| panic!("{line:?} does not end in ')'"));
    assert!(!commit.is_empty(), "{line:?}");
    commit.to_string()
}

#[test]
fn version_names_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let commit = commit_of("zinstall", line.trim_end());

    let out = Command::new(env!("CARGO_BIN_EXE_brand"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "brand --version failed");
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(commit_of("zinstall brand", line.trim_end()), commit);

    // Set at build time, it is what was set; built from a checkout, it is
    // the checkout's commit; else unknown (brand/build.rs).
    if let Some(c) =
        std::env::var_os("ZINSTALL_COMMIT").filter(|c| !c.is_empty())
    {
        assert_eq!(commit, c.to_str().unwrap(), "{line}");
        return;
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(top())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
    };
    let checkout = git(&["rev-parse", "--show-toplevel"]).is_some_and(|t| {
        Path::new(&t).canonicalize().ok() == top().canonicalize().ok()
    });
    if checkout {
        let head = git(&["rev-parse", "--short=12", "HEAD"])
            .expect("git rev-parse HEAD");
        assert_eq!(commit.trim_end_matches("-dirty"), head, "{line}");
    } else {
        assert_eq!(commit, "unknown", "not a git checkout, yet: {line}");
    }
}
