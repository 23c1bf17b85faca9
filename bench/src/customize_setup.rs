//! What both sides of `bench customize` are given: a small real Debian
//! root (debootstrap'd once), its tar for zinstall, a qcow2 of it for
//! virt-customize, the key and password files, and the options in the
//! spelling both tools share.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
/// The command every guest's first boot runs, on both sides.
pub(crate) const FIRSTBOOT_COMMAND: &str = "touch /var/lib/fb";
/// The text `--write /etc/motd:` puts in each guest.
pub(crate) const MOTD: &str = "hello";
pub(crate) const TIMEZONE: &str = "Europe/Berlin";
/// The user the root is given, whose key is injected.
pub(crate) const USER: &str = "debian";
/// Root's password in the password file (its first line).
pub(crate) const PASSWORD: &str = "bench-Customize-7";

/// What both sides are given: the root, its tar, the key and password
/// files, and the per-guest qcow2 base.
pub(crate) struct Inputs {
    pub root: PathBuf,
    pub tar: PathBuf,
    pub key: PathBuf,
    pub password_file: PathBuf,
    pub base: PathBuf,
}

pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new(program)
        .args(args)
        .envs(guestfs_env())
        .output()
        .map_err(|e| format!("{program}: {e} (is it installed?)"))?;
    if !o.status.success() {
        return Err(format!(
            "{program} {args:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// libguestfs's appliance on these machines: QEMU directly, under TCG
/// (a KVM guest stops after the BIOS here); a caller's own setting wins.
pub(crate) fn guestfs_env() -> Vec<(&'static str, &'static str)> {
    let mut env = Vec::new();
    if std::env::var_os("LIBGUESTFS_BACKEND").is_none() {
        env.push(("LIBGUESTFS_BACKEND", "direct"));
    }
    if std::env::var_os("LIBGUESTFS_BACKEND_SETTINGS").is_none() {
        env.push(("LIBGUESTFS_BACKEND_SETTINGS", "force_tcg"));
    }
    env
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// The 1-, 5- and 15-minute load, as `uptime` says it.
pub(crate) fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The mirror apt already uses: the first `URIs:` of a deb822 source, or
/// the URL of the first `deb` line.
fn mirror() -> String {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(d) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = d
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "sources" || x == "list")
            })
            .collect();
        more.sort();
        files.extend(more);
    }
    for f in files {
        let Ok(text) = fs::read_to_string(&f) else {
            continue;
        };
        for line in text.lines().map(str::trim) {
            if let Some(u) = line
                .strip_prefix("URIs:")
                .and_then(|u| u.split_whitespace().next())
            {
                return u.to_string();
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.first() == Some(&"deb") {
                // `deb [opts] URL suite ...`
                if let Some(u) = words.iter().find(|w| w.contains("://")) {
                    return u.to_string();
                }
            }
        }
    }
    "http://deb.debian.org/debian".into()
}

/// A small real Debian root (made once under `scratch` with debootstrap,
/// or the one given): systemd and zoneinfo in it, and the user `debian`
/// (uid 1000, home /home/debian) beside root.
fn root(given: Option<&Path>, scratch: &Path) -> Result<PathBuf, String> {
    if let Some(r) = given {
        return if r.join("etc/passwd").is_file() {
            Ok(r.to_path_buf())
        } else {
            Err(format!("{}: no etc/passwd: not a root", r.display()))
        };
    }
    let dir = scratch.join("customize-root");
    let done = scratch.join("customize-root.done");
    if done.exists() {
        return Ok(dir);
    }
    let _ = fs::remove_dir_all(&dir);
    let m = mirror();
    eprintln!("debootstrap bookworm from {m} into {}", dir.display());
    run(
        "debootstrap",
        &[
            "--variant=minbase",
            "--include=systemd,systemd-sysv,tzdata",
            "bookworm",
            s(&dir),
            &m,
        ],
    )?;
    run(
        "chroot",
        &[
            s(&dir),
            "useradd",
            "-m",
            "-u",
            "1000",
            "-s",
            "/bin/bash",
            USER,
        ],
    )?;
    fs::write(&done, b"").map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The root as a tar (what provision takes), the key pair, the password
/// file (0600) and the ext4 qcow2 base virt-customize's overlays share.
pub(crate) fn inputs(
    given: Option<&Path>,
    scratch: &Path,
) -> Result<Inputs, String> {
    let root = root(given, scratch)?;
    let work = scratch.join("customize");
    fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let tar = work.join("root.tar");
    let base = work.join("base.qcow2");
    let stamp = work.join("inputs.done");
    let key = work.join("key");
    let password_file = work.join("password");
    if !stamp.exists() {
        // The device nodes debootstrap leaves in /dev are for a chroot
        // (a booted guest mounts devtmpfs there); provision refuses
        // them without --allow-devices.
        run(
            "tar",
            &[
                "--numeric-owner",
                "--xattrs",
                "--exclude=./dev/*",
                "-cf",
                s(&tar),
                "-C",
                s(&root),
                ".",
            ],
        )?;
        let _ = fs::remove_file(&key);
        let _ = fs::remove_file(work.join("key.pub"));
        run(
            "ssh-keygen",
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "bench@customize",
                "-f",
                s(&key),
            ],
        )?;
        fs::write(&password_file, format!("{PASSWORD}\n"))
            .map_err(|e| e.to_string())?;
        run("chmod", &["0600", s(&password_file)])?;
        // mkfs.ext4 -d copies the root with its owners and modes, no
        // appliance needed; the filesystem is the whole disk, which
        // libguestfs's inspection takes as the guest's root.
        let raw = work.join("base.raw");
        let used: u64 = run("du", &["-sxm", s(&root)])?
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1024);
        let size = format!("{}M", used * 2 + 256);
        let _ = fs::remove_file(&raw);
        run(
            "mkfs.ext4",
            &["-q", "-F", "-L", "root", "-d", s(&root), s(&raw), &size],
        )?;
        run(
            "qemu-img",
            &["convert", "-f", "raw", "-O", "qcow2", s(&raw), s(&base)],
        )?;
        fs::remove_file(&raw).map_err(|e| e.to_string())?;
        fs::write(&stamp, b"").map_err(|e| e.to_string())?;
    }
    Ok(Inputs {
        root,
        tar,
        key: work.join("key.pub"),
        password_file,
        base,
    })
}

