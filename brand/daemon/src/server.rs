//! The service: the socket, the accept loop, one thread per connection,
//! one per job, and the pool every job's workers come from.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use slog::{Logger, info, warn};

use copier::Pool;

use crate::auth;
use crate::config::{Config, ConfigError};
use crate::jobs::State;
use crate::limits::Summary;
use crate::ops;
use crate::protocol::{
    Answer, BadRequest, Call, ErrorKind, JobInfo, MAX_JOBS_REPLY, MAX_LINE,
    Reply, Request, VERSION, VersionReply, WireError,
};
pub use crate::state::Options;
use crate::state::{self, Daemon};
use crate::sys::{self, Peer};

/// One connection's place, given back when dropped (root's take none).
struct Place {
    d: Arc<Daemon>,
    slot: Option<u64>,
}

impl Place {
    /// Marks the connection as waiting for its next request (it may then
    /// be closed to make room for another caller), or not.
    fn idle(&self, idle: bool) {
        if let Some(id) = self.slot {
            let mut c =
                self.d.connections.lock().unwrap_or_else(|p| p.into_inner());
            c.set_idle(id, idle);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(id) = self.slot {
            let mut c =
                self.d.connections.lock().unwrap_or_else(|p| p.into_inner());
            c.remove(id);
        }
    }
}

/// Logs a refusal of `uid` through `line` unless the uid has had its
/// share of lines in this window ([`Config::refusal_log_burst`]); a
/// window of its that ended with refusals unlogged is summed up first.
fn log_refusal(
    d: &Daemon,
    config: &Config,
    uid: u32,
    line: impl FnOnce(&Logger),
) {
    let (log, ended) = d
        .refusals
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .refused(
            uid,
            Instant::now(),
            config.refusal_log_burst,
            config.refusal_log_window,
        );
    if let Some(s) = ended {
        log_summary(&d.log, s);
    }
    if log {
        line(&d.log);
    }
}

fn log_summary(log: &Logger, s: Summary) {
    warn!(log, "… and {} more refusals from uid {} in the last {} s", s.count, s.uid, s.secs;
          "uid" => s.uid, "count" => s.count, "window_secs" => s.secs);
}

/// Sums up the refusal windows that ended (from the accept loop, so that
/// a flood that stopped is still told).
fn refusal_tick(d: &Daemon) {
    let mut r = d.refusals.lock().unwrap_or_else(|p| p.into_inner());
    if r.is_empty() {
        return;
    }
    let window = d.config().refusal_log_window;
    for s in r.tick(Instant::now(), window) {
        log_summary(&d.log, s);
    }
}

/// Why the service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The defaults file or the worker pool.
    #[error(transparent)]
    Engine(#[from] copier::Error),
    /// The socket.
    #[error("{path}: {op}: {error}", path = path.display())]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// Why it failed.
        error: io::Error,
    },
}

