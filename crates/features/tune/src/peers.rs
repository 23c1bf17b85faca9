//! The tools zinstall is measured against, and how one timed run goes.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use zinstall_core::paths::DEFAULTS_ENV;
use zinstall_verify::{self as verify, CompareOptions};

/// One contender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `zinstall copy` with these tunables.
    Zinstall {
        /// COPY_THREADS.
        threads: usize,
        /// COPY_BATCH.
        batch: usize,
        /// COPY_WALKERS; `None`: the built-in default.
        walkers: Option<usize>,
    },
    /// `zinstall copy` at the default tunables, with another binary (a
    /// build to compare with, named in tables by `label`).
    ZinstallAt {
        /// The binary.
        bin: PathBuf,
        /// Its name in tables.
        label: String,
    },
    /// `zinstall copy --sync` at the default tunables: the copy flushed
    /// by zinstall itself, each file's writeback started as it is done.
    ZinstallSync,
    /// `zinstall copy --writeback always` at the default tunables: the
    /// copy flushed as it goes, without a flush at its end.
    ZinstallAlways,
    /// `zinstall copy` at the default tunables recording a statemap.
    ZinstallRecorded,
    /// `zinstall copy` at the default tunables under `zinstall trace`
    /// (bpftrace and dtrace/statemap.bt; root only).
    ZinstallBpftraced,
    /// `zinstall copy` built without USDT probes, at this path.
    ZinstallNoProbes(PathBuf),
    /// `cp -a`.
    Cp,
    /// `tar -cf - . | tar -xf -`.
    Tar,
    /// `rsync -aH`.
    Rsync,
    /// xcp, at this path.
    Xcp(PathBuf),
    /// fcp, at this path.
    Fcp(PathBuf),
    /// A serial copy through an 8 KiB buffer: what a naive installer does
    /// (`std::fs::copy`-sized buffers, one file at a time).
    Serial8k,
}

impl Tool {
    /// `zinstall copy` with `threads` workers and batches of `batch`, the
    /// other tunables at their defaults.
    pub fn zinstall(threads: usize, batch: usize) -> Tool {
        Tool::Zinstall {
            threads,
            batch,
            walkers: None,
        }
    }

    /// The name in tables.
    pub fn name(&self) -> String {
        match self {
            Tool::Zinstall {
                threads,
                batch,
                walkers: None,
            } => format!("zinstall {threads}x{batch}"),
            Tool::Zinstall {
                threads,
                batch,
                walkers: Some(w),
            } => format!("zinstall {threads}x{batch} w{w}"),
            Tool::ZinstallAt { label, .. } => label.clone(),
            Tool::ZinstallSync => "zinstall 8x128 --sync".into(),
            Tool::ZinstallAlways => "zinstall 8x128 --writeback always".into(),
            Tool::ZinstallRecorded => "zinstall 8x128 --statemap".into(),
            Tool::ZinstallBpftraced => "zinstall 8x128 under bpftrace".into(),
            Tool::ZinstallNoProbes(_) => "zinstall 8x128 without probes".into(),
            Tool::Cp => "cp -a".into(),
            Tool::Tar => "tar | tar".into(),
            Tool::Rsync => "rsync -aH".into(),
            Tool::Xcp(_) => "xcp".into(),
            Tool::Fcp(_) => "fcp".into(),
            Tool::Serial8k => "serial 8 KiB".into(),
        }
    }