/// The options both tools take, in their shared spelling; `{n}` is the
/// guest's number for zinstall and `n` itself for virt-customize.
pub(crate) fn options(i: &Inputs, n: Option<usize>) -> Vec<String> {
    let host = match n {
        Some(n) => format!("g-{n}"),
        None => "g-{n}".into(),
    };
    vec![
        "--ssh-inject".into(),
        format!("{USER}:file:{}", i.key.display()),
        "--root-password".into(),
        format!("file:{}", i.password_file.display()),
        "--firstboot-command".into(),
        FIRSTBOOT_COMMAND.into(),
        "--write".into(),
        format!("/etc/motd:{MOTD}"),
        "--timezone".into(),
        TIMEZONE.into(),
        "--hostname".into(),
        host,
    ]
}

/// `zinstall provision` of the root's tar: `count` guests `g-N` under
/// `out`, customised or with the hostname alone.
pub(crate) fn provision(
    z: &Path,
    i: &Inputs,
    count: usize,
    out: &Path,
    cache: &Path,
    customised: bool,
) -> Command {
    let mut c = Command::new(z);
    c.args(["provision", s(&i.tar), "--count", &count.to_string()])
        .args(["--out", s(out), "--name", "g", "--cache", s(cache)]);
    if customised {
        c.args(options(i, None));
    } else {
        c.args(["--hostname", "g-{n}"]);
    }
    c.stdout(std::process::Stdio::null());
    c
}
