//! `zinstall trace -- COMMAND...`: a scheduler statemap of a command,
//! with bpftrace and `dtrace/statemap.bt`.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufWriter, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::exit::Exit;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;

/// The most of a saved trace read for `--tidy`: it is read whole, and a
/// trace of a long run is a few hundred MiB at most.
const RAW_TRACE: zinstall_core::foreign::Kind =
    zinstall_core::foreign::Kind::Other {
        what: "a saved trace",
        cap: 1 << 30,
    };
use zinstall_statemap::{self as statemap, TidyReport};

use crate::output;

/// The script, as shipped in `dtrace/statemap.bt`.
pub const SCRIPT: &str = include_str!("../../../../../dtrace/statemap.bt");

/// Arguments of `zinstall trace`.
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Where to write the statemap.
    #[arg(
        short,
        long,
        value_name = "FILE",
        default_value = "trace.statemap.json"
    )]
    pub output: PathBuf,
    /// The bpftrace script to run (default: the dtrace/statemap.bt this
    /// zinstall was built with).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// The bpftrace program.
    #[arg(long, value_name = "PATH", default_value = "bpftrace")]
    pub bpftrace: PathBuf,
    /// Make a statemap of RAW, output saved from
    /// `bpftrace -c ... statemap.bt`, instead of running a command.
    #[arg(long, value_name = "RAW", conflicts_with = "command")]
    pub tidy: Option<PathBuf>,
    /// The command to trace, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Traces the command (or tidies a saved trace) into a statemap.
pub fn run(args: &TraceArgs) -> Exit {
    let raw = match (&args.tidy, args.command.is_empty()) {
        (Some(raw), _) => match zinstall_core::foreign::read(
            raw,
            zinstall_core::foreign::Follow::Yes,
            RAW_TRACE,
        ) {
            Ok(b) => b,
            Err(e) => {
                output::error(e);
                return Exit::Failed;
            }
        },
        (None, true) => {
            output::error("nothing to trace: zinstall trace -- COMMAND ...");
            return Exit::Usage;
        }
        (None, false) => match trace(args) {
            Ok(b) => b,
            Err(e) => {
                output::error(e);
                return Exit::Failed;
            }
        },
    };
    match write(&raw, &args.output) {
        Ok(r) => {
            for d in &r.diagnostics {
                output::note(format_args!("bpftrace: {d}"));
            }
            if r.lost > 0 {
                output::error(format_args!(
                    "bpftrace lost {} events: the map has gaps",
                    r.lost
                ));
            }
            output::out(format_args!(
                "wrote {} ({} state changes, {} threads)",
                args.output.display(),
                r.data,
                r.renamed.len()
            ));
            if r.lost > 0 { Exit::Failed } else { Exit::Ok }
        }
        Err(e) => {
            output::error(format_args!("write {}: {e}", args.output.display()));
            Exit::Failed
        }
    }
}

fn write(raw: &[u8], path: &Path) -> std::io::Result<TidyReport> {
    let f = File::create(path)?;
    let mut w = BufWriter::new(f);
    let r = statemap::tidy(raw, &mut w)?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(r)
}

/// Where the kernel's tracing filesystem is mounted, and the older place
/// under debugfs; bpftrace reads tracepoint formats from either.
const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Makes sure bpftrace can find the scheduler's tracepoints: tracefs
/// mounted, by this process (as root) when it is not. Returns what was
/// done, if anything, to be said.
fn prepare_tracefs() -> Result<Option<String>, String> {
    let mounted =
        |dir: &str| Path::new(dir).join("events").join("sched").is_dir();
    if mounted(TRACEFS) || mounted(DEBUGFS_TRACING) {
        return Ok(None);
    }
    let how = format!("mount -t tracefs tracefs {TRACEFS}");
    if !Path::new(TRACEFS).is_dir() {
        return Err(format!(
            "{TRACEFS} does not exist: this kernel has no tracefs \
             (CONFIG_TRACING), which bpftrace needs for the scheduler's \
             tracepoints; mount sysfs on /sys if it is not"
        ));
    }
    if !crate::sys::is_root() {
        return Err(format!(
            "tracefs is not mounted on {TRACEFS}, and bpftrace needs it for \
             the scheduler's tracepoints: as root, run `{how}`, then run \
             zinstall trace as root (bpftrace needs root too)"
        ));
    }
    let out = Command::new("mount")
        .args(["-t", "tracefs", "tracefs", TRACEFS])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run `{how}`: {e}"))?;
    if !out.status.success() || !mounted(TRACEFS) {
        return Err(format!(
            "tracefs is not mounted on {TRACEFS}, and `{how}` failed \
             ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(Some(format!(
        "mounted tracefs on {TRACEFS} for bpftrace ({how})"
    )))
}

