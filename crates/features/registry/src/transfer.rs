//! Network waits a pull can give up on: the request and every read of a
//! body are done by a thread of their own, and the pulling thread waits
//! for them in short ticks, checking its cancel flag and the stall rule
//! between them. So a cancel (a job's, a daemon stopping) ends a pull
//! within a tick, and a registry that sends a byte now and then, or
//! nothing at all, cannot hold it longer than the stall window, whatever
//! the socket's timeouts.
//!
//! A thread given up on is left to end by itself: its socket's own
//! timeouts (connect, response, each read) bound how long it lingers, and
//! it never touches the store; only the pulling thread writes.

use std::io::{self, Read};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use zinstall_core::Cancel;

use crate::error::{Failure, RegistryError as Error, Result};

/// How often a waiting pull looks at its cancel flag and its rate.
const TICK: Duration = Duration::from_millis(100);

/// Bytes read from the network at a time.
const CHUNK: usize = 256 << 10;

/// The least a transfer must bring in each window: fewer bytes than
/// `min_bytes` within any `window` is a stalled transfer, given up and
/// retried (resumed) like a broken connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The window.
    pub window: Duration,
    /// Bytes that must arrive within each window.
    pub min_bytes: u64,
}

impl Default for Stall {
    /// 32 KiB in 30 s: any link a registry is pulled over does far more;
    /// a server dripping bytes to hold a job does far less.
    fn default() -> Self {
        Stall {
            window: Duration::from_secs(30),
            min_bytes: 32 << 10,
        }
    }
}

/// The default [`Watch::deadline`]: the longest a small body (a
/// manifest, a token, an error text, a signature) may take whole,
/// request included.
pub const DEFAULT_FETCH_DEADLINE: Duration = Duration::from_secs(60);

/// What a pull's waits answer to.
#[derive(Clone)]
pub(crate) struct Watch {
    pub(crate) cancel: Option<Cancel>,
    pub(crate) stall: Stall,
    /// How long a small body may take whole, however steadily it comes:
    /// the stall floor bounds the rate, this bounds the time, so that a
    /// server sending just above the floor cannot hold a pull for an
    /// hour per signature.
    pub(crate) deadline: Duration,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            cancel: None,
            stall: Stall::default(),
            deadline: DEFAULT_FETCH_DEADLINE,
        }
    }
}

impl Watch {
    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(Cancel::is_cancelled)
    }

    /// Runs `f` (a request: connect, send, read the head) on a thread of
    /// its own, waiting for it no longer than the cancel flag allows, nor
    /// past `deadline`.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        url: &str,
        deadline: Duration,
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let started = Instant::now();
        if self.cancelled() {
            return Err(cancelled(op, url));
        }
        let (tx, rx) = mpsc::sync_channel(1);
        spawn(url, move || {
            let _gone = tx.send(f());
        })?;
        loop {
            match rx.recv_timeout(TICK) {
                Ok(r) => return r,
                Err(RecvTimeoutError::Timeout) if self.cancelled() => {
                    return Err(cancelled(op, url));
                }
                Err(RecvTimeoutError::Timeout)
                    if started.elapsed() >= deadline =>
                {
                    return Err(Error::Http {
                        op,
                        url: url.to_string(),
                        kind: Failure::Timeout,
                        why: format!(
                            "no answer within {} s",
                            deadline.as_secs()
                        ),
                    });
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Http {
                        op,
                        url: url.to_string(),
                        kind: Failure::Connection,
                        why: "the request's thread ended without an answer"
                            .into(),
                    });
                }
            }
        }
    }

    /// A body read on a thread of its own, chunk by chunk, for as long as
    /// it keeps above the stall floor (a blob, resumed when broken).
    pub(crate) fn body(
        &self,
        url: &str,
        reader: impl Read + Send + 'static,
    ) -> Result<Body> {
        self.body_until(url, reader, None)
    }

    /// [`body`](Watch::body), given up on at `until` too, when given.
    pub(crate) fn body_until(
        &self,
        url: &str,
        mut reader: impl Read + Send + 'static,
        until: Option<Instant>,
    ) -> Result<Body> {
        // Two chunks in flight at most: the reader waits for the writer.
        let (tx, rx) = mpsc::sync_channel::<io::Result<Vec<u8>>>(2);
        spawn(url, move || {
            loop {
                let mut buf = vec![0u8; CHUNK];
                let r = match reader.read(&mut buf) {
                    Ok(n) => {
                        buf.truncate(n);
                        Ok(buf)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        continue;
                    }
                    Err(e) => Err(e),
                };
                let end = !matches!(&r, Ok(b) if !b.is_empty());
                if tx.send(r).is_err() || end {
                    return;
                }
            }
        })?;
        Ok(Body {
            rx,
            watch: self.clone(),
            url: url.to_string(),
            window_start: Instant::now(),
            window_bytes: 0,
            until,
            deadline: self.deadline,
        })
    }
}

