//! `bench customize`'s check that both tools made the same guest: one
//! guest customised by zinstall (a directory) and the first one
//! virt-customize made (its files taken out of the qcow2 with
//! guestfish's tar-out), compared option by option, then every path
//! under /etc, /root and /home that differs listed.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use zinstall_tune::peers;

use crate::customize_setup::{
    FIRSTBOOT_COMMAND, Inputs, MOTD, PASSWORD, TIMEZONE, USER, provision, run,
    s,
};

/// What virt-customize's files are taken out of the guest for.
const TAKEN: [&str; 5] = [
    "etc",
    "root",
    "home",
    "usr/lib/virt-sysprep",
    // virt-customize installs its unit here, and links it from /etc.
    "usr/lib/systemd/system",
];

struct Row {
    check: String,
    zinstall: String,
    virt: String,
    verdict: String,
}

fn meta(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Ok(m) => format!("{:04o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid()),
        Err(_) => "missing".into(),
    }
}

fn text(p: &Path) -> String {
    match fs::read(p) {
        Ok(b) => format!("{:?}", String::from_utf8_lossy(&b)),
        Err(_) => "missing".into(),
    }
}

fn link(p: &Path) -> String {
    match fs::read_link(p) {
        Ok(t) => format!("-> {}", t.display()),
        Err(_) => format!("not a symlink ({})", meta(p)),
    }
}

fn same(check: &str, z: String, v: String) -> Row {
    let verdict = if z == v { "equal" } else { "differs" }.into();
    Row {
        check: check.into(),
        zinstall: z,
        virt: v,
        verdict,
    }
}

fn shadow_line(root: &Path, user: &str) -> Option<Vec<String>> {
    fs::read_to_string(root.join("etc/shadow"))
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<String> = l.split(':').map(String::from).collect();
            (f.first().map(String::as_str) == Some(user)).then_some(f)
        })
}

/// Whether crypt(3), through Python's binding of it, takes `PASSWORD`
/// to `hash` (the password on stdin, not in argv).
fn verifies(hash: &str) -> Result<bool, String> {
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut c = Command::new(python)
        .args([
            "-W",
            "ignore",
            "-c",
            "import crypt,sys; pw, h = sys.stdin.read().split('\\n')[:2]; \
             print(crypt.crypt(pw, h) == h)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{python}: {e}"))?;
    if let Some(mut i) = c.stdin.take() {
        i.write_all(format!("{PASSWORD}\n{hash}\n").as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let o = c.wait_with_output().map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "{python} crypt: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim() == "True")
}

fn method(hash: &str) -> &'static str {
    match hash.split('$').nth(1) {
        Some("y") => "yescrypt",
        Some("6") => "SHA-512 crypt",
        Some("5") => "SHA-256 crypt",
        Some("2b" | "2y") => "bcrypt",
        Some("1") => "MD5 crypt",
        _ => "not a hash",
    }
}

fn password_row(z: &Path, v: &Path) -> Result<Row, String> {
    let side = |r: &Path| -> Result<(String, bool), String> {
        let Some(f) = shadow_line(r, "root") else {
            return Ok(("no root in /etc/shadow".into(), false));
        };
        let h = f.get(1).cloned().unwrap_or_default();
        let ok = verifies(&h)?;
        Ok((
            format!(
                "{}, {} the password",
                method(&h),
                if ok { "verifies" } else { "does NOT verify" }
            ),
            ok,
        ))
    };
    let (zt, zok) = side(z)?;
    let (vt, vok) = side(v)?;
    Ok(Row {
        check: "root's hash verifies the password (crypt(3))".into(),
        verdict: if zok && vok {
            if zt == vt {
                "equal (salts differ)"
            } else {
                "equal in effect (methods differ)"
            }
        } else {
            "differs"
        }
        .into(),
        zinstall: zt,
        virt: vt,
    })
}

/// The rest of each shadow line (all but the hash).
fn shadow_rest(r: &Path, user: &str) -> String {
    match shadow_line(r, user) {
        Some(mut f) => {
            if f.len() > 1 {
                f[1] = "HASH".into();
            }
            f.join(":")
        }
        None => "missing".into(),
    }
}

/// The first-boot service's files in a root: the enabled unit, the
/// runner, and the script holding the command.
struct Firstboot {
    unit: Option<PathBuf>,
    enabled: bool,
    script: Option<PathBuf>,
    runner: Option<PathBuf>,
}

fn firstboot(r: &Path, unit: &str, lib: &str) -> Firstboot {
    let u = ["etc/systemd/system", "usr/lib/systemd/system"]
        .iter()
        .map(|d| r.join(d).join(unit))
        .find(|u| u.is_file());
    let wants = r
        .join("etc/systemd/system/multi-user.target.wants")
        .join(unit);
    let script = fs::read_dir(r.join(lib).join("scripts"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            fs::read_to_string(p).is_ok_and(|t| t.contains(FIRSTBOOT_COMMAND))
        });
    let runner = r.join(lib).join("firstboot.sh");
    Firstboot {
        unit: u,
        enabled: fs::symlink_metadata(&wants).is_ok(),
        script,
        runner: runner.is_file().then_some(runner),
    }
}

fn describe(f: &Firstboot, r: &Path) -> (String, bool) {
    let rel =
        |p: &Path| format!("/{}", p.strip_prefix(r).unwrap_or(p).display());
    let runner = f
        .runner
        .as_ref()
        .and_then(|p| fs::read_to_string(p).ok())
        .unwrap_or_default();
    // Once: the runner moves each script it ran out of the directory it
    // runs from.
    let moves = runner.contains("mv ") && runner.contains("done");
    let once = f.unit.is_some() && f.enabled && f.script.is_some() && moves;
    let d = format!(
        "unit {} ({}), script {}, runner {}{}",
        f.unit
            .as_deref()
            .map(rel)
            .unwrap_or_else(|| "missing".into()),
        if f.enabled {
            "enabled in multi-user.target.wants"
        } else {
            "NOT enabled"
        },
        f.script
            .as_deref()
            .map(rel)
            .unwrap_or_else(|| "missing".into()),
        f.runner
            .as_deref()
            .map(rel)
            .unwrap_or_else(|| "missing".into()),
        if moves {
            ", which moves each script it ran aside"
        } else {
            ""
        },
    );
    (d, once)
}

/// `systemd-analyze verify` of a unit inside a root: its status and what
/// it said.
fn verify(r: &Path, unit: Option<&Path>) -> String {
    let Some(unit) = unit else {
        return "no unit".into();
    };
    let inside = Path::new("/").join(unit.strip_prefix(r).unwrap_or(unit));
    let name = unit.file_name().unwrap_or_default().to_string_lossy();
    // --man=no: the units' Documentation= names pages this host need not
    // have installed.
    let o = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", r.display()))
        .arg(&inside)
        .output();
    match o {
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stderr)
                .lines()
                .filter(|l| l.contains(&*name))
                .collect::<Vec<_>>()
                .join("; ");
            if o.status.success() && said.is_empty() {
                "passes, says nothing".into()
            } else {
                format!("{}: {}", o.status, said.replace('|', "\\|"))
            }
        }
        Err(e) => format!("systemd-analyze: {e}"),
    }
}

