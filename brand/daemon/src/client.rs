//! A client of the daemon: sends one request, follows its job, returns
//! its result.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::protocol::{ProgressInfo, Reply, Request, WireError};

/// The environment variable naming the daemon's socket for the CLI.
pub const DAEMON_ENV: &str = "ZINSTALL_DAEMON";

/// Why a call did not return a result.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("{}: connect: {source}", path.display())]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The connection failed midway.
    #[error("{}: {source}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The daemon sent something that is not a reply.
    #[error("{}: unreadable reply: {why}", path.display())]
    Protocol {
        /// The socket.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
    /// The daemon refused the request, or the job failed.
    #[error("{0}")]
    Remote(WireError),
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
        let s = UnixStream::connect(path).map_err(|source| {
            ClientError::Connect {
                path: path.into(),
                source,
            }
        })?;
        let input = s.try_clone().map_err(|source| ClientError::Connect {
            path: path.into(),
            source,
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

    fn io(&self, source: io::Error) -> ClientError {
        ClientError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Sends `request` and reads replies until its result: `progress`
    /// hears of a job's progress, `event` of its events.
    pub fn call(
        &mut self,
        request: &Request,
        progress: &mut dyn FnMut(&ProgressInfo),
        event: &mut dyn FnMut(&str),
    ) -> Result<Value, ClientError> {
        let mut line = request.to_line();
        line.push('\n');
        self.out
            .write_all(line.as_bytes())
            .map_err(|e| self.io(e))?;
        self.job = None;
        loop {
            let mut buf = String::new();
            let n = self.input.read_line(&mut buf).map_err(|e| self.io(e))?;
            if n == 0 {
                return Err(self.io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the daemon closed the connection",
                )));
            }
            let reply: Reply =
                serde_json::from_str(buf.trim_end()).map_err(|e| {
                    ClientError::Protocol {
                        path: self.path.clone(),
                        why: e.to_string(),
                    }
                })?;
            match reply {
                Reply::Ok { result, .. } | Reply::Done { result, .. } => {
                    return Ok(result);
                }
                Reply::Error { error, .. } => {
                    return Err(ClientError::Remote(error));
                }
                Reply::Accepted { job, .. } => self.job = Some(job),
                Reply::Progress { progress: p, .. } => progress(&p),
                Reply::Event { message, .. } => event(&message),
            }
        }
    }
}
