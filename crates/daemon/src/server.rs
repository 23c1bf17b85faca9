//! The service: the socket, the accept loop, one thread per connection,
//! one per job, and the pool every job's workers come from.

use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use slog::{Logger, info, warn};

use zinstall_engine::Pool;

use crate::config::{Config, ConfigError};
use crate::connection::{Place, log_refusal, log_summary, serve};
use crate::protocol::{ErrorKind, Reply, WireError};
pub use crate::state::Options;
use crate::state::{self, Daemon};
use crate::sys::{self, Peer};

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
    Engine(#[from] zinstall_engine::Error),
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
    let (term, hup) = signal_flags(&config)?;
    let (listener, activated) = listen(&config)?;
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
    accept_until(&d, &listener, &term, &hup);
    sys::notify("STOPPING=1");
    d.stopping.store(true, Ordering::Relaxed);
    drop(listener);
    if !activated {
        let _gone = std::fs::remove_file(&config.socket);
    }
    stop(&d, &config);
    Ok(())
}

/// Flags SIGTERM and SIGINT (stop) and SIGHUP (reload) set.
fn signal_flags(
    config: &Config,
) -> Result<(Arc<AtomicBool>, Arc<AtomicBool>), ServeError> {
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
    Ok((term, hup))
}

/// The listening socket, non-blocking: the one the service manager
/// handed over (then `true`), or one bound here.
fn listen(config: &Config) -> Result<(UnixListener, bool), ServeError> {
    let (listener, activated) = match sys::activated_listener() {
        Some(l) => (l, true),
        None => (bind(config)?, false),
    };
    listener
        .set_nonblocking(true)
        .map_err(|error| ServeError::Socket {
            path: config.socket.clone(),
            op: "set non-blocking",
            error,
        })?;
    Ok((listener, activated))
}

/// Accepts connections until `term` is set, reloading whenever `hup` is.
fn accept_until(
    d: &Arc<Daemon>,
    listener: &UnixListener,
    term: &AtomicBool,
    hup: &AtomicBool,
) {
    while !term.load(Ordering::Relaxed) {
        if hup.swap(false, Ordering::Relaxed) {
            d.reload();
        }
        refusal_tick(d);
        d.failures.tick(&d.log);
        match listener.accept() {
            Ok((stream, _)) => accept(d, stream),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                sys::readable(listener, 200);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors, say: keep serving the others.
                warn!(d.log, "accept failed"; "error" => %e);
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Cancels the jobs and waits, up to the I/O timeout, for their clients
/// to hear how they ended.
fn stop(d: &Daemon, config: &Config) {
    let log = &d.log;
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
    let Admission {
        made_room,
        slot,
        busy,
    } = place_for(d, &config, &peer, &stream);
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

/// A new connection's admission.
struct Admission {
    /// The uid whose idle connection was closed to make room.
    made_room: Option<u32>,
    /// Its place among the connections; none for root's.
    slot: Option<u64>,
    /// Why it is not served.
    busy: Option<String>,
}

/// Whether a connection of `peer` is served: a place for it (none for
/// root, which is never refused), made, if need be, by closing an idle
/// connection of a caller holding more; else why it is busy.
fn place_for(
    d: &Daemon,
    config: &Config,
    peer: &Peer,
    stream: &UnixStream,
) -> Admission {
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
    Admission {
        made_room,
        slot,
        busy,
    }
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