fn cancelled(op: &'static str, url: &str) -> Error {
    Error::Cancelled {
        op,
        url: url.to_string(),
    }
}

fn spawn(url: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    thread::Builder::new()
        .name("registry-io".into())
        .stack_size(256 << 10)
        .spawn(f)
        .map(drop)
        .map_err(|e| Error::Http {
            op: "GET",
            url: url.to_string(),
            kind: Failure::Connection,
            why: format!("cannot start a thread: {e}"),
        })
}

/// A body being received, checked against the cancel flag and the stall
/// rule between its chunks.
pub(crate) struct Body {
    rx: Receiver<io::Result<Vec<u8>>>,
    watch: Watch,
    url: String,
    window_start: Instant,
    window_bytes: u64,
    /// When the whole body must be in, if it has a deadline.
    until: Option<Instant>,
    /// The deadline it was given, for the message.
    deadline: Duration,
}

impl Body {
    /// The next chunk; an empty one at the end of the body.
    pub(crate) fn next(&mut self) -> Result<Vec<u8>> {
        loop {
            let got = self.rx.recv_timeout(TICK);
            if self.watch.cancelled() {
                return Err(cancelled("read", &self.url));
            }
            if self.until.is_some_and(|u| Instant::now() >= u) {
                return Err(Error::Http {
                    op: "read",
                    url: self.url.clone(),
                    kind: Failure::Timeout,
                    why: format!(
                        "not received whole within {} s, the deadline of \
                         one fetch",
                        self.deadline.as_secs()
                    ),
                });
            }
            match got {
                Ok(Ok(chunk)) => {
                    self.window_bytes += chunk.len() as u64;
                    self.check_rate()?;
                    return Ok(chunk);
                }
                Ok(Err(e)) => {
                    return Err(Error::Http {
                        op: "read",
                        url: self.url.clone(),
                        kind: Failure::of_io(&e),
                        why: e.to_string(),
                    });
                }
                Err(RecvTimeoutError::Timeout) => self.check_rate()?,
                Err(RecvTimeoutError::Disconnected) => {
                    return Ok(Vec::new());
                }
            }
        }
    }

    /// At the end of each window, whether it brought enough.
    fn check_rate(&mut self) -> Result<()> {
        let Stall { window, min_bytes } = self.watch.stall;
        if self.window_start.elapsed() < window {
            return Ok(());
        }
        if self.window_bytes < min_bytes {
            return Err(Error::Http {
                op: "read",
                url: self.url.clone(),
                kind: Failure::Stalled,
                why: format!(
                    "stalled: {} bytes in {:.0} s, fewer than the {min_bytes} \
                     a transfer must bring in that time",
                    self.window_bytes,
                    window.as_secs_f64()
                ),
            });
        }
        self.window_start = Instant::now();
        self.window_bytes = 0;
        Ok(())
    }
}