/// Runs the service until SIGTERM or SIGINT: then stops accepting,
/// cancels running jobs, waits for them and returns.
pub fn run(opts: Options, log: Logger) -> Result<(), ServeError> {
    let mut config = Config::load(&opts.config, opts.config_required)?;
    if let Some(s) = &opts.socket {
        config.socket = s.clone();
    }
    let tunables = state::tunables(&config)?;
    // Before the pool, whose descriptor budget is derived from the limit.
    sys::raise_nofile();
    let pool =
        Pool::new(tunables.copy_threads)?.with_walkers(tunables.walkers());
    let term = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for (sig, flag) in [
        (signal_hook::consts::SIGTERM, &term),
        (signal_hook::consts::SIGINT, &term),
        (signal_hook::consts::SIGHUP, &hup),
    ] {
        signal_hook::flag::register(sig, Arc::clone(flag)).map_err(
            |error| ServeError::Socket {
                path: config.socket.clone(),
                op: "signal handler",
                error,
            },
        )?;
    }
    let (listener, activated) = match sys::activated_listener() {
        Some(l) => (l, true),
        None => (bind(&config)?, false),
    };
    listener
        .set_nonblocking(true)
        .map_err(|error| ServeError::Socket {
            path: config.socket.clone(),
            op: "set non-blocking",
            error,
        })?;
    let d = Arc::new(Daemon::new(
        opts,
        config.clone(),
        tunables,
        pool,
        log.clone(),
    ));
    info!(log, "listening"; "socket" => %config.socket.display(), "activated" => activated,
          "workers" => tunables.copy_threads, "walkers" => tunables.walkers(), "pid" => sys::pid(), "version" => &d.opts.version);
    sys::notify("READY=1\nSTATUS=serving");
    while !term.load(Ordering::Relaxed) {
        if hup.swap(false, Ordering::Relaxed) {
            d.reload();
        }
        refusal_tick(&d);
        d.failures.tick(&d.log);
        match listener.accept() {
            Ok((stream, _)) => accept(&d, stream),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::readable(&listener, 200);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors, say: keep serving the others.
                warn!(log, "accept failed"; "error" => %e);
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
    sys::notify("STOPPING=1");
    d.stopping.store(true, Ordering::Relaxed);
    drop(listener);
    if !activated {
        let _gone = std::fs::remove_file(&config.socket);
    }
    let active = d.jobs.active();
    info!(log, "stopping"; "cancelling" => active);
    d.jobs.cancel_all();
    // Queued jobs end as cancelled; running ones end at their next entry
    // (a job's process at its SIGTERM, or its SIGKILL after a grace).
    d.queue.close();
    // Each client hears how its job ended before the process goes; one
    // that does not read is not waited for beyond the I/O timeout.
    let deadline = Instant::now() + config.io_timeout;
    while d.following.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    info!(log, "stopped");
    Ok(())
}

/// Makes the socket: its directory (0755) when missing, a stale socket
/// replaced, a live one refused.
fn bind(config: &Config) -> Result<UnixListener, ServeError> {
    let path = &config.socket;
    let fail = |op: &'static str| {
        move |error: io::Error| ServeError::Socket {
            path: path.clone(),
            op,
            error,
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .map_err(fail("create directory"))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(fail("chmod directory"))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_socket() => match UnixStream::connect(path)
        {
            Ok(_) => {
                return Err(fail("bind")(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another zinstalld is listening there",
                )));
            }
            Err(_) => std::fs::remove_file(path)
                .map_err(fail("remove stale socket"))?,
        },
        Ok(_) => {
            return Err(fail("bind")(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )));
        }
        Err(_) => {}
    }
    let l = UnixListener::bind(path).map_err(fail("bind"))?;
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode(config.socket_mode),
    )
    .map_err(fail("chmod"))?;
    if let Some(g) = config.socket_group {
        sys::chown_group(path, g).map_err(fail("chown"))?;
    }
    Ok(l)
}

/// Takes a connection: served on its own thread, or told the daemon is
/// busy. Root is never refused; another caller is when its uid holds
/// `max_connections_per_uid` already, or when `max_connections` of
/// callers other than root are being served and no uid holds more than
/// it (else the largest holder's oldest idle connection is closed to make
/// room), so that no user, nor a few together, can keep the others (or
/// root) out.
fn accept(d: &Arc<Daemon>, stream: UnixStream) {
    let config = d.config();
    let _blocking = stream.set_nonblocking(false);
    let _timeouts = (
        stream.set_read_timeout(Some(config.io_timeout)),
        stream.set_write_timeout(Some(config.io_timeout)),
    );
    let peer = match sys::peer(&stream) {
        Ok(p) => p,
        Err(e) => {
            warn!(d.log, "peer credentials unreadable; connection dropped"; "error" => %e);
            return;
        }
    };
    let mut made_room = None;
    let mut slot = None;
    let busy = {
        let mut c = d.connections.lock().unwrap_or_else(|p| p.into_inner());
        let mine = c.held_by(peer.uid);
        let refused = if peer.uid == 0 {
            None
        } else if c.len() >= config.max_connections
            && mine < config.max_connections_per_uid
            && let Some(victim) = c.make_room(peer.uid, &evicted_line())
        {
            made_room = Some(victim);
            None
        } else if c.len() >= config.max_connections {
            Some(format!(
                "zinstalld: busy: {} connections are being served \
                 (max_connections); try again",
                config.max_connections
            ))
        } else if mine >= config.max_connections_per_uid {
            Some(format!(
                "zinstalld: busy: uid {} has {mine} connections open \
                 (max_connections_per_uid); try again",
                peer.uid
            ))
        } else {
            None
        };
        refused.or_else(|| {
            if peer.uid == 0 {
                return None;
            }
            // The accept loop's handle on the connection, to close it
            // should its place be needed while it idles.
            match stream.try_clone() {
                Ok(handle) => {
                    slot = Some(c.add(peer.uid, handle));
                    None
                }
                Err(e) => Some(format!("zinstalld: busy: {e}; try again")),
            }
        })
    };
    if let Some(victim) = made_room {
        log_refusal(
            d,
            &config,
            victim,
            |log| info!(log, "connection closed to make room"; "uid" => victim, "for_uid" => peer.uid),
        );
    }
    if let Some(why) = busy {
        log_refusal(
            d,
            &config,
            peer.uid,
            |log| info!(log, "busy"; "uid" => peer.uid, "pid" => peer.pid, "why" => &why),
        );
        let mut s = stream;
        let _told = writeln!(
            s,
            "{}",
            Reply::error(WireError::new(ErrorKind::Busy, why)).to_line()
        );
        return;
    }
    let place = Place {
        d: Arc::clone(d),
        slot,
    };
    let d2 = Arc::clone(d);
    let spawned = thread::Builder::new()
        .name("conn".into())
        .stack_size(256 << 10)
        .spawn(move || {
            serve(&d2, stream, &peer, &place);
            drop(place);
        });
    if let Err(e) = spawned {
        warn!(d.log, "cannot serve a connection"; "error" => %e);
    }
}

