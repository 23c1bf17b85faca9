//! The running service's state, shared by the accept loop, the
//! connections and the jobs: the configuration in force, the worker
//! budget, the jobs, the connections counted against their limits.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use slog::{Logger, error, info, warn};

use zinstall_engine::{DefaultsFile, Pool, Tunables};

use crate::config::Config;
use crate::jobs::{Jobs, State};
use crate::queue::Queue;

/// How to start the service.
#[derive(Clone, Debug)]
pub struct Options {
    /// The configuration file.
    pub config: PathBuf,
    /// Whether it must exist (named on the command line).
    pub config_required: bool,
    /// The socket, overriding the configuration's.
    pub socket: Option<PathBuf>,
    /// The daemon's version string, for `version`.
    pub version: String,
}

/// Connections being served: those of callers other than root, in all
/// and by uid (root's are not counted: never refused).
pub(crate) type Connections = crate::limits::Slots;

/// The running service's state, shared by its threads.
pub(crate) struct Daemon {
    pub(crate) opts: Options,
    config: RwLock<Config>,
    pub(crate) tunables: Tunables,
    pool: Pool,
    pub(crate) jobs: Jobs,
    pub(crate) log: Logger,
    pub(crate) connections: Mutex<Connections>,
    /// Refusals logged and counted per uid.
    pub(crate) refusals: Mutex<crate::limits::RefusalLog>,
    /// Failed jobs logged and counted per uid, as refusals are.
    pub(crate) failures: Arc<FailureLog>,
    /// Connections following a job, until its last reply is sent.
    pub(crate) following: AtomicUsize,
    /// Set once the service stops accepting: jobs started after it are
    /// refused.
    pub(crate) stopping: AtomicBool,
    /// Jobs waiting for a place, and the lanes that run them.
    pub(crate) queue: Arc<Queue>,
    /// Workers for jobs that run in processes of their own (granted
    /// copies): each holds a fair share while it runs.
    pub(crate) process_workers: crate::shares::Shares,
}

impl Daemon {
    /// The state of a service starting with `config`, its budgets
    /// `tunables` and the `pool` its jobs' workers come from.
    pub(crate) fn new(
        opts: Options,
        config: Config,
        tunables: Tunables,
        pool: Pool,
        log: Logger,
    ) -> Daemon {
        let ended_log = log.clone();
        let failures = Arc::new(FailureLog {
            windows: Mutex::new(crate::limits::RefusalLog::new()),
            limits: Mutex::new((
                config.refusal_log_burst,
                config.refusal_log_window,
            )),
        });
        let ended_failures = Arc::clone(&failures);
        Daemon {
            jobs: Jobs::new(config.keep_finished),
            config: RwLock::new(config),
            tunables,
            pool,
            log,
            connections: Mutex::new(Connections::default()),
            refusals: Mutex::new(crate::limits::RefusalLog::new()),
            failures,
            following: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            queue: Arc::new(Queue::new(move |job, took| {
                crate::sys::release_free_memory();
                match job.state() {
                    State::Done(_) => {
                        info!(ended_log, "job done"; "job" => job.id,
                                            "ms" => took.as_millis() as u64)
                    }
                    State::Failed(e) => {
                        // A line of at most a few hundred bytes, and only
                        // the uid's share of them: one user's failures
                        // cannot fill the log.
                        let e = e.summary();
                        ended_failures.log(&ended_log, job.owner, |log| {
                            warn!(log, "job failed"; "job" => job.id, "uid" => job.owner,
                                  "kind" => e.kind.as_str(), "error" => e.message)
                        });
                    }
                    _ => {}
                }
            })),
            process_workers: crate::shares::Shares::new(tunables.copy_threads),
            opts,
        }
    }

    /// Reads the configuration again (SIGHUP); the socket and the
    /// budgets stay the running service's until a restart.
    pub(crate) fn reload(&self) {
        match Config::load(&self.opts.config, self.opts.config_required) {
            Ok(mut c) => {
                let old = self.config();
                // The socket, its place and the worker budget are the
                // running service's; they change with a restart.
                c.socket = old.socket.clone();
                if c.copy_threads != old.copy_threads {
                    warn!(self.log, "copy_threads changes at the next restart";
                          "running" => self.tunables.copy_threads);
                }
                if c.copy_walkers != old.copy_walkers {
                    warn!(self.log, "copy_walkers changes at the next restart";
                          "running" => self.tunables.copy_walkers);
                }
                *self
                    .failures
                    .limits
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) =
                    (c.refusal_log_burst, c.refusal_log_window);
                *self.config.write().unwrap_or_else(|p| p.into_inner()) = c;
                info!(self.log, "configuration reloaded"; "config" => %self.opts.config.display());
            }
            Err(e) => {
                error!(self.log, "configuration not reloaded"; "error" => %e)
            }
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> Config {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Each job's knobs: the batch and buffer sizes; its workers are the
    /// pool's.
    pub fn tunables(&self) -> Tunables {
        self.tunables
    }

    /// The worker budget.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The service's log.
    pub fn log(&self) -> &Logger {
        &self.log
    }
}

/// Reads the worker and walker budgets: the configuration's
/// `copy_threads` and `copy_walkers`, else the defaults file's
/// COPY_THREADS and COPY_WALKERS; batch and buffer sizes from the
/// defaults file.
pub(crate) fn tunables(
    config: &Config,
) -> Result<Tunables, zinstall_engine::Error> {
    // The system's file may be missing; one the configuration names
    // must be there.
    let file = if config.defaults == Path::new(crate::config::DEFAULT_DEFAULTS)
    {
        DefaultsFile::load(&config.defaults)?
    } else {
        DefaultsFile::load_required(&config.defaults)?
    };
    let mut t = Tunables::from_defaults(&file)?;
    if let Some(n) = config.copy_threads {
        t.copy_threads = n;
    }
    if let Some(n) = config.copy_walkers {
        t.copy_walkers = n;
    }
    t.validate()?;
    Ok(t)
}

/// The `job failed` lines each uid may cost: the first
/// `refusal_log_burst` of each window, then a count, summed up in one
/// line when the window ends (as refusals are).
pub(crate) struct FailureLog {
    windows: Mutex<crate::limits::RefusalLog>,
    limits: Mutex<(usize, Duration)>,
}

impl FailureLog {
    /// Logs a failure of `uid` through `line` unless the uid has had its
    /// share of lines in this window.
    pub(crate) fn log(
        &self,
        log: &Logger,
        uid: u32,
        line: impl FnOnce(&Logger),
    ) {
        let (burst, window) =
            *self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let (logged, ended) = self
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refused(uid, std::time::Instant::now(), burst, window);
        if let Some(s) = ended {
            summary(log, s);
        }
        if logged {
            line(log);
        }
    }

    /// Sums up the windows that ended (from the accept loop, so that a
    /// burst that stopped is still told).
    pub(crate) fn tick(&self, log: &Logger) {
        let window = self.limits.lock().unwrap_or_else(|p| p.into_inner()).1;
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_empty() {
            return;
        }
        for s in w.tick(std::time::Instant::now(), window) {
            summary(log, s);
        }
    }
}

fn summary(log: &Logger, s: crate::limits::Summary) {
    warn!(log, "… and {} more failed jobs of uid {} in the last {} s", s.count, s.uid, s.secs;
          "uid" => s.uid, "count" => s.count, "window_secs" => s.secs);
}
