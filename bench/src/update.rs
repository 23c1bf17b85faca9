//! `bench update`: `zinstall update` of a root after a percentage of its
//! source tree's files changed, were removed or were added, against a
//! fresh install of the new source and `rsync -aH --delete --link-dest`
//! of it into a new directory beside the old root (the anchor), and an
//! update with nothing changed; interleaved.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use zinstall_tune::peers;
use zinstall_tune::report;

/// A deterministic sequence (xorshift): the same files change each time
/// the bench runs.
struct Seq(u64);

impl Seq {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Every regular file beneath `dir`, sorted by path.
pub(crate) fn files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut names: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let t = e.file_type()?;
        if t.is_dir() {
            files(&e.path(), out)?;
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

/// Changes `percent` of the files under `tree`: a third appended to, a
/// third removed, a third with a new file beside them. Returns how many.
fn mutate(tree: &Path, percent: f64) -> Result<usize, String> {
    let mut all = Vec::new();
    files(tree, &mut all).map_err(|e| format!("{}: {e}", tree.display()))?;
    let n = ((all.len() as f64) * percent / 100.0).round() as usize;
    let mut seq = Seq(0x9e37_79b9_7f4a_7c15);
    for i in (1..all.len()).rev() {
        all.swap(i, (seq.next() % (i as u64 + 1)) as usize);
    }
    for (i, p) in all.iter().take(n).enumerate() {
        let r =
            match i % 3 {
                0 => fs::OpenOptions::new().append(true).open(p).and_then(
                    |mut f| std::io::Write::write_all(&mut f, b"changed\n"),
                ),
                1 => fs::remove_file(p),
                _ => fs::write(
                    p.with_extension(format!("new{i}")),
                    format!("new file {i}\n").repeat(50),
                ),
            };
        r.map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(n)
}

fn zinstall(z: &Path) -> Command {
    let mut c = Command::new(z);
    c.env(zinstall_core::paths::DEFAULTS_ENV, "/dev/null");
    c
}

fn profile(at: &Path, source_root: &Path, tree: &str) -> Result<(), String> {
    fs::write(
        at,
        format!(
            "source_root = \"{}\"\ntrees = [\"{tree}\"]\nlog = \"/dev/null\"\n",
            source_root.display()
        ),
    )
    .map_err(|e| format!("{}: {e}", at.display()))
}

fn run_ok(mut c: Command) -> Result<(), String> {
    let o = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{c:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
}

/// Runs the bench; prints a markdown table.
pub fn bench(
    runs: usize,
    tree: &Path,
    percent: f64,
    scratch: &Path,
    z: &Path,
) -> Result<(), String> {
    if !z.is_file() {
        return Err(format!(
            "{}: build it first: cargo build --release -p zinstall",
            z.display()
        ));
    }
    let io = |e: std::io::Error| e.to_string();
    let _ = fs::remove_dir_all(scratch.join("update"));
    let base = scratch.join("update");
    fs::create_dir_all(&base).map_err(io)?;
    // Two source roots: as installed, and changed.
    let name = "usr/share";
    let (old, new) = (base.join("old"), base.join("new"));
    for src in [&old, &new] {
        fs::create_dir_all(src.join("usr")).map_err(io)?;
        let mut c = zinstall(z);
        c.arg("copy").arg(tree).arg(src.join(name));
        run_ok(c)?;
    }
    let n = mutate(&new.join(name), percent)?;
    eprintln!("{n} files of {} changed, removed or added", tree.display());
    let (p_old, p_new) = (base.join("old.toml"), base.join("new.toml"));
    profile(&p_old, &old, name)?;
    profile(&p_new, &new, name)?;
    let install = |profile: &Path, zp: &Path| {
        let _ = fs::remove_dir_all(zp);
        let mut c = zinstall(z);
        c.args(["install", "--no-sync", "--profile"])
            .arg(profile)
            .arg("--zonepath")
            .arg(zp);
        c
    };
    let zp = base.join("zp");
    let fresh = base.join("fresh");
    let anchor = base.join("anchor");
    run_ok(install(&p_old, &anchor))?;
    let linked = base.join("rsync");
    let names = [
        "zinstall update",
        "fresh install",
        "rsync --link-dest",
        "update, nothing changed",
    ];
    let mut bytes = 0u64;
    let mut flushed: Vec<Vec<std::time::Duration>> =
        vec![Vec::new(); names.len()];
    let samples = report::interleaved(
        &names,
        runs,
        |i| {
            let t = match i {
                0 => {
                    run_ok(install(&p_old, &zp))?;
                    peers::sync();
                    let mut c = zinstall(z);
                    c.args(["update", "--json", "--profile"])
                        .arg(&p_new)
                        .arg("--source-root")
                        .arg(&new)
                        .arg("--zonepath")
                        .arg(&zp);
                    let t1 = Instant::now();
                    let o = c.output().map_err(|e| e.to_string())?;
                    let took = t1.elapsed();
                    if !o.status.success() {
                        return Err(
                            String::from_utf8_lossy(&o.stdout).into_owned()
                        );
                    }
                    let text = String::from_utf8_lossy(&o.stdout);
                    bytes = text
                        .split("\"bytes\":")
                        .nth(1)
                        .and_then(|s| {
                            s.split(|c: char| !c.is_ascii_digit())
                                .next()?
                                .parse()
                                .ok()
                        })
                        .unwrap_or(0);
                    Ok(took)
                }
                1 => {
                    let c = install(&p_new, &fresh);
                    peers::sync();
                    peers::time(c)
                }
                2 => {
                    let _ = fs::remove_dir_all(&linked);
                    fs::create_dir_all(linked.join("usr")).map_err(io)?;
                    peers::sync();
                    let mut c = Command::new("rsync");
                    c.arg("-aH")
                        .arg("--delete")
                        .arg(format!(
                            "--link-dest={}/",
                            anchor.join("root").join(name).display()
                        ))
                        .arg(format!("{}/", new.join(name).display()))
                        .arg(format!("{}/", linked.join(name).display()));
                    peers::time(c)
                }
                _ => {
                    let mut c = zinstall(z);
                    c.args(["update", "--profile"])
                        .arg(&p_new)
                        .arg("--source-root")
                        .arg(&new)
                        .arg("--zonepath")
                        .arg(&zp);
                    peers::time(c)
                }
            }
            .map_err(|e| e.to_string())?;
            // To the disk: its own time and the flush of what it left dirty
            // (an update flushes before it switches; the others do not).
            let s0 = Instant::now();
            peers::sync_fs(&base).map_err(|e| e.to_string())?;
            let d = t + s0.elapsed();
            eprintln!(
                "    {:<24} {:>8.3} s with sync -f",
                names[i],
                d.as_secs_f64()
            );
            flushed[i].push(d);
            Ok(t)
        },
        &mut |l| eprintln!("{l}"),
    )?;
    println!(
        "\nupdate of {} after {percent}% of its files changed ({n}); \
         {bytes} bytes written by the update\n\n{}",
        tree.display(),
        report::markdown(&samples, "fresh install")
    );
    println!("{}", report::markdown(&samples, "rsync --link-dest"));
    let durable: Vec<report::Samples> = names
        .iter()
        .zip(flushed)
        .map(|(n, times)| report::Samples {
            tool: peers::durable_name(n),
            times,
        })
        .collect();
    println!(
        "To the disk (each run, then `sync -f` of what it wrote):\n\n{}",
        report::markdown(&durable, &peers::durable_name("fresh install"))
    );
    println!(
        "{}",
        report::markdown(&durable, &peers::durable_name("rsync --link-dest"))
    );
    let _ = fs::remove_dir_all(&base);
    Ok(())
}
