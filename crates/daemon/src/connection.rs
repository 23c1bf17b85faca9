//! One connection: its requests read in turn, each checked against the
//! caller's grant, then answered at once or run as a job whose progress
//! and events stream back.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use slog::{Logger, info, warn};

use crate::auth;
use crate::config::Config;
use crate::jobs::{Job, State};
use crate::limits::Summary;
use crate::ops;
use crate::protocol::{
    Answer, BadRequest, Call, ErrorKind, JobInfo, MAX_JOBS_REPLY, MAX_LINE,
    Reply, Request, VERSION, VersionReply, WireError,
};
use crate::state::Daemon;
use crate::sys::{self, Peer};

/// One connection's place, given back when dropped (root's take none).
pub(crate) struct Place {
    pub(crate) d: Arc<Daemon>,
    pub(crate) slot: Option<u64>,
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
pub(crate) fn log_refusal(
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

pub(crate) fn log_summary(log: &Logger, s: Summary) {
    warn!(log, "… and {} more refusals from uid {} in the last {} s", s.count, s.uid, s.secs;
          "uid" => s.uid, "count" => s.count, "window_secs" => s.secs);
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

/// Serves one connection's requests in turn.
pub(crate) fn serve(
    d: &Arc<Daemon>,
    stream: UnixStream,
    peer: &Peer,
    place: &Place,
) {
    let Ok(out) = stream.try_clone() else {
        return;
    };
    let mut conn = Conn {
        d,
        out,
        peer: peer.clone(),
    };
    let mut input = BufReader::new(stream);
    loop {
        if d.stopping.load(Ordering::Relaxed) {
            return;
        }
        // One snapshot of the configuration for everything this request
        // is checked against: a reload in between cannot mix two.
        let config = d.config();
        let Some(line) = conn.read_line(&mut input, &config, place) else {
            return;
        };
        let request = match conn.parse(line, &config) {
            Flow::Go(r) => r,
            Flow::Next => continue,
            Flow::Close => return,
        };
        let granted = match conn.authorize(&request, &config) {
            Flow::Go(g) => g,
            Flow::Next => continue,
            Flow::Close => return,
        };
        if !conn.answer(request, granted, &config) {
            return;
        }
    }
}

/// What a connection does after a step of serving a request.
enum Flow<T> {
    /// Go on with this.
    Go(T),
    /// The request was refused and the caller told: read the next.
    Next,
    /// Close the connection.
    Close,
}

/// One connection: the daemon, where its replies go, and who called.
struct Conn<'a> {
    d: &'a Arc<Daemon>,
    out: UnixStream,
    peer: Peer,
}

impl Conn<'_> {
    /// The next request line, read while the connection counts as idle.
    /// `None` closes the connection: the client closed it, or sent no
    /// whole request in time (and is told so).
    fn read_line(
        &mut self,
        input: &mut BufReader<UnixStream>,
        config: &Config,
        place: &Place,
    ) -> Option<Result<Vec<u8>, BadRequest>> {
        place.idle(true);
        let deadline = Instant::now() + config.io_timeout;
        let line = read_request(input, deadline);
        place.idle(false);
        match line {
            Ok(None) => None,
            Ok(Some(l)) => Some(l),
            Err(e) => {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    let _told = send(
                        &mut self.out,
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
                None
            }
        }
    }

    /// The request in `line`. A caller without a grant is served
    /// `version` alone: for anything else only the operation's name is
    /// read, the arguments never are.
    fn parse(
        &mut self,
        line: Result<Vec<u8>, BadRequest>,
        config: &Config,
    ) -> Flow<Request> {
        let (d, peer) = (self.d, &self.peer);
        let granted = auth::has_grant(config, peer);
        let request = line.and_then(|l| {
            if !granted {
                let op = Request::operation(&l)?;
                if op != "version" {
                    return Ok(Err(op));
                }
            }
            Request::parse(&l).map(Ok)
        });
        match request {
            Ok(Ok(r)) => Flow::Go(r),
            Ok(Err(op)) => {
                let why = format!(
                    "uid {} has no grant: only version is served to it; \
                     connection closed",
                    peer.uid
                );
                log_refusal(d, config, peer.uid, |log| {
                    warn!(log, "refused"; "uid" => peer.uid, "gid" => peer.gid, "pid" => peer.pid,
                          "op" => &op, "why" => &why)
                });
                let _told = send(
                    &mut self.out,
                    &Reply::error(WireError::new(
                        ErrorKind::Denied,
                        format!("zinstalld: {why}"),
                    )),
                );
                Flow::Close
            }
            Err(e) => {
                let too_long = e == BadRequest::TooLong;
                log_refusal(d, config, peer.uid, |log| {
                    warn!(log, "bad request"; "uid" => peer.uid, "gid" => peer.gid,
                          "pid" => peer.pid, "error" => %e)
                });
                let sent = send(
                    &mut self.out,
                    &Reply::error(WireError::new(
                        ErrorKind::Request,
                        format!("zinstalld: {e}"),
                    )),
                );
                // The rest of an overlong line cannot be told from the
                // next request; a caller without a grant gets one
                // refusal.
                if too_long || !granted || sent.is_err() {
                    Flow::Close
                } else {
                    Flow::Next
                }
            }
        }
    }

    /// What the caller's grant allows of `request`; a refusal is logged
    /// and told.
    fn authorize(
        &mut self,
        request: &Request,
        config: &Config,
    ) -> Flow<auth::Granted> {
        let (d, peer) = (self.d, &self.peer);
        match auth::authorize(config, peer, &request.call) {
            Ok(g) => Flow::Go(g),
            Err(why) => {
                let why = why.clipped();
                log_refusal(d, config, peer.uid, |log| {
                    warn!(log, "refused"; "uid" => peer.uid, "gid" => peer.gid, "pid" => peer.pid,
                      "op" => request.call.name(), "why" => why.to_string())
                });
                let why = format!("zinstalld: {why}");
                if send(
                    &mut self.out,
                    &Reply::error(WireError::new(ErrorKind::Denied, why)),
                )
                .is_err()
                {
                    return Flow::Close;
                }
                Flow::Next
            }
        }
    }

    /// Runs a job or answers at once; whether the connection is still
    /// usable.
    fn answer(
        &mut self,
        request: Request,
        granted: auth::Granted,
        config: &Config,
    ) -> bool {
        let (d, peer) = (self.d, &self.peer);
        if request.call.is_job() {
            d.following.fetch_add(1, Ordering::SeqCst);
            let kept =
                run_job(d, &mut self.out, peer, request, granted, config);
            d.following.fetch_sub(1, Ordering::SeqCst);
            kept
        } else {
            let reply = match quick(d, peer, &request.call, config) {
                Ok(result) => Reply::Ok { v: VERSION, result },
                Err(e) => Reply::error(e),
            };
            send(&mut self.out, &reply).is_ok()
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
        Err(full) => return refuse_busy(d, out, peer, config, full.held),
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
    follow(d, out, &job)
}

/// Refuses a job to `peer`, who holds `held` jobs already; whether the
/// connection is still usable.
fn refuse_busy(
    d: &Daemon,
    out: &mut UnixStream,
    peer: &Peer,
    config: &Config,
    held: usize,
) -> bool {
    log_refusal(
        d,
        config,
        peer.uid,
        |log| info!(log, "busy"; "uid" => peer.uid, "pid" => peer.pid, "jobs" => held),
    );
    let why = format!(
        "zinstalld: busy: uid {} has {held} jobs running or queued \
         (max_jobs_per_uid); wait for one to end",
        peer.uid
    );
    send(out, &Reply::error(WireError::new(ErrorKind::Busy, why))).is_ok()
}

/// Streams `job`'s events and progress to the client until it ends, then
/// its result; whether the connection is still usable.
fn follow(d: &Daemon, out: &mut UnixStream, job: &Job) -> bool {
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
                return gone(d, job);
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
            return gone(d, job);
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
            return gone(d, job);
        }
    }
}

/// The client of `job` went away (or stopped reading for longer than the
/// I/O timeout).
fn gone(d: &Daemon, job: &Job) -> bool {
    if job.detached() {
        info!(d.log, "client gone; job continues detached"; "job" => job.id);
    } else {
        info!(d.log, "client gone; job cancelled"; "job" => job.id);
        job.cancel.cancel();
    }
    false
}
