//! The job's process: `zinstalld --job-process UID GID GROUPS PARENT`,
//! started by the daemon with the control socket and the two granted
//! prefixes as descriptors 3, 4 and 5. It becomes the caller before it
//! reads anything, then copies beneath the descriptors it was handed.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zinstall_engine::beneath::Root;
use zinstall_engine::{Cancel, OnError, Plan, Tunables, WorkerLimit};

/// The longest line the daemon tells after the order.
const MAX_TOLD: usize = 256;

use super::wire::{
    CONTROL_FD, DST_ROOT_FD, MAX_LINE, Order, SRC_ROOT_FD, Said, Told,
};
use crate::protocol::{ErrorKind, NoticeInfo, WireError};
use crate::sys::{self, Identity};

/// The job's process could not start its job: the daemon's hand-off
/// (control socket, arguments, identity, descriptors, order) was not as
/// the daemon makes it, or the daemon was gone. Whatever could be said
/// was said on the control socket.
#[derive(Debug)]
pub struct NotStarted;

/// Runs the job's process; `args` follow [`super::CHILD_ARG`]. The job's
/// own result, success or failure, is told on the control socket.
pub fn main(args: &[String]) -> Result<(), NotStarted> {
    // Whatever else was inherited goes before anything is read.
    sys::close_from(DST_ROOT_FD + 1);
    let Some(control) = sys::take_fd(CONTROL_FD) else {
        return Err(NotStarted);
    };
    let control = UnixStream::from(control);
    let said = Arc::new(Mutex::new(control));
    let fail = |message: String| {
        tell(
            &said,
            &Said::Failed {
                error: WireError::new(ErrorKind::Internal, message),
            },
        );
        Err(NotStarted)
    };
    let (who, parent) = match parse_args(args) {
        Some(a) => a,
        None => {
            return fail(format!(
                "zinstalld job process: bad arguments {args:?}"
            ));
        }
    };
    if let Err(e) = sys::become_caller(&who) {
        return fail(format!(
            "zinstalld job process: cannot become uid {}: {e}",
            who.uid
        ));
    }
    // The parent-death signal was set after the daemon may have gone.
    if sys::parent_pid() != parent {
        return Err(NotStarted);
    }
    let (Some(src_fd), Some(dst_fd)) =
        (sys::take_fd(SRC_ROOT_FD), sys::take_fd(DST_ROOT_FD))
    else {
        return fail("zinstalld job process: no prefix descriptors".into());
    };
    let order = match read_order(&said) {
        Ok(o) => o,
        Err(e) => return fail(format!("zinstalld job process: order: {e}")),
    };
    let result = run(order, src_fd, dst_fd, &said);
    tell(&said, &result);
    Ok(())
}

/// `UID GID GROUPS PARENT`, GROUPS comma-separated (maybe empty).
fn parse_args(args: &[String]) -> Option<(Identity, u32)> {
    let [uid, gid, groups, parent] = args else {
        return None;
    };
    let groups = groups
        .split(',')
        .filter(|g| !g.is_empty())
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()
        .ok()?;
    Some((
        Identity {
            uid: uid.parse().ok()?,
            gid: gid.parse().ok()?,
            groups,
        },
        parent.parse().ok()?,
    ))
}

fn read_order(control: &Mutex<UnixStream>) -> io::Result<Order> {
    let stream = control
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .try_clone()?;
    let mut line = Vec::new();
    BufReader::new(stream)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)?;
    serde_json::from_slice(&line).map_err(io::Error::other)
}

/// Sends one report to the daemon; a daemon that is gone takes this
/// process with it (its parent-death signal), so errors are dropped.
fn tell(control: &Mutex<UnixStream>, said: &Said) {
    let Ok(mut line) = serde_json::to_vec(said) else {
        return;
    };
    line.push(b'\n');
    let mut c = control.lock().unwrap_or_else(|p| p.into_inner());
    let _gone = c.write_all(&line);
}

