//! `--daemon[=SOCKET]`: the flag the commands zinstalld runs carry, and
//! the socket it names. Apart from `remote` so that the commands' argument
//! types can hold it without depending on the code that calls the daemon.

use std::path::PathBuf;

use zinstall_daemon::client::DAEMON_ENV;
use zinstall_daemon::config::DEFAULT_SOCKET;

/// `--daemon[=SOCKET]`, on the commands zinstalld runs (and only there,
/// so that no other command's help offers it).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DaemonArg {
    /// Have zinstalld run this, at its socket (default
    /// /run/zinstall/zinstalld.sock; also ZINSTALL_DAEMON), with the same
    /// output. The = is required: a socket written after a space is
    /// refused, saying to write --daemon=PATH.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true)]
    pub daemon: Option<Option<PathBuf>>,
}

/// The daemon's socket: `--daemon[=SOCKET]`, else `ZINSTALL_DAEMON`;
/// `None`: run in this process.
pub fn socket(flag: &Option<Option<PathBuf>>) -> Option<PathBuf> {
    match flag {
        Some(Some(p)) => Some(p.clone()),
        Some(None) => Some(DEFAULT_SOCKET.into()),
        None => std::env::var_os(DAEMON_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    }
}

/// The socket for `jobs` and `cancel`, which only the daemon answers.
pub fn socket_or_default(flag: &Option<Option<PathBuf>>) -> PathBuf {
    socket(flag).unwrap_or_else(|| DEFAULT_SOCKET.into())
}
