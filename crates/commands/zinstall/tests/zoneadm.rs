//! The brand hook as zoneadm drives it.
//!
//! A small model of illumos `zoneadm` runs the built `brand` through the
//! hook texts of `etc/brand/zinstall/config.xml`, with the arguments,
//! environment and shell zoneadm uses, and reacts to each exit status as
//! `usr/src/cmd/zoneadm/zoneadm.c` (illumos-gate) does. Each method names
//! the function it follows:
//!
//! - `do_subproc()`: `"exec " + hook text + " " + each argument` run by
//!   `/bin/sh -c`, stdin, environment and all inherited; no quoting.
//! - `subproc_status()`: a hook killed by a signal counts as
//!   `ZONE_SUBPROC_FATAL` (255).
//! - `install_func()`: the zone must be configured (`sanity_check`); the
//!   zonepath is made 0700 (`validate_zonepath`); the state is set to
//!   incomplete before the hook runs; 0 → installed; 253 → usage printed,
//!   the zone stays incomplete; 254 → `cleanup_zonepath(zonepath,
//!   B_FALSE)` then configured; any other status → incomplete.
//! - `cleanup_zonepath()`: if the zonepath holds anything but `dev`,
//!   `lastexited`, `lu`, `root`, `SUNWattached.xml` (and `.zfs`), only those
//!   are removed (`rm -rf`) and "Unable to completely remove ... because
//!   it contains additional user data" is printed; otherwise the dataset
//!   is destroyed, or (not a dataset, as here) `rm -rf zonepath`.
//! - `uninstall_func()`: installed or incomplete zones only; without `-F`
//!   and without a terminal on stdin it refuses before running any hook;
//!   `verify_adm` is asked (`invoke_brand_handler`); the state is set to
//!   incomplete; the hook gets every argument, `-F` included; 0 →
//!   configured; anything else → incomplete, nothing removed by zoneadm.
//! - `attach_func()`: configured zones only; with `-F` the hook is not
//!   run; hook 0 → installed; anything else → stays configured.
//! - `mark_func()`: `mark -F configured` sets the state, nothing else.
//! - zoneadmd's `get_implicit_datasets()` (vplat.c) runs `query datasets`;
//!   zonecfg's `brand_verify()` runs `verify_cfg FILE`.
//!
//! Every sequence ends by checking that a root that was valid (installed,
//! with its sentinel file) is still there unless an uninstall succeeded.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use zinstall_testkit::run::text;

const OK: i32 = 0;
const USAGE: i32 = 253;
const NOTCOMPLETE: i32 = 254;
const FATAL: i32 = 255;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ZState {
    Configured,
    Incomplete,
    Installed,
}

/// The hook texts of config.xml, with the installed program's path
/// pointed at the built one.
fn hooks() -> roxmltree_free::Hooks {
    roxmltree_free::Hooks::read()
}

/// config.xml read without a parser dependency: each `<tag>text</tag>`.
mod roxmltree_free {
    pub struct Hooks(String);

    impl Hooks {
        pub fn read() -> Hooks {
            let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../etc/brand/zinstall/config.xml");
            Hooks(std::fs::read_to_string(p).unwrap())
        }

        /// The element's text; empty when there is no hook.
        pub fn get(&self, tag: &str) -> String {
            let open = format!("<{tag}>");
            let close = format!("</{tag}>");
            match self.0.find(&open) {
                Some(a) => {
                    let from = a + open.len();
                    let b = self.0[from..].find(&close).unwrap();
                    self.0[from..from + b].to_string()
                }
                None => String::new(),
            }
        }
    }
}

struct Zoneadm {
    d: tempfile::TempDir,
    zone: String,
    zonepath: PathBuf,
    profile: PathBuf,
    state: ZState,
    /// What the last cleanup_zonepath() printed.
    warnings: Vec<String>,
    /// The sentinel of the last valid root, while one must exist.
    valid: Option<Vec<u8>>,
    extra_env: Vec<(String, String)>,
}

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

