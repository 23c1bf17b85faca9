//! A client of the daemon: sends one request, follows its job, returns
//! its result.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, IgnoredAny};

use crate::protocol::{
    Outcome, ProgressInfo, ReadResult, Reply, Request, WireError,
};

/// The environment variable naming the daemon's socket for the CLI.
pub const DAEMON_ENV: &str = "ZINSTALL_DAEMON";

/// Why a call did not return a result.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("{}: connect: {error}{}", path.display(), start_hint(error))]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The connection failed midway.
    #[error("{}: {error}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The daemon sent something that is not a reply.
    #[error("{}: unreadable reply: {why}", path.display())]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
    /// The daemon's result is not what this client reads for the call:
    /// a field missing, renamed or of another type (a daemon of another
    /// version).
    #[error("zinstalld's reply to {op} is not one this zinstall reads: {why}")]
    Result {
        /// The socket.
        path: PathBuf,
        /// The operation asked for.
        op: &'static str,
        /// What was wrong.
        why: String,
    },
    /// The daemon refused the request, or the job failed.
    #[error("{0}")]
    Remote(WireError),
}

/// What to do when no daemon answers at the socket.
fn start_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            if cfg!(target_os = "linux") {
                " (is zinstalld running? start it with `systemctl enable \
                 --now zinstalld.socket`, or run zinstalld; see zinstalld(8))"
            } else {
                " (is zinstalld running? start it with `svcadm enable \
                 zinstalld`, or run zinstalld; see zinstalld(8))"
            }
        }
        _ => "",
    }
}

/// A connection to the daemon.
pub struct Client {
    path: PathBuf,
    out: UnixStream,
    input: BufReader<UnixStream>,
    job: Option<u64>,
}

impl Client {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|error| {
            ClientError::Connect {
                path: path.into(),
                error,
            }
        })?;
        let input = s.try_clone().map_err(|error| ClientError::Connect {
            path: path.into(),
            error,
        })?;
        Ok(Client {
            path: path.into(),
            out: s,
            input: BufReader::new(input),
            job: None,
        })
    }

    /// The id of the job the last call started, once accepted.
    pub fn job(&self) -> Option<u64> {
        self.job
    }

    fn io(&self, error: io::Error) -> ClientError {
        ClientError::Io {
            path: self.path.clone(),
            error,
        }
    }

    /// The next reply line, its result (if it has one) read as a `T`: a
    /// line that is not a reply is a protocol error, a result that is not
    /// a `T` an error naming the operation `op`.
    fn read_reply<T: DeserializeOwned>(
        &mut self,
        op: &'static str,
    ) -> Result<Reply<T, T>, ClientError> {
        let mut buf = String::new();
        let n = self.input.read_line(&mut buf).map_err(|e| self.io(e))?;
        if n == 0 {
            return Err(self.io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "zinstalld closed the connection",
            )));
        }
        let line = buf.trim_end();
        // The reply first, its result only checked for JSON, so that a
        // result of another shape is told apart from a broken line.
        serde_json::from_str::<Reply<IgnoredAny, IgnoredAny>>(line).map_err(
            |e| ClientError::Protocol {
                path: self.path.clone(),
                why: e.to_string(),
            },
        )?;
        serde_json::from_str(line).map_err(|e| ClientError::Result {
            path: self.path.clone(),
            op,
            why: e.to_string(),
        })
    }

    /// Sends `request` and reads replies until its result, read as the
    /// type its call returns: `progress` hears of a job's progress,
    /// `event` of its events.
    pub fn call(
        &mut self,
        request: &Request,
        progress: &mut dyn FnMut(&ProgressInfo),
        event: &mut dyn FnMut(&str),
    ) -> Result<Outcome, ClientError> {
        self.send(request)?;
        Outcome::read(
            &request.call,
            &mut Follow {
                client: self,
                op: request.call.name(),
                progress,
                event,
            },
        )
    }

    /// [`Client::call`] for a caller that knows the type its call
    /// returns (`CopyReply` for a copy, …: the types of
    /// [`crate::protocol::JobResult`] and [`crate::protocol::Answer`]).
    pub fn call_as<T: DeserializeOwned>(
        &mut self,
        request: &Request,
        progress: &mut dyn FnMut(&ProgressInfo),
        event: &mut dyn FnMut(&str),
    ) -> Result<T, ClientError> {
        self.send(request)?;
        Follow {
            client: self,
            op: request.call.name(),
            progress,
            event,
        }
        .read()
    }

    /// Sends `request`.
    fn send(&mut self, request: &Request) -> Result<(), ClientError> {
        let mut line = request.to_line();
        line.push('\n');
        if let Err(e) = self.out.write_all(line.as_bytes()) {
            // A busy daemon says so and closes at once: its reply is
            // there to read, and says more than the broken pipe.
            return match self.read_reply::<IgnoredAny>(request.call.name()) {
                Ok(Reply::Error { error, .. }) => {
                    Err(ClientError::Remote(error))
                }
                _ => Err(self.io(e)),
            };
        }
        self.job = None;
        Ok(())
    }
}

/// A call's replies followed to its result.
struct Follow<'a> {
    client: &'a mut Client,
    op: &'static str,
    progress: &'a mut dyn FnMut(&ProgressInfo),
    event: &'a mut dyn FnMut(&str),
}

impl ReadResult for Follow<'_> {
    type Error = ClientError;

    fn read<T: DeserializeOwned>(&mut self) -> Result<T, ClientError> {
        loop {
            match self.client.read_reply(self.op)? {
                Reply::Ok { result, .. } | Reply::Done { result, .. } => {
                    return Ok(result);
                }
                Reply::Error { error, .. } => {
                    return Err(ClientError::Remote(error));
                }
                Reply::Accepted { job, .. } => self.client.job = Some(job),
                Reply::Progress { progress: p, .. } => (self.progress)(&p),
                Reply::Event { message, .. } => (self.event)(&message),
            }
        }
    }
}