/// Runs bpftrace with the script on the command; returns its output.
fn trace(args: &TraceArgs) -> Result<Vec<u8>, String> {
    if let Some(done) = prepare_tracefs()? {
        output::note(done);
    }
    // bpftrace -c splits its command at spaces and knows no quoting: it
    // is given a shell script that execs the real argument vector, at a
    // path without spaces.
    let base = std::env::temp_dir();
    let base = if base.as_os_str().as_bytes().contains(&b' ') {
        PathBuf::from("/tmp")
    } else {
        base
    };
    let dir = base.join(format!("zinstall-trace.{}", std::process::id()));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("create {}: {e}", dir.display()))?;
    let r = trace_in(args, &dir);
    let _ = fs::remove_dir_all(&dir);
    r
}

fn trace_in(args: &TraceArgs, dir: &Path) -> Result<Vec<u8>, String> {
    let script = match &args.script {
        Some(p) => p.clone(),
        None => {
            let p = dir.join("statemap.bt");
            fs::write(&p, SCRIPT)
                .map_err(|e| format!("write {}: {e}", p.display()))?;
            p
        }
    };
    let mut sh = b"exec".to_vec();
    for a in &args.command {
        sh.push(b' ');
        sh.extend_from_slice(&quote(a.as_bytes()));
    }
    sh.push(b'\n');
    let run = dir.join("run");
    fs::write(&run, &sh)
        .map_err(|e| format!("write {}: {e}", run.display()))?;
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    #[cfg(target_os = "linux")]
    let memlock_unlimited = crate::sys::raise_memlock();
    #[cfg(not(target_os = "linux"))]
    let memlock_unlimited = true;
    let mut child = Command::new(&args.bpftrace)
        .arg("-q")
        .arg("-c")
        .arg(format!("/bin/sh {}", run.display()))
        .arg(&script)
        .arg(start.to_string())
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{}: not found (apt-get install bpftrace)",
                    args.bpftrace.display()
                )
            } else {
                format!("run {}: {e}", args.bpftrace.display())
            }
        })?;
    let quiet_memlock =
        !memlock_unlimited && memlock_is_moot(crate::sys::kernel_release());
    let relay = child
        .stderr
        .take()
        .map(|e| std::thread::spawn(move || relay_stderr(e, quiet_memlock)));
    let mut raw = Vec::new();
    let read = child.stdout.take().map(|mut o| o.read_to_end(&mut raw));
    let status = child.wait().map_err(|e| format!("bpftrace: {e}"))?;
    if let Some(r) = relay {
        let _ = r.join();
    }
    if let Some(Err(e)) = read {
        return Err(format!("reading bpftrace's output: {e}"));
    }
    if !status.success() {
        return Err(format!("bpftrace failed ({status})"));
    }
    Ok(raw)
}

/// bpftrace's complaint when it cannot raise RLIMIT_MEMLOCK itself.
const MEMLOCK_COMPLAINT: &str = "couldn't set RLIMIT_MEMLOCK";

/// True if a kernel of `release` charges BPF maps and programs to the
/// memory cgroup instead of RLIMIT_MEMLOCK (Linux 5.11 and later), so
/// that bpftrace's failure to raise the limit changes nothing.
fn memlock_is_moot(release: Option<String>) -> bool {
    let Some(release) = release else {
        return false;
    };
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (5, 11)
}

/// Copies bpftrace's standard error to ours, line by line; with
/// `quiet_memlock`, without its RLIMIT_MEMLOCK complaint, which on this
/// kernel is noise: the limit was raised as far as this process may, and
/// the kernel does not use it for BPF.
fn relay_stderr(from: impl Read, quiet_memlock: bool) {
    use std::io::{BufRead, Write};
    let mut lines = std::io::BufReader::new(from);
    let mut line = Vec::new();
    let stderr = std::io::stderr();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complaint = line
            .windows(MEMLOCK_COMPLAINT.len())
            .any(|w| w == MEMLOCK_COMPLAINT.as_bytes());
        if quiet_memlock && complaint {
            continue;
        }
        let _ = stderr.lock().write_all(&line);
    }
}

/// `s` as one word for sh: in single quotes, each `'` as `'\''`.
fn quote(s: &[u8]) -> Vec<u8> {
    let mut q = vec![b'\''];
    for &b in s {
        if b == b'\'' {
            q.extend_from_slice(b"'\\''");
        } else {
            q.push(b);
        }
    }
    q.push(b'\'');
    q
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn quoting_survives_the_shell() {
        let words: [&[u8]; 4] = [b"a b", b"it's", b"", b"$HOME \"x\" `y`"];
        let mut sh = b"printf '%s|'".to_vec();
        for w in words {
            sh.push(b' ');
            sh.extend_from_slice(&quote(w));
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&sh))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"a b|it's||$HOME \"x\" `y`|");
    }
}