/// Every path under `dir` (relative), with its type, mode, owner and
/// content or target.
fn entries(top: &Path, rel: &Path, out: &mut Vec<(PathBuf, String)>) {
    let p = top.join(rel);
    let Ok(m) = fs::symlink_metadata(&p) else {
        return;
    };
    let what = if m.file_type().is_symlink() {
        format!("symlink {}", link(&p))
    } else if m.is_dir() {
        "dir".into()
    } else if m.is_file() {
        let b = fs::read(&p).unwrap_or_default();
        format!("file of {} bytes, sum {:x}", b.len(), fnv(&b))
    } else {
        "special".into()
    };
    out.push((
        rel.to_path_buf(),
        format!("{what}, {:04o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid()),
    ));
    if m.is_dir() {
        let mut kids: Vec<PathBuf> = fs::read_dir(&p)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| rel.join(e.file_name())))
            .collect();
        kids.sort();
        for k in kids {
            entries(top, &k, out);
        }
    }
}

/// FNV-1a: enough to tell two small files apart in a report.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The paths under /etc, /root and /home whose type, mode, owner or
/// content differ between the two guests.
fn tree_diff(z: &Path, v: &Path) -> Vec<String> {
    let mut zs = Vec::new();
    let mut vs = Vec::new();
    for d in ["etc", "root", "home"] {
        entries(z, Path::new(d), &mut zs);
        entries(v, Path::new(d), &mut vs);
    }
    let zm: std::collections::BTreeMap<_, _> = zs.into_iter().collect();
    let vm: std::collections::BTreeMap<_, _> = vs.into_iter().collect();
    let keys: BTreeSet<&PathBuf> = zm.keys().chain(vm.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let a = zm.get(k).map(String::as_str).unwrap_or("missing");
            let b = vm.get(k).map(String::as_str).unwrap_or("missing");
            (a != b).then(|| format!("| /{} | {a} | {b} |", k.display()))
        })
        .collect()
}

