//! Where zinstall's files live unless a flag, a variable or a
//! configuration names another place. The engine takes every path from
//! its caller; the system's places are kept here, once, for the command
//! line, the brand hook, the install library, provisioning and the
//! daemon alike.

/// The system-wide defaults file (defopen(3C) format) that the command
/// line, the brand hook and the daemon read the engine's tunables from.
pub const DEFAULTS_FILE: &str = "/etc/default/zinstall";

/// The environment variable naming another defaults file than
/// [`DEFAULTS_FILE`] (`/dev/null`: none, the built-in defaults).
pub const DEFAULTS_ENV: &str = "ZINSTALL_DEFAULTS";

/// The system's install profile.
pub const PROFILE: &str = "/etc/zinstall/profile.toml";

/// The install log, unless the profile names another: in a directory of
/// root's alone (made when missing), so that nobody else can plant a
/// link or a file where root appends.
pub const INSTALL_LOG: &str = "/var/log/zinstall/install.log";

/// The provisioning cache (built images, pulled layers), unless the
/// caller names another place.
pub const CACHE: &str = "/var/cache/zinstall";

/// The daemon's configuration, unless `--config` names another.
pub const DAEMON_CONFIG: &str = "/etc/zinstall/zinstalld.toml";

/// Where the daemon listens unless configured: `/run` on Linux, and
/// `/var/run` on illumos, which has no `/run`.
#[cfg(not(target_os = "illumos"))]
pub const DAEMON_SOCKET: &str = "/run/zinstall/zinstalld.sock";
/// Where the daemon listens unless configured: `/run` on Linux, and
/// `/var/run` on illumos, which has no `/run`.
#[cfg(target_os = "illumos")]
pub const DAEMON_SOCKET: &str = "/var/run/zinstall/zinstalld.sock";
