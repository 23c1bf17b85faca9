//! The three ways zinstall is shipped name the same files: pkg/Makefile's
//! install layout (run here with the binaries this test was built with),
//! the IPS manifest pkg/zinstall.p5m, and the Debian package's files as
//! pkg/Makefile stages them for dpkg-deb (`make deb-stage`, run here with
//! the same binaries). Where they differ on purpose, `DIFFERENCES` says so.
//! Also: `--version` names the commit, and the Makefile keeps edited
//! configuration.

use zinstall_testkit::tools;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file whose place is not the same in all three. Columns: the path
/// pkg/Makefile installs it at here, on Linux (PREFIX=/usr), its path in
/// the IPS manifest, its path in the .deb (`None`: not shipped there), and
/// why.
const DIFFERENCES: &[(&str, Option<&str>, Option<&str>, &str)] = &[
    (
        "usr/share/zinstall/dtrace/statemap.bt",
        None,
        Some("usr/share/zinstall/dtrace/statemap.bt"),
        "a bpftrace script: illumos has DTrace and statemap.d instead",
    ),
    (
        "etc/zinstall/profile-zone.toml",
        None,
        Some("etc/zinstall/profile-zone.toml"),
        "on Linux the zone profile goes beside the Linux one, which is \
         profile.toml; on illumos it is profile.toml",
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
    (
        "usr/share/zinstall/installed",
        None,
        None,
        "pkg/Makefile's record of the directories it made, for uninstall; \
         packages have their own",
    ),
];

/// Files only the IPS manifest has, the file of the repository each is,
/// and why: pkg/Makefile installs them only on illumos, and this test
/// runs elsewhere.
const P5M_ONLY: &[(&str, &str, &str)] = &[
    (
        "lib/svc/manifest/system/zinstalld.xml",
        "etc/smf/zinstalld.xml",
        "the SMF manifest",
    ),
    (
        "usr/lib/brand/zinstall/brand",
        "crates/commands/zinstall/src/bin/brand.rs",
        "the zoneadm brand hook: zones are illumos's",
    ),
    (
        "usr/lib/brand/zinstall/config.xml",
        "etc/brand/zinstall/config.xml",
        "the brand's zoneadm configuration",
    ),
    (
        "usr/lib/brand/zinstall/platform.xml",
        "etc/brand/zinstall/platform.xml",
        "the brand's zoneadm platform",
    ),
    (
        "usr/share/zinstall/dtrace/statemap.d",
        "dtrace/statemap.d",
        "a DTrace script",
    ),
    (
        "usr/share/zinstall/dtrace/zinstall.d",
        "dtrace/zinstall.d",
        "the USDT provider's definition, for DTrace",
    ),
    (
        "etc/zinstall/profile-linux.toml",
        "etc/zinstall/profile-linux.toml",
        "on illumos the Linux profile goes beside the zone one; on Linux \
         it is profile.toml",
    ),
];

/// Files only the .deb has: Debian's own metadata, and the README.
const DEB_ONLY: &[&str] = &[
    "usr/share/doc/zinstall/README.md",
    "usr/share/doc/zinstall/copyright",
    "usr/share/doc/zinstall/changelog.Debian.gz",
    "usr/share/lintian/overrides/zinstall",
];

/// Where the .deb has a file pkg/Makefile installs at `path`: man pages
/// are gzipped there, as Debian wants them.
fn in_deb(path: &str) -> String {
    if path.starts_with("usr/share/man/") {
        format!("{path}.gz")
    } else {
        path.to_string()
    }
}

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the crate is in the workspace")
        .to_path_buf()
}

/// Runs `make -C pkg TARGET DESTDIR=dest PREFIX=/usr` with the binaries
/// cargo built for this test.
fn make(target: &str, dest: &Path) -> std::process::Output {
    make_with(
        target,
        &[format!("DESTDIR={}", dest.display()), "PREFIX=/usr".into()],
    )
}

