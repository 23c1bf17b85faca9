//! A caller's granted copy runs in a process of its own, with the
//! caller's whole identity: the model of OpenSSH's privilege separation
//! and systemd-importd's per-transfer helpers.
//!
//! ```text
//!  zinstalld (root)                          zinstalld-job (the caller)
//!  opens each granted prefix, no    fd 3  ┌──────────────────────────────┐
//!  symlink on the way; starts the ──────▶ │ closes all but fds 3, 4, 5;  │
//!  job's process with the control  fd 4   │ uids, gids, groups: the      │
//!  socket and the two prefixes     fd 5   │ caller's; no capability in   │
//!  (nothing else), then sends the         │ any set; no_new_privs; not   │
//!  order ─────────────────────────────▶   │ traceable; dies with the     │
//!  ◀──────────── progress, result ─────── │ daemon; only then reads the  │
//!  cancel: SIGTERM, SIGKILL after 5 s     │ order and copies beneath fds │
//!                                         └──────────────────────────────┘
//! ```
//!
//! The process's `/proc/self` is its own: a mistake anywhere in path
//! handling lands on the caller's own rights, not the daemon's, and no
//! descriptor of the daemon's (other jobs' trees, its socket, its log) is
//! there to be reached. Its workers come out of the daemon's budget, a
//! fair share of it ([`crate::shares`]) that the daemon tells it as it
//! changes; a process that makes no progress for `job_stall_secs` (no
//! entry or byte done, no CPU time used: stopped by its caller, hung) is
//! killed and its job failed, its share given to the others. Root's own
//! jobs stay in the daemon.
//!
//! Everything the process says is read as a stranger's words: lines of
//! bounded length, parsed into the types of `wire`, nothing else.

mod child;
mod wire;

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slog::{info, warn};

use zinstall_engine::beneath::Root;

pub use child::{NotStarted, main as child_main};
pub use wire::CHILD_ARG;

use crate::auth::Granted;
use crate::jobs::Job;
use crate::protocol::{
    CleanPath, CopyArgs, CopyReply, ErrorKind, NoticeInfo, WireError,
};
use crate::state::Daemon;
use crate::sys::{self, Identity, Peer};
use wire::{MAX_LINE, Order, Said};