/// Reads one request line of at most [`MAX_LINE`] bytes, whole by
/// `deadline`: a client that drips its bytes gets no more time than one
/// that sends nothing. `Ok(None)`: the client closed the connection
/// between requests; `TimedOut`: the deadline passed.
fn read_request(
    r: &mut BufReader<UnixStream>,
    deadline: Instant,
) -> io::Result<Option<Result<Vec<u8>, BadRequest>>> {
    let mut line = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        r.get_ref().set_read_timeout(Some(left))?;
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            if line.is_empty() {
                return Ok(None);
            }
            return Ok(Some(Err(BadRequest::Malformed(
                "the connection ended inside a request".into(),
            ))));
        }
        let take = buf.len().min(MAX_LINE - line.len());
        if let Some(i) = buf[..take].iter().position(|b| *b == b'\n') {
            line.extend_from_slice(&buf[..i]);
            r.consume(i + 1);
            return Ok(Some(Ok(line)));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if line.len() >= MAX_LINE {
            return Ok(Some(Err(BadRequest::TooLong)));
        }
    }
}

fn send(w: &mut UnixStream, reply: &Reply) -> io::Result<()> {
    let mut line = reply.to_line();
    line.push('\n');
    w.write_all(line.as_bytes())
}

/// What a connection closed to make room for another caller is told.
fn evicted_line() -> String {
    Reply::error(WireError::new(
        ErrorKind::Busy,
        "zinstalld: busy: this idle connection was closed to make room \
         for a caller holding fewer (max_connections); try again",
    ))
    .to_line()
}