    /// The command copying `src` to the new directory `dst`.
    pub fn command(
        &self,
        src: &Path,
        dst: &Path,
        zinstall: &Path,
        bench: &Path,
    ) -> Command {
        match self {
            Tool::Zinstall {
                threads,
                batch,
                walkers,
            } => {
                let mut c = Command::new(zinstall);
                c.env(DEFAULTS_ENV, "/dev/null")
                    .args(["copy", "-q", "--threads"])
                    .arg(threads.to_string())
                    .arg("--batch")
                    .arg(batch.to_string());
                if let Some(w) = walkers {
                    c.arg("--walkers").arg(w.to_string());
                }
                c.arg(src).arg(dst);
                c
            }
            Tool::ZinstallAt { bin, .. } => {
                let mut c = Command::new(bin);
                c.env(DEFAULTS_ENV, "/dev/null")
                    .args(["copy", "-q"])
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::ZinstallNoProbes(bin) => {
                let mut c = Command::new(bin);
                c.env(DEFAULTS_ENV, "/dev/null")
                    .args(["copy", "-q"])
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::ZinstallSync => {
                let mut c = Command::new(zinstall);
                c.env(DEFAULTS_ENV, "/dev/null")
                    .args(["copy", "-q", "--sync"])
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::ZinstallAlways => {
                let mut c = Command::new(zinstall);
                c.env(DEFAULTS_ENV, "/dev/null")
                    .args(["copy", "-q", "--writeback", "always"])
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::ZinstallRecorded => {
                let mut c = Command::new(zinstall);
                let mut json = dst.as_os_str().to_owned();
                json.push(".statemap.json");
                c.env(DEFAULTS_ENV, "/dev/null")
                    .args(["copy", "-q", "--statemap"])
                    .arg(json)
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::ZinstallBpftraced => {
                let mut c = Command::new(zinstall);
                let mut json = dst.as_os_str().to_owned();
                json.push(".statemap.json");
                c.env(DEFAULTS_ENV, "/dev/null")
                    .arg("trace")
                    .arg("-o")
                    .arg(json)
                    .arg("--")
                    .arg(zinstall)
                    .args(["copy", "-q"])
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::Cp => {
                let mut c = Command::new("cp");
                c.arg("-a").arg(src).arg(dst);
                c
            }
            Tool::Tar => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"mkdir "$2" && tar -C "$1" -cf - . | tar -C "$2" -xf -"#)
                    .arg("sh")
                    .arg(src)
                    .arg(dst);
                c
            }
            Tool::Rsync => {
                let mut c = Command::new("rsync");
                let mut s = src.as_os_str().to_owned();
                s.push("/");
                c.arg("-aH").arg(s).arg(dst);
                c
            }
            Tool::Xcp(bin) => {
                let mut c = Command::new(bin);
                // Owners are kept when root, as the other tools do.
                c.args(["-r", "-o"]).arg(src).arg(dst);
                c
            }
            Tool::Fcp(bin) => {
                // `fcp SRC DST` with DST absent copies SRC as DST.
                let mut c = Command::new(bin);
                c.arg(src).arg(dst);
                c
            }
            Tool::Serial8k => {
                let mut c = Command::new(bench);
                c.arg("serial-copy").arg(src).arg(dst);
                c
            }
        }
    }
}

/// A peer copier (`xcp`, `fcp`) installed under `target/peers/bin` (see
/// bench/README.md), or else on PATH.
pub fn find_peer(workspace: &Path, name: &str) -> Option<PathBuf> {
    let local = workspace.join("target/peers/bin").join(name);
    if local.is_file() {
        return Some(local);
    }
    let out = Command::new("sh")
        .args(["-c", "command -v \"$1\"", "sh", name])
        .output()
        .ok()?;
    let p = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// The tool a peer name stands for, if the peer is installed.
pub fn optional_peer(workspace: &Path, name: &str) -> Option<Tool> {
    let bin = find_peer(workspace, name);
    match name {
        "xcp" => bin.map(Tool::Xcp),
        "fcp" => bin.map(Tool::Fcp),
        _ => None,
    }
}

/// Why a contender's run, or the check of what it made, failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeasureError {
    /// The command could not be started.
    #[error("{command}: {error}")]
    Spawn {
        /// The command, as `Command`'s `Debug` shows it.
        command: String,
        /// The system's error.
        error: io::Error,
    },
    /// The command ran and failed.
    #[error("{command}: {status}: {stderr}")]
    Failed {
        /// The command.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// What it said, trimmed.
        stderr: String,
    },
    /// A copy could not be compared with its source.
    #[error("{0}")]
    Compare(zinstall_engine::Error),
    /// A copy differs from its source.
    #[error("{count} differences, first: {first}")]
    Differs {
        /// How many.
        count: usize,
        /// The first few, on one line.
        first: String,
    },
    /// The page cache could not be emptied.
    #[error("dropping caches needs root: /proc/sys/vm/drop_caches: {0}")]
    DropCaches(io::Error),
    /// A copy's filesystem could not be flushed.
    #[error("sync -f {}: {error}", path.display())]
    SyncFs {
        /// The copy.
        path: PathBuf,
        /// The system's error.
        error: io::Error,
    },
    /// The source could not be read ahead of the runs.
    #[error("{}: {error}", path.display())]
    Warm {
        /// The source.
        path: PathBuf,
        /// The system's error.
        error: io::Error,
    },
}

/// Runs `cmd` and returns its wall time; a failure is an error with its
/// stderr.
pub fn time(mut cmd: Command) -> Result<Duration, MeasureError> {
    let t0 = Instant::now();
    let out = cmd.output().map_err(|error| MeasureError::Spawn {
        command: format!("{cmd:?}"),
        error,
    })?;
    let took = t0.elapsed();
    if !out.status.success() {
        return Err(MeasureError::Failed {
            command: format!("{cmd:?}"),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(took)
}

/// Checks that `dst` is a copy of `src` on what every contender keeps:
/// types, modes, contents, symlink targets, hard links, and owners when
/// root. (Peers differ on times and xattrs: tar keeps whole seconds,
/// rsync -aH no xattrs; those are checked by zinstall's own tests.)
pub fn verify_copy(src: &Path, dst: &Path) -> Result<(), MeasureError> {
    let opts = CompareOptions {
        mtime: false,
        atime: false,
        xattrs: false,
        ..CompareOptions::default()
    };
    let c = verify::compare(src, dst, &opts).map_err(MeasureError::Compare)?;
    if c.is_identical() {
        Ok(())
    } else {
        let first: String =
            c.to_string().lines().take(5).collect::<Vec<_>>().join("; ");
        Err(MeasureError::Differs {
            count: c.differences.len(),
            first,
        })
    }
}

/// Reads every file once so that the first timed run does not pay for
/// the cold cache.
pub fn warm(src: &Path) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    for p in walk(src)? {
        if fs::symlink_metadata(&p)?.is_file() {
            let mut f = File::open(&p)?;
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
        }
    }
    Ok(total)
}

/// Empties the page cache (after a sync), so the next run reads from the
/// disk: `echo 3 > /proc/sys/vm/drop_caches`, which needs root.
pub fn drop_caches() -> Result<(), MeasureError> {
    sync();
    fs::write("/proc/sys/vm/drop_caches", b"3\n")
        .map_err(MeasureError::DropCaches)
}

/// `syncfs(2)` of the filesystem holding `path` (what `sync -f PATH`
/// does): the time a copy takes to be on the disk, after its own.
pub fn sync_fs(path: &Path) -> Result<(), MeasureError> {
    File::open(path)
        .and_then(|f| zinstall_engine::fsutil::sync_fs(&f))
        .map_err(|error| MeasureError::SyncFs {
            path: path.to_path_buf(),
            error,
        })
}

/// The name of `tool`'s durable time in tables: its own time and the
/// flush of what it wrote.
pub fn durable_name(tool: &str) -> String {
    format!("{tool}; sync -f")
}

/// `sync(2)`: flushes what a previous run left dirty, so it is not
/// written back during the next timed run.
pub fn sync() {
    crate::sys::sync();
}

/// Every path under `root`, parents first.
fn walk(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let p = out[i].clone();
        if fs::symlink_metadata(&p)?.is_dir() {
            let mut children: Vec<PathBuf> = fs::read_dir(&p)?
                .map(|e| e.map(|e| e.path()))
                .collect::<io::Result<_>>()?;
            children.sort();
            out.extend(children);
        }
        i += 1;
    }
    Ok(out)
}

/// The "before" baseline: one thread, one file at a time, data through an
/// 8 KiB buffer; modes, owners (as root), mtimes and hard links kept.
pub fn serial_copy(src: &Path, dst: &Path) -> io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut dirs = Vec::new();
    for p in walk(src)? {
        let rel = p.strip_prefix(src).unwrap_or(Path::new(""));
        let to = dst.join(rel);
        let md = fs::symlink_metadata(&p)?;
        let ft = md.file_type();
        if ft.is_dir() {
            fs::create_dir(&to)?;
            dirs.push((to, md));
            continue;
        }
        if md.nlink() > 1 {
            if let Some(first) = links.get(&(md.dev(), md.ino())) {
                fs::hard_link(first, &to)?;
                continue;
            }
            links.insert((md.dev(), md.ino()), to.clone());
        }
        if ft.is_symlink() {
            symlink(fs::read_link(&p)?, &to)?;
        } else if ft.is_file() {
            let mut r = File::open(&p)?;
            let mut w = File::create(&to)?;
            loop {
                let n = r.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                w.write_all(&buf[..n])?;
            }
            fs::set_permissions(
                &to,
                fs::Permissions::from_mode(md.mode() & 0o7777),
            )?;
        }
        finish(&to, &md)?;
    }
    for (to, md) in dirs.iter().rev() {
        fs::set_permissions(
            to,
            fs::Permissions::from_mode(md.mode() & 0o7777),
        )?;
        finish(to, md)?;
    }
    Ok(())
}

/// Owner (as root) and mtime, without following symlinks.
fn finish(to: &Path, md: &fs::Metadata) -> io::Result<()> {
    if crate::sys::is_root() {
        std::os::unix::fs::lchown(to, Some(md.uid()), Some(md.gid()))?;
        if !md.file_type().is_symlink() {
            fs::set_permissions(
                to,
                fs::Permissions::from_mode(md.mode() & 0o7777),
            )?;
        }
    }
    let t = std::time::UNIX_EPOCH
        + Duration::new(md.mtime().max(0) as u64, md.mtime_nsec() as u32);
    if !md.file_type().is_symlink() {
        let f = File::options().write(false).read(true).open(to);
        if let Ok(f) = f {
            f.set_modified(t)?;
        }
    }
    Ok(())
}