fn layer(path: &Path, kind: &str, entries: &[(&str, &[u8])]) {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_600_000_000);
        h.set_uid(0);
        h.set_gid(0);
        b.append_data(&mut h, name, data).unwrap();
    };
    add(
        "zinstall.json",
        format!("{{\"v\":\"1\",\"t\":\"{kind}\"}}\n").as_bytes(),
    );
    for (n, data) in entries {
        add(&format!("root/{n}"), data);
    }
    fs::write(path, b.into_inner().unwrap()).unwrap();
}

impl Zoneadm {
    /// A configured zone `z1` whose profile copies a generated tree.
    fn new(files: usize) -> Zoneadm {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        for i in 0..files {
            write(&src.join(format!("usr/share/doc/d{i}")), &[b'x'; 3000]);
            write(&src.join(format!("usr/bin/t{i}")), b"tool");
        }
        write(&src.join("lib/l"), b"lib");
        write(&src.join("sbin/s"), b"sbin");
        let profile = d.path().join("profile.toml");
        fs::write(
            &profile,
            format!(
                "source_root = \"{}\"\ntrees = [\"usr\", \"lib\", \"sbin\"]\nlog = \"{}\"\n",
                src.display(),
                d.path().join("zinstall.log").display()
            ),
        )
        .unwrap();
        layer(
            &d.path().join("app.tar"),
            "layer",
            &[("opt/app/sentinel", b"valid root")],
        );
        let zones = d.path().join("zones");
        fs::create_dir(&zones).unwrap();
        Zoneadm {
            zone: "z1".into(),
            zonepath: zones.join("z1"),
            profile,
            state: ZState::Configured,
            warnings: Vec::new(),
            valid: None,
            extra_env: Vec::new(),
            d,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.d.path().join(name)
    }

    /// `get_hook()` + `addoptions()`/`addopt()`: the substituted text
    /// with each argument glued on after a space.
    fn command(&self, tag: &str, args: &[&str]) -> Option<String> {
        let text = hooks().get(tag);
        if text.is_empty() {
            return None;
        }
        Some(self.substitute(&text, args))
    }

    /// The hook text with zoneadm's `%z`/`%R` and our binary substituted,
    /// each argument glued on after a space.
    fn substitute(&self, text: &str, args: &[&str]) -> String {
        let mut cmd = text
            .replace(
                "/usr/lib/brand/zinstall/brand",
                env!("CARGO_BIN_EXE_brand"),
            )
            .replace("%z", &self.zone)
            .replace("%R", &self.zonepath.display().to_string());
        for a in args {
            cmd.push(' ');
            cmd.push_str(a);
        }
        cmd
    }

    /// `do_subproc()`: `exec` through `/bin/sh -c`; stdin is no terminal.
    fn spawn(&self, cmd: &str) -> std::process::Child {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(format!("exec {cmd}"))
            .env("ZINSTALL_PROFILE", &self.profile)
            .env("ZINSTALL_DEFAULTS", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    }

    /// `do_subproc()` and `subproc_status()`.
    fn run(&self, cmd: &str) -> (i32, String) {
        let o = self.spawn(cmd).wait_with_output().unwrap();
        (status(&o), text(&o))
    }

    /// `verify_brand()`: the subcommand glued onto the verify_adm text.
    fn verify_adm(&self, sub: &str, args: &[&str]) -> i32 {
        let text = hooks().get("verify_adm");
        assert!(text.ends_with(' '), "zoneadm glues the subcommand on");
        let cmd = self.substitute(&format!("{text}{sub}"), args);
        self.run(&cmd).0
    }

    /// `validate_zonepath()` for install: made, 0700.
    fn make_zonepath(&self) {
        fs::create_dir_all(&self.zonepath).unwrap();
        fs::set_permissions(&self.zonepath, fs::Permissions::from_mode(0o700))
            .unwrap();
    }

    /// `install_func()`: returns the hook's status.
    fn install(&mut self, args: &[&str]) -> (i32, String) {
        assert_eq!(
            self.state,
            ZState::Configured,
            "sanity_check: install needs configured"
        );
        assert_eq!(self.verify_adm("install", args), OK);
        self.make_zonepath();
        self.state = ZState::Incomplete;
        let cmd = self.command("install", args).expect("install hook");
        let (st, out) = self.run(&cmd);
        self.after_install(st);
        (st, out)
    }

    fn after_install(&mut self, st: i32) {
        match st {
            OK => {
                self.state = ZState::Installed;
                self.valid = Some(
                    fs::read(self.zonepath.join("root/opt/app/sentinel"))
                        .unwrap(),
                );
            }
            NOTCOMPLETE => {
                self.cleanup_zonepath(false);
                self.state = ZState::Configured;
            }
            // USAGE: sub_usage() and return; FATAL and the rest: done.
            _ => {}
        }
        self.check_kept();
    }

    /// `cleanup_zonepath()` on a zonepath that is not a ZFS dataset.
    fn cleanup_zonepath(&mut self, all: bool) {
        const STD: &[&str] =
            &["dev", "lastexited", "lu", "root", "SUNWattached.xml"];
        let Ok(rd) = fs::read_dir(&self.zonepath) else {
            return;
        };
        let non_std: Vec<String> = rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".zfs" && !STD.contains(&n.as_str()))
            .collect();
        if !all && !non_std.is_empty() {
            for s in STD {
                rm_rf(&self.zonepath.join(s));
            }
            self.warnings.push(format!(
                "WARNING: Unable to completely remove {} because it contains \
                 additional user data ({non_std:?})",
                self.zonepath.display()
            ));
            return;
        }
        rm_rf(&self.zonepath);
    }

    /// `uninstall_func()`; `None` when zoneadm refused before any hook.
    fn uninstall(&mut self, args: &[&str]) -> Option<(i32, String)> {
        assert_ne!(self.state, ZState::Configured, "sanity_check: uninstall");
        assert_eq!(self.verify_adm("uninstall", args), OK);
        if !args.contains(&"-F") {
            // ask_yesno(): stdin is not a terminal: "-F not specified".
            return None;
        }
        self.state = ZState::Incomplete;
        let cmd = self.command("uninstall", args).expect("uninstall hook");
        let (st, out) = self.run(&cmd);
        if st == OK {
            self.state = ZState::Configured;
            self.valid = None;
        }
        self.check_kept();
        Some((st, out))
    }

    /// `attach_func()`.
    fn attach(&mut self, args: &[&str]) -> i32 {
        assert_eq!(self.state, ZState::Configured, "sanity_check: attach");
        if args.contains(&"-F") {
            self.state = ZState::Installed;
            return OK;
        }
        let st = match self.command("attach", args) {
            Some(cmd) => self.run(&cmd).0,
            None => OK,
        };
        if st == OK {
            self.state = ZState::Installed;
        }
        self.check_kept();
        st
    }

    /// `mark_func()`: `mark -F configured`.
    fn mark_configured(&mut self) {
        self.state = ZState::Configured;
    }

    /// No valid root is ever lost.
    fn check_kept(&self) {
        if let Some(s) = &self.valid {
            let got = fs::read(self.zonepath.join("root/opt/app/sentinel"));
            assert_eq!(got.ok().as_ref(), Some(s), "a valid root was lost");
        }
    }

    /// zinstall's own files in the zonepath.
    fn own_files(&self) -> Vec<String> {
        fs::read_dir(&self.zonepath)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(".zinstall"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn rm_rf(p: &Path) {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p).unwrap(),
        Ok(_) => fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

/// `subproc_status()`: a signal is FATAL.
fn status(o: &Output) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (o.status.code(), o.status.signal()) {
        (Some(c), _) => c,
        (None, Some(_)) => FATAL,
        _ => unreachable!(),
    }
}

#[test]
fn install_then_uninstall_with_and_without_f() {
    let mut z = Zoneadm::new(3);
    let app = z.path("app.tar");
    let (st, out) = z.install(&[app.to_str().unwrap()]);
    assert_eq!(st, OK, "{out}");
    assert_eq!(z.state, ZState::Installed);
    // Only the root, the marker and the manifest of what the install
    // laid out (for an update); no lock left behind.
    assert_eq!(z.own_files(), [".zinstall.manifest", ".zinstall.state"]);
    // Without -F and a terminal, zoneadm refuses before the hook.
    assert!(z.uninstall(&[]).is_none());
    z.check_kept();
    let (st, out) = z.uninstall(&["-F"]).unwrap();
    assert_eq!(st, OK, "{out}");
    assert_eq!(z.state, ZState::Configured);
    assert!(!z.zonepath.join("root").exists());
    assert!(z.own_files().is_empty(), "{:?}", z.own_files());
    // Uninstalling a zonepath with nothing in it is fine too.
    z.state = ZState::Incomplete;
    assert_eq!(z.uninstall(&["-F"]).unwrap().0, OK);
}

#[test]
fn failed_install_lets_zoneadm_remove_the_whole_zonepath() {
    let mut z = Zoneadm::new(2);
    // An image of the wrong kind: refused before the root.
    let base = z.path("base.tar");
    layer(&base, "baseline", &[]);
    let (st, out) = z.install(&[base.to_str().unwrap()]);
    assert_eq!(st, NOTCOMPLETE, "{out}");
    assert_eq!(z.state, ZState::Configured);
    assert!(z.warnings.is_empty(), "{:?}", z.warnings);
    assert!(!z.zonepath.exists(), "cleanup_zonepath removed it all");
    // A layer that fails mid-way: the partial root removed by the hook,
    // then the zonepath by zoneadm, with no warning.
    let evil = z.path("evil.tar");
    let mut b = tar::Builder::new(Vec::new());
    let meta = b"{\"v\":\"1\",\"t\":\"layer\"}\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(meta.len() as u64);
    h.set_mode(0o444);
    b.append_data(&mut h, "zinstall.json", &meta[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "root/escape", "/tmp").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    b.append_data(&mut h, "root/escape/zinstall-test", &b"x"[..])
        .unwrap();
    fs::write(&evil, b.into_inner().unwrap()).unwrap();
    let (st, out) = z.install(&[evil.to_str().unwrap()]);
    assert_eq!(st, NOTCOMPLETE, "{out}");
    assert!(out.contains("partial root was removed"), "{out}");
    assert!(!z.zonepath.exists(), "cleanup_zonepath removed it all");
    assert!(z.warnings.is_empty(), "{:?}", z.warnings);
    // A bad install option: 253, which leaves the zone incomplete (no
    // cleanup); uninstall finds nothing to lose.
    let (st, _) = z.install(&["-Z"]);
    assert_eq!(st, USAGE);
    assert_eq!(z.state, ZState::Incomplete);
    let (st, out) = z.uninstall(&["-F"]).unwrap();
    assert_eq!(st, OK, "{out}");
    // And then an install works.
    let app = z.path("app.tar");
    assert_eq!(z.install(&[app.to_str().unwrap()]).0, OK);
}

#[test]
fn an_installed_root_is_never_handed_to_cleanup_zonepath() {
    let mut z = Zoneadm::new(2);
    let app = z.path("app.tar");
    assert_eq!(z.install(&[app.to_str().unwrap()]).0, OK);
    // The zone forgets it is installed (zonecfg delete -F and create
    // again, or mark): its next install must keep the root.
    z.mark_configured();
    let (st, out) = z.install(&[app.to_str().unwrap()]);
    assert_eq!(st, FATAL, "{out}");
    assert!(out.contains("already installed"), "{out}");
    assert_eq!(z.state, ZState::Incomplete);
    z.check_kept();
    assert!(z.warnings.is_empty());
    // Back to configured, then attach checks it and it is installed.
    z.mark_configured();
    assert_eq!(z.attach(&[]), OK);
    assert_eq!(z.state, ZState::Installed);
    // A profile whose trees the root lacks: attach refuses, keeps it.
    z.mark_configured();
    let p = fs::read_to_string(&z.profile).unwrap();
    fs::write(
        &z.profile,
        p.replace("\"sbin\"]", "\"sbin\", \"opt/none\"]"),
    )
    .unwrap();
    assert_eq!(z.attach(&[]), FATAL);
    assert_eq!(z.state, ZState::Configured);
    // A bad profile on install with a valid root: still never 254.
    fs::write(&z.profile, "nonsense = 1\n").unwrap();
    let (st, out) = z.install(&[]);
    assert_eq!(st, FATAL, "{out}");
    z.check_kept();
}

#[test]
fn a_root_zinstall_did_not_make_is_kept() {
    let mut z = Zoneadm::new(1);
    z.make_zonepath();
    write(&z.zonepath.join("root/home/data"), b"someone's data");
    let (st, out) = z.install(&[]);
    assert_eq!(st, FATAL, "{out}");
    assert!(out.contains("did not make"), "{out}");
    assert_eq!(
        fs::read(z.zonepath.join("root/home/data")).unwrap(),
        b"someone's data"
    );
    // zoneadm uninstall -F, the scripted form: still kept.
    let (st, out) = z.uninstall(&["-F"]).unwrap();
    assert_eq!(st, FATAL, "{out}");
    assert!(out.contains("-x foreign"), "{out}");
    assert_eq!(
        fs::read(z.zonepath.join("root/home/data")).unwrap(),
        b"someone's data"
    );
    // Said explicitly: removed.
    let (st, out) = z.uninstall(&["-F", "-x", "foreign"]).unwrap();
    assert_eq!(st, OK, "{out}");
    assert!(!z.zonepath.join("root").exists());
    assert!(z.own_files().is_empty());
}

#[test]
fn reinstall_after_a_killed_install() {
    let mut z = Zoneadm::new(1500);
    z.extra_env = vec![
        ("ZINSTALL_COPY_THREADS".into(), "1".into()),
        ("ZINSTALL_COPY_BATCH".into(), "1".into()),
    ];
    z.state = ZState::Incomplete;
    z.make_zonepath();
    let cmd = z.command("install", &[]).unwrap();
    let mut child = z.spawn(&cmd);
    let marker = z.zonepath.join(".zinstall.state");
    let t0 = Instant::now();
    while !marker.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Killed as soon as the marker says it started: 1,500 files one at a
    // time take far longer than the 5 ms poll, so the kill lands mid-way.
    child.kill().unwrap();
    let o = child.wait_with_output().unwrap();
    let st = status(&o);
    z.after_install(st);
    assert_ne!(
        st, OK,
        "the install finished before the kill: the race was not exercised"
    );
    // subproc_status(): killed is fatal; the zone is incomplete.
    assert_eq!(st, FATAL);
    assert_eq!(z.state, ZState::Incomplete);
    assert_eq!(fs::read_to_string(&marker).unwrap(), "installing\n");
    // zoneadm's way out: uninstall (the marker says zinstall made it).
    let (st, out) = z.uninstall(&["-F"]).unwrap();
    assert_eq!(st, OK, "{out}");
    assert!(z.own_files().is_empty(), "{:?}", z.own_files());
    z.extra_env.clear();
    let app = z.path("app.tar");
    let (st, out) = z.install(&[app.to_str().unwrap()]);
    assert_eq!(st, OK, "{out}");
    // Or, killed again, mark it configured and install over it: the
    // interrupted install is cleaned by the next one.
    let (st, out) = z.uninstall(&["-F"]).unwrap();
    assert_eq!(st, OK, "{out}");
    fs::create_dir_all(z.zonepath.join("root/usr")).unwrap();
    write(&z.zonepath.join("root/usr/half"), b"x");
    fs::write(&marker, "installing\n").unwrap();
    fs::write(z.zonepath.join(".zinstall.lock"), "1\n").unwrap();
    z.mark_configured();
    let (st, out) = z.install(&[app.to_str().unwrap()]);
    assert_eq!(st, OK, "{out}");
    assert!(out.contains("interrupted install"), "{out}");
    assert!(!z.zonepath.join("root/usr/half").exists());
    assert_eq!(z.own_files(), [".zinstall.manifest", ".zinstall.state"]);
}

#[test]
fn a_zonepath_another_process_installs_is_not_cleaned() {
    let mut z = Zoneadm::new(1);
    z.make_zonepath();
    let lock = z.zonepath.join(".zinstall.lock");
    let f = fs::File::create(&lock).unwrap();
    f.lock().unwrap();
    let (st, out) = z.install(&[]);
    assert_eq!(st, FATAL, "{out}");
    assert!(out.contains("held by"), "{out}");
    assert!(lock.exists(), "not cleaned under the holder");
    drop(f);
}

#[test]
fn a_log_that_cannot_be_written_does_not_decide_the_status() {
    let mut z = Zoneadm::new(1);
    let p = fs::read_to_string(&z.profile).unwrap();
    let log = z.path("zinstall.log").display().to_string();
    fs::write(&z.profile, p.replace(&log, "/dev/full")).unwrap();
    let app = z.path("app.tar");
    let (st, out) = z.install(&[app.to_str().unwrap()]);
    assert_eq!(st, OK, "{out}");
}

#[test]
fn zoneadmd_and_zonecfg_hooks() {
    let z = Zoneadm::new(1);
    // get_implicit_datasets(): "query datasets"; nothing printed.
    let (st, out) = z.run(&z.command("query", &["datasets"]).unwrap());
    assert_eq!((st, out.as_str()), (OK, ""));
    // Queries zoneadmd may add later, or none at all.
    for args in [&["frobs"][..], &["datasets", "extra", "-x"][..], &[][..]] {
        let (st, out) = z.run(&z.command("query", args).unwrap());
        assert_eq!((st, out.as_str()), (OK, ""), "{args:?}");
    }
    // verify_adm: every subcommand.
    for sub in ["install", "boot", "clone", "whatever"] {
        assert_eq!(z.verify_adm(sub, &["a"]), OK);
    }
    // pre/poststatechange "%s %d %d %s" with an empty altroot.
    let (st, _) = z.run(&z.command("prestatechange", &["2", "0", ""]).unwrap());
    assert_eq!(st, OK);
    // brand_verify(): verify_cfg FILE, no %-substitution.
    let verify = |xml: &str| {
        let f = z.path("zonecfg_verify.xml");
        fs::write(&f, xml).unwrap();
        let cmd = hooks().get("verify_cfg").replace(
            "/usr/lib/brand/zinstall/brand",
            env!("CARGO_BIN_EXE_brand"),
        );
        z.run(&format!("{cmd} {}", f.display()))
    };
    let good = r#"<?xml version="1.0"?><zone name="z1" zonepath="/z" brand="zinstall" ip-type="exclusive"><network physical="z1n0"/></zone>"#;
    assert_eq!(verify(good).0, OK);
    assert_eq!(verify(&good.replace("exclusive", "shared")).0, FATAL);
    let deep = format!(
        "<zone>{}{}</zone>",
        "<a>".repeat(20_000),
        "</a>".repeat(20_000)
    );
    let (st, out) = verify(&deep);
    assert_eq!(st, FATAL, "{out}");
    assert!(out.contains("nested"), "{out}");
    // Not hooks of this brand: config.xml leaves them to zoneadm.
    assert!(z.command("detach", &[]).is_none());
    assert!(z.command("clone", &["z0"]).is_none());
    // attach -n (dry run): zone and zonepath are "-".
    let cmd = hooks()
        .get("attach")
        .replace("/usr/lib/brand/zinstall/brand", env!("CARGO_BIN_EXE_brand"))
        .replace("%z", "-")
        .replace("%R", "-");
    assert_eq!(z.run(&format!("{cmd} -n /var/run/zone.1")).0, OK);
}

#[test]
fn arguments_that_are_not_utf8() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let odd = OsString::from_vec(b"z\xff".to_vec());
    let d = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brand"))
        .arg("-z")
        .arg(&odd)
        .arg("-R")
        .arg(d.path().join(&odd))
        .args(["query", "datasets"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(OK), "{}", text(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_brand"))
        .arg("-z")
        .arg(&odd)
        .arg("-R")
        .arg(d.path().join(&odd))
        .arg("install")
        .output()
        .unwrap();
    // No zonepath there: nothing to clean.
    assert_eq!(o.status.code(), Some(NOTCOMPLETE), "{}", text(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_zinstall"))
        .env("ZINSTALL_DEFAULTS", "/dev/null")
        .args(["uninstall", "--log"])
        .arg(d.path().join("log"))
        .arg("--zonepath")
        .arg(d.path().join(&odd))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