/// How long a job's process has to end after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// Runs a caller's granted copy in a job's process and relays its
/// progress and result.
pub(crate) fn granted_copy(
    d: &Daemon,
    job: &Arc<Job>,
    a: &CopyArgs,
    peer: &Peer,
    granted: &Granted,
) -> Result<CopyReply, WireError> {
    job.set_phase("copy");
    let (src, dst) = (&a.src, &a.dst);
    let roots = GrantedRoots::open(a, peer, granted)?;
    let tunables = d.tunables();
    // A member of the granted jobs' budget from now on: its share may be
    // none for a while (paused), until its turn comes.
    let share = d
        .process_workers
        .join(job.id, peer.uid, tunables.copy_threads);
    let allowed = share.workers();
    let order = Order {
        src: src.to_path_buf(),
        dst: dst.to_path_buf(),
        src_root: roots.src_prefix,
        dst_root: roots.dst_prefix,
        merge: a.merge,
        sync: a.sync,
        skip_special: a.skip_special,
        exclude: a.exclude.clone(),
        threads: tunables.copy_threads.max(1),
        allowed,
        walkers: tunables.walkers().clamp(1, allowed.max(1)),
        batch: tunables.copy_batch,
        bufsize: tunables.copy_bufsize,
        writeback: tunables.copy_writeback,
    };
    let (mut mine, theirs) =
        UnixStream::pair().map_err(|e| internal("cannot connect", e))?;
    let mut child = start(peer, &theirs, &roots.src, &roots.dst)?;
    // The process holds its own copies now.
    drop((theirs, roots.src, roots.dst));
    let pid = child.id();
    job.set_process(Some(pid));
    info!(d.log(), "job process"; "job" => job.id, "pid" => pid, "uid" => peer.uid,
          "workers" => allowed);
    let sent = serde_json::to_vec(&order)
        .map_err(io::Error::other)
        .and_then(|mut line| {
            line.push(b'\n');
            mine.write_all(&line)
        });
    let outcome = match sent {
        Ok(()) => relay(job, mine, pid, &share, d.config().job_stall)
            .map(|(stats, notices)| CopyReply::new(src, dst, stats, notices)),
        Err(e) => {
            sys::signal(pid, libc::SIGKILL);
            Err(internal("cannot send its order to", e))
        }
    };
    let status = reap(&mut child);
    job.set_process(None);
    drop(share);
    match outcome {
        Ok(v) => Ok(v),
        Err(e) if e.kind == ErrorKind::Internal => {
            warn!(d.log(), "job process failed"; "job" => job.id, "pid" => pid,
                  "status" => format!("{status:?}"),
                  "error" => crate::protocol::clip_middle(&e.message, crate::protocol::MAX_ERROR_TEXT));
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// A copy's source and destination prefixes, as its grant matched them,
/// each opened by the daemon.
struct GrantedRoots {
    src_prefix: PathBuf,
    dst_prefix: PathBuf,
    src: Root,
    dst: Root,
}

impl GrantedRoots {
    /// Each path is opened by the daemon beneath the prefix authorization
    /// matched, with no symlink anywhere on its way (a parent the caller
    /// owns cannot swap it for a link); the job's process reaches the
    /// paths beneath these descriptors alone.
    fn open(
        a: &CopyArgs,
        peer: &Peer,
        granted: &Granted,
    ) -> Result<GrantedRoots, WireError> {
        let prefix = |p: &CleanPath| {
            granted.prefix(p).map(Path::to_path_buf).ok_or_else(|| {
                WireError::new(
                    ErrorKind::Internal,
                    format!(
                        "zinstalld: {}: no grant was matched for uid {}'s copy",
                        p.display(),
                        peer.uid
                    ),
                )
            })
        };
        let (src_prefix, dst_prefix) = (prefix(&a.src)?, prefix(&a.dst)?);
        let open = |p: &Path| {
            Root::open_no_symlinks(p).map_err(|e| WireError::from_copier(&e))
        };
        let (src, dst) = (open(&src_prefix)?, open(&dst_prefix)?);
        Ok(GrantedRoots {
            src_prefix,
            dst_prefix,
            src,
            dst,
        })
    }
}

/// A failure to start or talk to a job's process.
fn internal(what: &str, e: io::Error) -> WireError {
    WireError::new(
        ErrorKind::Internal,
        format!("zinstalld: {what} a job's process: {e}"),
    )
}

/// Starts a job's process as `peer`, handed its end of the control
/// socket and the two roots.
fn start(
    peer: &Peer,
    theirs: &UnixStream,
    src_root: &Root,
    dst_root: &Root,
) -> Result<std::process::Child, WireError> {
    let who = Identity {
        uid: peer.uid,
        gid: peer.gid,
        groups: peer.groups.clone(),
    };
    let args = vec![
        CHILD_ARG.to_string(),
        who.uid.to_string(),
        who.gid.to_string(),
        who.groups
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        sys::pid().to_string(),
    ];
    let exe = sys::self_exe().map_err(|e| internal("cannot find", e))?;
    sys::spawn_job_process(
        &exe,
        &args,
        &[theirs.as_fd(), src_root.as_fd(), dst_root.as_fd()],
    )
    .map_err(|e| internal("cannot start", e))
}

/// Waits for a job's process that has closed its end of the control
/// socket; one that does not end within [`GRACE`] (stopped by its
/// caller, say) is killed, so that it holds no place.
fn reap(
    child: &mut std::process::Child,
) -> io::Result<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < GRACE {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        // It is ending as a rule: its exit comes within a few ms.
        std::thread::sleep(Duration::from_millis(2));
    }
    let _gone = child.kill();
    child.wait()
}

/// Whether a job's process is making progress: its counts of entries
/// and bytes as it reports them, and the CPU time it uses (where the
/// system tells it), seen to change. Only time with workers counts: a
/// paused job (others having their turn) is waiting, not stalled, and
/// its turns add up.
struct Watch {
    seen: (u64, u64, Option<u64>),
    /// Time with workers and without progress, since the last progress.
    idle: Duration,
    last: Instant,
    stall: Duration,
    pid: u32,
}

impl Watch {
    fn new(pid: u32, stall: Duration) -> Watch {
        Watch {
            seen: (0, 0, sys::process_cpu_ticks(pid)),
            idle: Duration::ZERO,
            last: Instant::now(),
            stall,
            pid,
        }
    }

    /// Whether the process has had workers for the whole window without
    /// making progress; `workers` is its share now.
    fn stalled(&mut self, job: &Job, workers: usize) -> bool {
        let now = (
            job.entries.load(std::sync::atomic::Ordering::Relaxed),
            job.bytes.load(std::sync::atomic::Ordering::Relaxed),
            sys::process_cpu_ticks(self.pid),
        );
        let since = self.last.elapsed();
        self.last = Instant::now();
        if now != self.seen {
            self.seen = now;
            self.idle = Duration::ZERO;
        } else if workers > 0 {
            self.idle += since;
        }
        self.idle >= self.stall
    }
}

/// Reads what the job's process says until it closes its end: progress
/// to the job, the result returned. Its share of the workers is told to
/// it as it changes. A cancelled job's process gets SIGTERM, then
/// SIGKILL after [`GRACE`]; one that makes no progress for `stall` is
/// killed, and the job fails saying so.
fn relay(
    job: &Job,
    control: UnixStream,
    pid: u32,
    share: &crate::shares::Share<'_>,
    stall: Duration,
) -> Result<(zinstall_engine::Stats, Vec<NoticeInfo>), WireError> {
    const TICK: Duration = Duration::from_millis(100);
    let _timeout = control.set_read_timeout(Some(TICK));
    // A process that does not read (stopped) never holds the daemon: a
    // share it misses is counted all the same.
    let mut tell = control.try_clone().ok();
    if let Some(t) = &tell {
        let _timeout = t.set_write_timeout(Some(TICK));
    }
    let mut told = share.workers();
    let mut watch = Watch::new(pid, stall);
    let mut r = BufReader::new(control);
    let mut line = Vec::new();
    let mut result = None;
    let mut term_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        if job.cancel.is_cancelled() && term_at.is_none() {
            sys::signal(pid, libc::SIGTERM);
            term_at = Some(Instant::now());
        }
        let workers = share.workers();
        if workers != told {
            told = workers;
            if let Some(t) = &mut tell {
                tell_workers(t, workers);
            }
        }
        if term_at.is_none() && watch.stalled(job, workers) {
            sys::signal(pid, libc::SIGKILL);
            return Err(WireError::new(
                ErrorKind::Stalled,
                format!(
                    "zinstalld: the job's process {pid} stopped making \
                     progress: nothing done for {} s (job_stall_secs); \
                     killed",
                    stall.as_secs()
                ),
            ));
        }
        if !killed && term_at.is_some_and(|t| t.elapsed() > GRACE) {
            sys::signal(pid, libc::SIGKILL);
            killed = true;
        }
        let said = match hear(&mut r, &mut line, pid)? {
            Heard::Nothing => continue,
            Heard::Closed => break,
            Heard::Said(said) => *said,
        };
        match said {
            Said::Progress { entries, bytes } => job.set_done(entries, bytes),
            Said::Done { stats, notices } => {
                result = Some(Ok((stats, notices)));
            }
            Said::Failed { error } => result = Some(Err(error)),
        }
    }
    result.unwrap_or_else(|| {
        if job.cancel.is_cancelled() {
            Err(WireError::new(ErrorKind::Cancelled, "cancelled"))
        } else {
            Err(broken(pid, "ended without a result".into()))
        }
    })
}

/// Tells the job's process its share of the workers; one it misses
/// (not reading) is counted all the same.
fn tell_workers(t: &mut UnixStream, workers: usize) {
    if let Ok(mut line) =
        serde_json::to_vec(&wire::Told::Workers { n: workers })
    {
        line.push(b'\n');
        let _missed = t.write_all(&line);
    }
}

/// What one read of a job's process's control socket gave.
enum Heard {
    /// No whole line yet.
    Nothing,
    /// It closed its end.
    Closed,
    /// A whole line: what it said (boxed: a result is large, a
    /// progress line small).
    Said(Box<Said>),
}

/// Reads on toward the next line of the job's process `pid` (into
/// `line`); a read that fails, a line too long or one that does not
/// parse kills the process.
fn hear(
    r: &mut BufReader<UnixStream>,
    line: &mut Vec<u8>,
    pid: u32,
) -> Result<Heard, WireError> {
    let buf = match r.fill_buf() {
        Ok(b) => b,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::Interrupted
            ) =>
        {
            return Ok(Heard::Nothing);
        }
        // Its end closed with a share we told it unread: the end of
        // what it says, as a close is.
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
            return Ok(Heard::Closed);
        }
        Err(e) => {
            sys::signal(pid, libc::SIGKILL);
            return Err(broken(pid, format!("read: {e}")));
        }
    };
    if buf.is_empty() {
        return Ok(Heard::Closed);
    }
    let (take, end) = match buf.iter().position(|b| *b == b'\n') {
        Some(i) => (i + 1, true),
        None => (buf.len(), false),
    };
    line.extend_from_slice(&buf[..take]);
    r.consume(take);
    if line.len() > MAX_LINE {
        sys::signal(pid, libc::SIGKILL);
        return Err(broken(
            pid,
            format!("a line longer than {MAX_LINE} bytes"),
        ));
    }
    if !end {
        return Ok(Heard::Nothing);
    }
    let said: Said = match serde_json::from_slice(line) {
        Ok(s) => s,
        Err(e) => {
            sys::signal(pid, libc::SIGKILL);
            return Err(broken(pid, format!("unreadable report: {e}")));
        }
    };
    line.clear();
    Ok(Heard::Said(Box::new(said)))
}

/// The job's process `pid` broke the protocol, or the socket failed.
fn broken(pid: u32, why: String) -> WireError {
    WireError::new(
        ErrorKind::Internal,
        format!("zinstalld: job process {pid}: {why}"),
    )
}