/// Serves one connection's requests in turn.
fn serve(d: &Arc<Daemon>, stream: UnixStream, peer: &Peer, place: &Place) {
    let peer = peer.clone();
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut input = BufReader::new(stream);
    loop {
        if d.stopping.load(Ordering::Relaxed) {
            return;
        }
        // One snapshot of the configuration for everything this request
        // is checked against: a reload in between cannot mix two.
        let config = d.config();
        place.idle(true);
        let deadline = Instant::now() + config.io_timeout;
        let line = read_request(&mut input, deadline);
        place.idle(false);
        let line = match line {
            Ok(None) => return,
            Ok(Some(l)) => l,
            Err(e) => {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    let _told = send(
                        &mut out,
                        &Reply::error(WireError::new(
                            ErrorKind::Request,
                            format!(
                                "zinstalld: no whole request within {} s; \
                                 connection closed",
                                config.io_timeout.as_secs()
                            ),
                        )),
                    );
                }
                return;
            }
        };
        // A caller without a grant is served `version` alone: for
        // anything else only the operation's name is read, the
        // arguments never are.
        let granted = auth::has_grant(&config, &peer);
        let request = line.and_then(|l| {
            if !granted {
                let op = Request::operation(&l)?;
                if op != "version" {
                    return Ok(Err(op));
                }
            }
            Request::parse(&l).map(Ok)
        });
        let request = match request {
            Ok(Ok(r)) => r,
            Ok(Err(op)) => {
                let why = format!(
                    "uid {} has no grant: only version is served to it; \
                     connection closed",
                    peer.uid
                );
                log_refusal(d, &config, peer.uid, |log| {
                    warn!(log, "refused"; "uid" => peer.uid, "gid" => peer.gid, "pid" => peer.pid,
                          "op" => &op, "why" => &why)
                });
                let _told = send(
                    &mut out,
                    &Reply::error(WireError::new(
                        ErrorKind::Denied,
                        format!("zinstalld: {why}"),
                    )),
                );
                return;
            }
            Err(e) => {
                let too_long = e == BadRequest::TooLong;
                log_refusal(d, &config, peer.uid, |log| {
                    warn!(log, "bad request"; "uid" => peer.uid, "gid" => peer.gid,
                          "pid" => peer.pid, "error" => %e)
                });
                let sent = send(
                    &mut out,
                    &Reply::error(WireError::new(
                        ErrorKind::Request,
                        format!("zinstalld: {e}"),
                    )),
                );
                // The rest of an overlong line cannot be told from the
                // next request; a caller without a grant gets one
                // refusal.
                if too_long || !granted || sent.is_err() {
                    return;
                }
                continue;
            }
        };
        let granted = match auth::authorize(&config, &peer, &request.call) {
            Ok(g) => g,
            Err(why) => {
                let why = why.clipped();
                log_refusal(d, &config, peer.uid, |log| {
                    warn!(log, "refused"; "uid" => peer.uid, "gid" => peer.gid, "pid" => peer.pid,
                      "op" => request.call.name(), "why" => why.to_string())
                });
                let why = format!("zinstalld: {why}");
                if send(
                    &mut out,
                    &Reply::error(WireError::new(ErrorKind::Denied, why)),
                )
                .is_err()
                {
                    return;
                }
                continue;
            }
        };
        let kept = if request.call.is_job() {
            d.following.fetch_add(1, Ordering::SeqCst);
            let kept = run_job(d, &mut out, &peer, request, granted, &config);
            d.following.fetch_sub(1, Ordering::SeqCst);
            kept
        } else {
            let reply = match quick(d, &peer, &request.call, &config) {
                Ok(result) => Reply::Ok { v: VERSION, result },
                Err(e) => Reply::error(e),
            };
            send(&mut out, &reply).is_ok()
        };
        if !kept {
            return;
        }
    }
}

/// Operations answered at once.
fn quick(
    d: &Daemon,
    peer: &Peer,
    call: &Call,
    config: &Config,
) -> Result<Answer, WireError> {
    let visible = |owner: u32| peer.uid == 0 || owner == peer.uid;
    match call {
        Call::Version => Ok(Answer::Version(VersionReply {
            protocol: VERSION,
            version: d.opts.version.clone(),
            walkers: d.pool().walkers(),
            workers: d.pool().threads(),
        })),
        Call::Jobs => {
            // Failures summed up in a line each (`status` lists a job's
            // errors), and the reply bounded.
            let jobs: Vec<JobInfo> = d
                .jobs
                .list()
                .iter()
                .filter(|j| visible(j.owner))
                .map(|j| j.summary())
                .collect();
            Ok(Answer::Jobs(within(jobs, MAX_JOBS_REPLY)))
        }
        Call::Status(r) | Call::Cancel(r) => {
            let job =
                d.jobs.get(r.job).filter(|j| visible(j.owner)).ok_or_else(
                    || {
                        WireError::new(
                            ErrorKind::NotFound,
                            format!("zinstalld: no job {}", r.job),
                        )
                    },
                )?;
            if let Call::Cancel(_) = call {
                job.cancel.cancel();
                // A queued job ends now; a running one at its next entry.
                d.queue.cancel_queued(job.id);
                info!(d.log, "cancel"; "job" => job.id, "uid" => peer.uid, "pid" => peer.pid);
            }
            Ok(Answer::Job(Box::new(job.describe())))
        }
        Call::CacheList => ops::cache_list(config).map(Answer::CacheList),
        _ => Err(WireError::new(
            ErrorKind::Internal,
            format!("{} is a job", call.name()),
        )),
    }
}