/// Counts what the run has done, for the reporter.
#[derive(Debug, Default)]
struct Counted {
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl zinstall_engine::Progress for Counted {
    fn advance(&self, entries: u64, bytes: u64) {
        self.entries.fetch_add(entries, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

fn run(
    order: Order,
    src_fd: std::os::fd::OwnedFd,
    dst_fd: std::os::fd::OwnedFd,
    control: &Arc<Mutex<UnixStream>>,
) -> Said {
    let failed = |e: &zinstall_engine::Error| Said::Failed {
        error: WireError::from_copier(e),
    };
    let roots = Root::from_fd(src_fd, &order.src_root)
        .and_then(|s| Ok((s, Root::from_fd(dst_fd, &order.dst_root)?)));
    let (src_root, dst_root) = match roots {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    let tunables = Tunables {
        copy_threads: order.threads,
        copy_walkers: order.walkers,
        copy_batch: order.batch,
        copy_bufsize: order.bufsize,
        copy_writeback: order.writeback,
    };
    let cancel = Cancel::new();
    let counted = Arc::new(Counted::default());
    // Of its workers, only its share of the daemon's budget works.
    let limit = Arc::new(WorkerLimit::new(order.allowed));
    let mut plan = Plan::new(&order.src, &order.dst)
        .worker_limit(Arc::clone(&limit))
        .on_error(OnError::KeepGoing)
        .tunables(tunables)
        .cancel(cancel.clone())
        .progress(Arc::clone(&counted) as Arc<dyn zinstall_engine::Progress>)
        .merge(order.merge)
        .sync(order.sync)
        .skip_special(order.skip_special)
        .within_root(dst_root)
        .source_within_root(src_root);
    match zinstall_engine::rules::excludes(&order.exclude) {
        Ok(Some(rules)) => plan = plan.rules(rules, Path::new("")),
        Ok(None) => {}
        Err(e) => return failed(&e),
    }
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let reporter = report_progress(control, &counted, &cancel, &limit, stopped);
    let r = plan.run();
    // The reporter ends at once when its channel closes.
    drop(stop);
    let _joined = reporter.map(|h| h.join());
    tell(
        control,
        &Said::Progress {
            entries: counted.entries.load(Ordering::Relaxed),
            bytes: counted.bytes.load(Ordering::Relaxed),
        },
    );
    match r {
        Ok(r) => Said::Done {
            notices: NoticeInfo::of(&r.notices),
            stats: r.stats,
        },
        Err(f) => Said::Failed {
            error: WireError::from_failure(&f),
        },
    }
}

/// A thread that reports progress a few times a second, and cancels the
/// run at SIGTERM, SIGINT or SIGHUP, or when the daemon closes its end;
/// and one that takes the share of workers the daemon tells it.
fn report_progress(
    control: &Arc<Mutex<UnixStream>>,
    counted: &Arc<Counted>,
    cancel: &Cancel,
    limit: &Arc<WorkerLimit>,
    stopped: std::sync::mpsc::Receiver<()>,
) -> Option<std::thread::JoinHandle<()>> {
    let term = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        let _registered = signal_hook::flag::register(sig, Arc::clone(&term));
    }
    // After the order the daemon sends only its share of workers, a line
    // at a time; the end of the stream (or anything else) means it
    // closed its end.
    if let Ok(watch) = control
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .try_clone()
    {
        let (term, limit) = (Arc::clone(&term), Arc::clone(limit));
        let _watcher = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                let mut lines = BufReader::new(watch);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    let read = (&mut lines)
                        .take(MAX_TOLD as u64)
                        .read_until(b'\n', &mut line);
                    match read.map(|_| serde_json::from_slice::<Told>(&line)) {
                        Ok(Ok(Told::Workers { n })) => limit.set(n),
                        _ => break,
                    }
                }
                term.store(true, Ordering::Relaxed);
            });
    }
    let (control, counted, cancel) =
        (Arc::clone(control), Arc::clone(counted), cancel.clone());
    std::thread::Builder::new()
        .name("progress".into())
        .spawn(move || {
            const TICK: Duration = Duration::from_millis(50);
            let mut ticks = 0u32;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(TICK)
            {
                if term.load(Ordering::Relaxed) {
                    cancel.cancel();
                }
                ticks += 1;
                if ticks.is_multiple_of(4) {
                    tell(
                        &control,
                        &Said::Progress {
                            entries: counted.entries.load(Ordering::Relaxed),
                            bytes: counted.bytes.load(Ordering::Relaxed),
                        },
                    );
                }
            }
        })
        .ok()
}