/// Customises one guest each way, compares them, and returns the
/// Markdown of the comparison.
pub(crate) fn compare(
    z: &Path,
    i: &Inputs,
    work: &Path,
    cache: &Path,
) -> Result<String, String> {
    let zout = work.join("check-zi");
    let _ = fs::remove_dir_all(&zout);
    peers::time(provision(z, i, 1, &zout, cache, true))
        .map_err(|e| e.to_string())?;
    let zr = zout.join("g-0");
    let vr = work.join("check-virt");
    let _ = fs::remove_dir_all(&vr);
    let disk = work.join("virt/g-0.qcow2");
    let mut args: Vec<String> =
        vec!["--ro".into(), "-a".into(), s(&disk).into(), "-i".into()];
    for d in TAKEN {
        let tar = vr.join(format!("{}.tar", d.replace('/', "_")));
        fs::create_dir_all(vr.join(d)).map_err(|e| e.to_string())?;
        if args.len() > 4 {
            args.push(":".into());
        }
        args.extend([
            "tar-out".into(),
            format!("/{d}"),
            s(&tar).into(),
            "numericowner:true".into(),
        ]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    run("guestfish", &a)?;
    for d in TAKEN {
        let tar = vr.join(format!("{}.tar", d.replace('/', "_")));
        run(
            "tar",
            &["--numeric-owner", "-xpf", s(&tar), "-C", s(&vr.join(d))],
        )?;
        fs::remove_file(&tar).map_err(|e| e.to_string())?;
    }
    // tar-out's top directory is the extraction's own: its mode and
    // owner are the guest's only in the entries below it.
    let home = format!("home/{USER}");
    let ssh = format!("{home}/.ssh");
    let keys = format!("{ssh}/authorized_keys");
    let mut rows = vec![
        same(
            "authorized_keys content",
            text(&zr.join(&keys)),
            text(&vr.join(&keys)),
        ),
        same(
            "~/.ssh mode, owner",
            meta(&zr.join(&ssh)),
            meta(&vr.join(&ssh)),
        ),
        same(
            "authorized_keys mode, owner",
            meta(&zr.join(&keys)),
            meta(&vr.join(&keys)),
        ),
        password_row(&zr, &vr)?,
        same(
            "root's shadow line but the hash",
            shadow_rest(&zr, "root"),
            shadow_rest(&vr, "root"),
        ),
        same(
            &format!("{USER}'s shadow line"),
            shadow_line(&zr, USER)
                .map(|f| f.join(":"))
                .unwrap_or_default(),
            shadow_line(&vr, USER)
                .map(|f| f.join(":"))
                .unwrap_or_default(),
        ),
        same(
            "/etc/shadow mode, owner",
            meta(&zr.join("etc/shadow")),
            meta(&vr.join("etc/shadow")),
        ),
        same(
            "/etc/hostname",
            text(&zr.join("etc/hostname")),
            text(&vr.join("etc/hostname")),
        ),
        same(
            "/etc/hosts",
            text(&zr.join("etc/hosts")),
            text(&vr.join("etc/hosts")),
        ),
        same(
            "/etc/localtime",
            link(&zr.join("etc/localtime")),
            link(&vr.join("etc/localtime")),
        ),
        same(
            "/etc/timezone",
            text(&zr.join("etc/timezone")),
            text(&vr.join("etc/timezone")),
        ),
        same(
            "/etc/motd content",
            text(&zr.join("etc/motd")),
            text(&vr.join("etc/motd")),
        ),
        same(
            "/etc/motd mode, owner",
            meta(&zr.join("etc/motd")),
            meta(&vr.join("etc/motd")),
        ),
    ];
    let zunit = "zinstall-firstboot.service";
    let vunit = "guestfs-firstboot.service";
    let zf = firstboot(&zr, zunit, "usr/lib/zinstall-firstboot");
    let vf = firstboot(&vr, vunit, "usr/lib/virt-sysprep");
    let (zd, zonce) = describe(&zf, &zr);
    let (vd, vonce) = describe(&vf, &vr);
    rows.push(Row {
        check: format!("first boot runs `{FIRSTBOOT_COMMAND}` once"),
        zinstall: zd,
        virt: vd,
        verdict: if zonce && vonce {
            "equal in effect (own unit names)".into()
        } else {
            format!("differs (once: zinstall {zonce}, virt-customize {vonce})")
        },
    });
    rows.push(Row {
        check: "systemd-analyze verify --man=no --root of the unit".into(),
        zinstall: verify(&zr, zf.unit.as_deref()),
        virt: verify(&vr, vf.unit.as_deref()),
        verdict: "(as said)".into(),
    });
    let mut md = format!(
        "\nThe same guest each way: zinstall's g-0 (a directory) and \
         virt-customize's g-0 (its /etc, /root, /home and \
         /usr/lib/virt-sysprep taken out with guestfish tar-out), the \
         options --ssh-inject {USER}:file:KEY.pub, --root-password \
         file:PWFILE, --firstboot-command '{FIRSTBOOT_COMMAND}', --write \
         /etc/motd:{MOTD}, --timezone {TIMEZONE}, --hostname g-0:\n\n\
         | check | zinstall | virt-customize | verdict |\n|---|---|---|---|\n"
    );
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            r.check,
            r.zinstall.replace('|', "\\|").replace('\n', "\\n"),
            r.virt.replace('|', "\\|").replace('\n', "\\n"),
            r.verdict
        );
    }
    let diff = tree_diff(&zr, &vr);
    let _ = writeln!(
        md,
        "\nEvery path under /etc, /root and /home that differs \
         ({}):\n\n| path | zinstall | virt-customize |\n|---|---|---|",
        diff.len()
    );
    for l in &diff {
        let _ = writeln!(md, "{l}");
    }
    let _ = fs::remove_dir_all(&zout);
    Ok(md)
}