/// `jobs` (oldest first) cut to at most `max` bytes of JSON: the oldest
/// finished jobs go first, then, if the running and queued ones alone
/// are more, the oldest of those.
fn within(jobs: Vec<JobInfo>, max: usize) -> Vec<JobInfo> {
    let size = |j: &JobInfo| serde_json::to_vec(j).map_or(0, |v| v.len()) + 1;
    let sizes: Vec<usize> = jobs.iter().map(size).collect();
    let mut total: usize = 2 + sizes.iter().sum::<usize>();
    if total <= max {
        return jobs;
    }
    let finished =
        |j: &JobInfo| !matches!(j.state.as_str(), "queued" | "running");
    let mut keep = vec![true; jobs.len()];
    for pass in [true, false] {
        for (i, j) in jobs.iter().enumerate() {
            if total <= max {
                break;
            }
            if keep[i] && (!pass || finished(j)) {
                keep[i] = false;
                total -= sizes[i];
            }
        }
    }
    jobs.into_iter()
        .zip(keep)
        .filter_map(|(j, k)| k.then_some(j))
        .collect()
}

/// Starts a job, streams its progress and events to the client, and
/// sends its result. A client that goes away cancels the job unless it
/// asked to detach. Returns whether the connection is still usable.
fn run_job(
    d: &Arc<Daemon>,
    out: &mut UnixStream,
    peer: &Peer,
    request: Request,
    granted: auth::Granted,
    config: &Config,
) -> bool {
    let call = request.call;
    let what = call
        .paths()
        .last()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let ticket = match d.queue.admit(peer.uid, config.max_jobs_per_uid) {
        Ok(t) => t,
        Err(full) => {
            log_refusal(
                d,
                config,
                peer.uid,
                |log| info!(log, "busy"; "uid" => peer.uid, "pid" => peer.pid, "jobs" => full.held),
            );
            let why = format!(
                "zinstalld: busy: uid {} has {} jobs running or queued \
                 (max_jobs_per_uid); wait for one to end",
                peer.uid, full.held
            );
            return send(
                out,
                &Reply::error(WireError::new(ErrorKind::Busy, why)),
            )
            .is_ok();
        }
    };
    let job = d.jobs.add(call.name(), what, peer.uid, peer.pid);
    if request.detach {
        job.detach();
    }
    info!(d.log, "job"; "job" => job.id, "op" => call.name(), "uid" => peer.uid,
          "gid" => peer.gid, "pid" => peer.pid, "detach" => request.detach);
    let (d2, peer2, config2) = (Arc::clone(d), peer.clone(), config.clone());
    d.queue.submit(
        ticket,
        Arc::clone(&job),
        config.max_jobs,
        Box::new(move |job| {
            ops::run(&d2, job, &call, &peer2, &granted, &config2)
        }),
    );
    if send(
        out,
        &Reply::Accepted {
            v: VERSION,
            job: job.id,
        },
    )
    .is_err()
    {
        return gone(d, &job);
    }
    // A client that goes away is noticed within a tick, so that its job
    // is cancelled before it has done much more; progress goes out at a
    // slower pace.
    const TICK: Duration = Duration::from_millis(25);
    const PROGRESS_EVERY: Duration = Duration::from_millis(250);
    let mut last = None;
    let mut progress_sent = Instant::now();
    loop {
        let (events, end) = job.wait(TICK);
        for message in events {
            if send(
                out,
                &Reply::Event {
                    v: VERSION,
                    job: job.id,
                    message,
                },
            )
            .is_err()
            {
                return gone(d, &job);
            }
        }
        if let Some(state) = end {
            let reply = match state {
                State::Done(result) => Reply::Done {
                    v: VERSION,
                    job: job.id,
                    result,
                },
                State::Failed(error) => Reply::Error {
                    v: VERSION,
                    job: Some(job.id),
                    error,
                },
                _ => unreachable!("only ended states are returned"),
            };
            return send(out, &reply).is_ok();
        }
        if sys::hung_up(out) {
            return gone(d, &job);
        }
        if progress_sent.elapsed() < PROGRESS_EVERY {
            continue;
        }
        progress_sent = Instant::now();
        let progress = job.progress(last);
        last = Some((progress_sent, progress.bytes));
        if send(
            out,
            &Reply::Progress {
                v: VERSION,
                job: job.id,
                progress,
            },
        )
        .is_err()
        {
            return gone(d, &job);
        }
    }
}

/// The client of `job` went away (or stopped reading for longer than the
/// I/O timeout).
fn gone(d: &Daemon, job: &crate::jobs::Job) -> bool {
    if job.detached() {
        info!(d.log, "client gone; job continues detached"; "job" => job.id);
    } else {
        info!(d.log, "client gone; job cancelled"; "job" => job.id);
        job.cancel.cancel();
    }
    false
}