/// Runs `make -C pkg deb-stage DEB_STAGE=stage`: the .deb's files, as
/// `make deb` gives them to dpkg-deb, from the binaries cargo built for
/// this test.
fn deb_stage(stage: &Path) -> BTreeMap<String, u32> {
    make_with("deb-stage", &[format!("DEB_STAGE={}", stage.display())]);
    walk(stage)
}

/// Runs `make -C pkg TARGET ARGS...` with BIN_DIR the directory of the
/// binaries cargo built for this test.
fn make_with(target: &str, args: &[String]) -> std::process::Output {
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
        .args(args)
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
    want_p5m.extend(P5M_ONLY.iter().map(|(f, _, _why)| f.to_string()));
    for (f, source, _why) in P5M_ONLY {
        if !top().join(source).is_file() {
            errors.push(format!("P5M_ONLY: {f} is {source}, which is missing"));
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

    let scratch = tempfile::tempdir().unwrap();
    let deb = deb_stage(&scratch.path().join("stage"));
    let mut want_deb: BTreeSet<String> =
        common.iter().map(|f| in_deb(f)).collect();
    want_deb.extend(deb_paths.iter().map(|s| in_deb(s)));
    want_deb.extend(DEB_ONLY.iter().map(|s| s.to_string()));
    let deb_files: BTreeSet<String> = deb.keys().cloned().collect();
    compare(
        "the .deb's files (make deb-stage)",
        &want_deb,
        &deb_files,
        &mut errors,
    );
    // The same modes as install-files gives them; Debian's own files
    // are plain.
    for (f, mode) in &installed {
        let in_deb = DIFFERENCES
            .iter()
            .find(|d| d.0 == f)
            .map_or(Some(f.as_str()), |d| d.2)
            .map(in_deb);
        if let Some(m) = in_deb.and_then(|p| deb.get(&p))
            && m != mode
        {
            errors.push(format!(
                "{f}: pkg/Makefile installs it {mode:04o}, the .deb has {m:04o}"
            ));
        }
    }
    for f in DEB_ONLY {
        if let Some(m) = deb.get(*f)
            && *m != 0o644
        {
            errors.push(format!("{f}: the .deb has it {m:04o}, not 0644"));
        }
    }

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
        ["etc/default/zinstall"],
        "uninstall left other files (the .new it wrote?), or removed the \
         edited one"
    );
    // Only the directories holding the kept file stay.
    assert_eq!(dirs(dest.path()), ["etc", "etc/default"]);
}

/// Every directory under `root`, relative, sorted.
fn dirs(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = walkdir::WalkDir::new(root)
        .min_depth(1)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_dir())
        .map(|e| {
            e.path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// `readelf -S -W` of the ELF file at `path`: its section headers.
fn sections(path: &Path) -> String {
    let o = tools::tool("readelf")
        .args(["-S", "-W"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "readelf {}: {o:?}", path.display());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// True if the ELF file at `path` has a symbol table or debug information
/// (`.debug_gdb_scripts`, which is loaded, stays when stripped).
fn has_symbols(path: &Path) -> bool {
    let sections = sections(path);
    [" .symtab", " .debug_info", " .debug_line"]
        .iter()
        .any(|s| sections.contains(s))
}

#[test]
fn make_install_strips_and_uninstall_removes_what_it_made() {
    let dest = tempfile::tempdir().unwrap();
    // What was there before: a directory with someone else's file, and an
    // empty one; both stay.
    fs::create_dir_all(dest.path().join("usr/bin")).unwrap();
    fs::write(dest.path().join("usr/bin/other"), "not ours").unwrap();
    fs::create_dir_all(dest.path().join("usr/share/man/man8")).unwrap();
    make("install-files", dest.path());
    let built = Path::new(env!("CARGO_BIN_EXE_zinstall")).parent().unwrap();
    let mut sizes = Vec::new();
    for (installed, name) in [
        ("usr/bin/zinstall", "zinstall"),
        ("usr/sbin/zinstalld", "zinstalld"),
    ] {
        let path = dest.path().join(installed);
        assert!(!has_symbols(&path), "{installed} is not stripped");
        let (have, was) = (
            fs::metadata(&path).unwrap().len(),
            fs::metadata(built.join(name)).unwrap().len(),
        );
        assert!(have < was, "{installed}: {have} bytes, built {was}");
        sizes.push(format!("{installed} {have} (built {was})"));
    }
    eprintln!("installed sizes: {}", sizes.join(", "));
    // The Linux layout: no zoneadm brand, no DTrace scripts.
    for absent in [
        "usr/lib/brand",
        "usr/share/zinstall/dtrace/statemap.d",
        "usr/share/zinstall/dtrace/zinstall.d",
    ] {
        assert!(!dest.path().join(absent).exists(), "{absent}");
    }
    // A second install over an edited file writes a .new.
    let conf = dest.path().join("etc/zinstall/zinstalld.toml");
    fs::write(&conf, "# edited\n").unwrap();
    make("install-files", dest.path());
    assert!(conf.with_extension("toml.new").exists());
    fs::remove_file(&conf).unwrap();

    make("uninstall", dest.path());
    let left: Vec<String> = walk(dest.path()).into_keys().collect();
    assert_eq!(left, ["usr/bin/other"], "uninstall left files behind");
    assert_eq!(
        dirs(dest.path()),
        [
            "usr",
            "usr/bin",
            "usr/share",
            "usr/share/man",
            "usr/share/man/man8"
        ],
        "uninstall left directories it made, or removed others"
    );
}

/// The bytes a gzip member holds, and whether its header is as `gzip -n`
/// writes it: no file name, no time.
fn gunzip(path: &Path) -> (Vec<u8>, bool) {
    use std::io::Read;
    let raw =
        fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        raw.len() > 10 && raw[..2] == [0x1f, 0x8b],
        "{} is not gzip",
        path.display()
    );
    let no_name = raw[3] & 0x08 == 0 && raw[4..8] == [0, 0, 0, 0];
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&raw[..])
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (out, no_name)
}

#[test]
fn the_deb_stage_holds_debian_files_and_gzipped_man_pages() {
    let scratch = tempfile::tempdir().unwrap();
    let stage = scratch.path().join("stage");
    let files = deb_stage(&stage);
    let mut man_pages = 0;
    for f in files.keys().filter(|f| f.starts_with("usr/share/man/")) {
        let name = Path::new(f).file_name().unwrap().to_str().unwrap();
        let source = name
            .strip_suffix(".gz")
            .unwrap_or_else(|| panic!("{f} is not gzipped"));
        let (text, no_name) = gunzip(&stage.join(f));
        assert_eq!(
            text,
            fs::read(top().join("man").join(source)).unwrap(),
            "{f}"
        );
        assert!(no_name, "{f}: not gzip -n (a name or time in the header)");
        man_pages += 1;
    }
    // Every page of man/: zinstall(5), (7), (8), each command's, zinstalld(8).
    let pages = fs::read_dir(top().join("man")).unwrap().count();
    assert!(pages >= 12, "man/ holds {pages} pages");
    assert_eq!(man_pages, pages, "{files:?}");
    let (changelog, no_name) =
        gunzip(&stage.join("usr/share/doc/zinstall/changelog.Debian.gz"));
    assert_eq!(
        changelog,
        fs::read(top().join("pkg/debian/changelog")).unwrap()
    );
    assert!(no_name, "changelog.Debian.gz: not gzip -n");
    for (shipped, source) in [
        ("usr/share/doc/zinstall/copyright", "pkg/debian/copyright"),
        ("usr/share/doc/zinstall/README.md", "README.md"),
        (
            "usr/share/lintian/overrides/zinstall",
            "pkg/debian/lintian-overrides",
        ),
    ] {
        assert_eq!(
            fs::read(stage.join(shipped)).unwrap(),
            fs::read(top().join(source)).unwrap(),
            "{shipped}"
        );
    }
    // Stripped as dh_strip strips, USDT probes kept.
    let built = Path::new(env!("CARGO_BIN_EXE_zinstall")).parent().unwrap();
    for (bin, name) in [
        ("usr/bin/zinstall", "zinstall"),
        ("usr/sbin/zinstalld", "zinstalld"),
    ] {
        let path = stage.join(bin);
        assert!(!has_symbols(&path), "{bin} is not stripped");
        let shipped = sections(&path);
        assert!(!shipped.contains(" .comment "), "{bin} keeps .comment");
        if sections(&built.join(name)).contains(" .note.stapsdt ") {
            assert!(
                shipped.contains(" .note.stapsdt "),
                "{bin} lost its USDT probes"
            );
        }
    }
    let zsh = fs::read_to_string(
        stage.join("usr/share/zsh/vendor-completions/_zinstall"),
    )
    .unwrap();
    assert!(zsh.contains("#compdef zinstall"));
    // dpkg records what a package installs; install-files' own record
    // would be a stray file.
    assert!(!files.contains_key("usr/share/zinstall/installed"));
    assert!(!stage.join("DEBIAN").exists(), "deb-stage wrote DEBIAN/");
    // A second run starts from an empty stage: nothing of the first run,
    // nor anything left there, is kept (install-files would keep an
    // edited conffile and write a .new beside it).
    fs::write(stage.join("etc/default/zinstall"), "# edited\n").unwrap();
    fs::write(stage.join("stray"), "").unwrap();
    assert_eq!(deb_stage(&stage), files);
}

#[test]
fn the_linux_packages_install_the_linux_profile_as_the_default() {
    let dest = tempfile::tempdir().unwrap();
    make("install-files", dest.path());
    let read = |p: &Path| fs::read_to_string(p).unwrap();
    let installed = dest.path().join("etc/zinstall/profile.toml");
    assert_eq!(
        read(&installed),
        read(&top().join("etc/zinstall/profile-linux.toml"))
    );
    assert_eq!(
        read(&dest.path().join("etc/zinstall/profile-zone.toml")),
        read(&top().join("etc/zinstall/profile.toml"))
    );
    let stage = dest.path().join("deb-stage");
    deb_stage(&stage);
    assert_eq!(
        read(&stage.join("etc/zinstall/profile.toml")),
        read(&top().join("etc/zinstall/profile-linux.toml"))
    );
    assert_eq!(
        read(&stage.join("etc/zinstall/profile-zone.toml")),
        read(&top().join("etc/zinstall/profile.toml"))
    );
    // And it works here: a small Linux root from it, as a user would
    // install one.
    let src = dest.path().join("src");
    fs::create_dir_all(src.join("usr/bin")).unwrap();
    fs::create_dir_all(src.join("etc")).unwrap();
    fs::write(src.join("usr/bin/hello"), "#!/bin/sh\necho hi\n").unwrap();
    fs::write(src.join("etc/hostname"), "box\n").unwrap();
    let zonepath = dest.path().join("z");
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["install", "--profile"])
        .arg(&installed)
        .arg("--source-root")
        .arg(&src)
        .arg("--log")
        .arg(dest.path().join("log"))
        .arg("--zonepath")
        .arg(&zonepath)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let root = zonepath.join("root");
    assert_eq!(read(&root.join("etc/hostname")), "box\n");
    assert_eq!(
        fs::read_link(root.join("bin")).unwrap(),
        Path::new("usr/bin")
    );
    assert!(root.join("proc").is_dir());
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
    // the checkout's commit; else unknown (crates/commands/zinstall/build.rs).
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
