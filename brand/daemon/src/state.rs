//! The running service's state, shared by the accept loop, the
//! connections and the jobs: the configuration in force, the worker
//! budget, the jobs, the connections counted against their limits.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use slog::{Logger, error, info, warn};

use copier::{DefaultsFile, Pool, Tunables};

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
    /// Connections following a job, until its last reply is sent.
    pub(crate) following: AtomicUsize,
    /// Set once the service stops accepting: jobs started after it are
    /// refused.
    pub(crate) stopping: AtomicBool,
    /// Jobs waiting for a place, and the lanes that run them.
    pub(crate) queue: Arc<Queue>,
    /// Workers for jobs that run in processes of their own (granted
    /// copies): each takes some while it runs and gives them back.
    pub(crate) process_workers: Budget,
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
        Daemon {
            jobs: Jobs::new(config.keep_finished),
            config: RwLock::new(config),
            tunables,
            pool,
            log,
            connections: Mutex::new(Connections::default()),
            refusals: Mutex::new(crate::limits::RefusalLog::new()),
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
                        warn!(ended_log, "job failed"; "job" => job.id,
                                              "kind" => e.kind.as_str(), "error" => e.message)
                    }
                    _ => {}
                }
            })),
            process_workers: Budget::new(tunables.copy_threads),
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
pub(crate) fn tunables(config: &Config) -> Result<Tunables, copier::Error> {
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

/// A count of workers shared by jobs that each take some while they run.
pub(crate) struct Budget {
    free: Mutex<usize>,
    freed: Condvar,
}

/// Workers taken from a [`Budget`], given back when dropped.
pub(crate) struct Taken<'b> {
    budget: &'b Budget,
    /// How many.
    pub(crate) count: usize,
}

impl Budget {
    pub(crate) fn new(total: usize) -> Budget {
        Budget {
            free: Mutex::new(total.max(1)),
            freed: Condvar::new(),
        }
    }

    /// Takes up to `want` workers (at least one), waiting while none is
    /// free; `None` if `cancelled` says to give up meanwhile.
    pub(crate) fn take(
        &self,
        want: usize,
        cancelled: impl Fn() -> bool,
    ) -> Option<Taken<'_>> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            if cancelled() {
                return None;
            }
            free = self
                .freed
                .wait_timeout(free, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let count = want.clamp(1, *free);
        *free -= count;
        Some(Taken {
            budget: self,
            count,
        })
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut free =
            self.budget.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += self.count;
        self.budget.freed.notify_all();
    }
}
