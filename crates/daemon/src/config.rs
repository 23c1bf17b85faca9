//! `/etc/zinstall/zinstalld.toml`: where the daemon listens, its worker
//! budget, its cache, and what callers other than root may do.
//!
//! ```toml
//! socket = "/run/zinstall/zinstalld.sock"
//! socket_mode = "0660"
//! socket_group = "zinstall"
//! # copy_threads = 8          # default: COPY_THREADS of /etc/default/zinstall
//! # copy_walkers = 2          # default: COPY_WALKERS of /etc/default/zinstall
//! cache = "/var/cache/zinstall"
//! # insecure_registries = ["registry.lab:5000"]   # plain HTTP
//!
//! [[grant]]
//! groups = ["zinstall"]
//! operations = ["copy", "jobs", "status", "cancel", "cache-list"]
//! prefixes = ["/srv/build"]
//! ```
//!
//! A grant gives the users and groups it names the operations it lists
//! on paths under its prefixes. Only `copy` of the jobs can be granted:
//! a granted copy runs in a process that is the caller (see
//! [`crate::process`]), so it reads and writes only what the caller
//! could. Installs, uninstalls, provisions and cache collection act
//! on zone roots and the shared cache as root, and stay root's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use zinstall_core::foreign;

use crate::protocol::{Call, CleanPath};
use crate::sys;

/// Where the configuration is read from unless `--config` says.
pub const DEFAULT_CONFIG: &str = zinstall_core::paths::DAEMON_CONFIG;
/// Where the daemon listens unless configured: `/run` on Linux, and
/// `/var/run` on illumos, which has no `/run`.
pub const DEFAULT_SOCKET: &str = zinstall_core::paths::DAEMON_SOCKET;
/// The cache's default place, as the CLI's.
pub const DEFAULT_CACHE: &str = zinstall_core::paths::CACHE;
/// The default install profile, as the CLI's.
pub const DEFAULT_PROFILE: &str = zinstall_core::paths::PROFILE;
/// The defaults file the worker budget comes from, as the CLI's.
pub const DEFAULT_DEFAULTS: &str = zinstall_core::paths::DEFAULTS_FILE;

/// Operations a grant may name for a caller other than root.
pub const GRANTABLE: &[&str] =
    &["version", "copy", "cache-list", "jobs", "status", "cancel"];

/// The daemon's configuration, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The socket's path.
    pub socket: PathBuf,
    /// Its mode.
    pub socket_mode: u32,
    /// Its group, if not root's.
    pub socket_group: Option<u32>,
    /// The worker budget; `None`: the defaults file's COPY_THREADS.
    pub copy_threads: Option<usize>,
    /// The walker budget; `None`: the defaults file's COPY_WALKERS.
    pub copy_walkers: Option<usize>,
    /// The defaults file (COPY_THREADS, COPY_BATCH, COPY_BUFSIZE).
    pub defaults: PathBuf,
    /// The image cache.
    pub cache: PathBuf,
    /// The install profile used when a request names none.
    pub profile: PathBuf,
    /// Connections served at once to callers other than root; more are
    /// told the daemon is busy. Root's are never refused.
    pub max_connections: usize,
    /// Connections one uid other than root may hold at once, so that no
    /// user can take every place.
    pub max_connections_per_uid: usize,
    /// Jobs running at once, in each of two lanes: root's, and every
    /// other caller's together; more wait their turn (`queued`), root's
    /// never behind another user's.
    pub max_jobs: usize,
    /// Jobs one uid other than root may have running and queued at once;
    /// past it a request is told the daemon is busy, so that no user can
    /// fill the queue.
    pub max_jobs_per_uid: usize,
    /// How long a client may take to send a whole request line (from the
    /// moment the daemon waits for it to its newline, however it drips),
    /// and how long a reply may wait for a client that does not read.
    pub io_timeout: Duration,
    /// Finished jobs kept for `jobs` and `status`, per uid: one user's
    /// failures never push out another's records.
    pub keep_finished: usize,
    /// How long a granted job's process may go without progress (no
    /// entry and no byte done) while it holds workers before it is
    /// killed and failed ("stopped making progress"), its share of the
    /// workers given to the others.
    pub job_stall: Duration,
    /// How long a manifest, a token or a signature may take to arrive
    /// whole (request included), however steadily it comes.
    pub fetch_deadline: Duration,
    /// Refusals (bad requests, denials, busy) logged per uid in each
    /// [`Config::refusal_log_window`]; more are counted and summed up in
    /// one line when the window ends, so that no caller fills the log.
    pub refusal_log_burst: usize,
    /// The window [`Config::refusal_log_burst`] counts in.
    pub refusal_log_window: Duration,
    /// Registries (`HOST[:PORT]`) pulled from over plain HTTP, besides
    /// those on the loopback: the daemon's to decide, not a caller's.
    pub insecure_registries: Vec<String>,
    /// The trust policy (containers-policy.json(5)) every image the
    /// daemon pulls must satisfy, for every caller; `None`: the system's
    /// (as podman finds it). No request relaxes it.
    pub policy: Option<PathBuf>,
    /// Where signatures are looked for (containers-registries.d(5));
    /// `None`: the system's.
    pub registries_d: Option<PathBuf>,
    /// What callers other than root may do.
    pub grants: Vec<Grant>,
}

/// Operations and path prefixes granted to some users and groups.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// Users, by uid.
    pub users: BTreeSet<u32>,
    /// Groups, by gid.
    pub groups: BTreeSet<u32>,
    /// Operation names ([`GRANTABLE`]).
    pub operations: BTreeSet<String>,
    /// Absolute, normalized directories under which paths are allowed.
    pub prefixes: Vec<PathBuf>,
}

/// A user or group named by number or by name.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum Id {
    Number(u32),
    Name(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    socket: Option<PathBuf>,
    socket_mode: Option<String>,
    socket_group: Option<Id>,
    copy_threads: Option<usize>,
    copy_walkers: Option<usize>,
    defaults: Option<PathBuf>,
    cache: Option<PathBuf>,
    profile: Option<PathBuf>,
    max_connections: Option<usize>,
    max_connections_per_uid: Option<usize>,
    max_jobs: Option<usize>,
    max_jobs_per_uid: Option<usize>,
    io_timeout_secs: Option<u64>,
    keep_finished: Option<usize>,
    job_stall_secs: Option<u64>,
    fetch_deadline_secs: Option<u64>,
    refusal_log_burst: Option<usize>,
    refusal_log_window_secs: Option<u64>,
    #[serde(default)]
    insecure_registries: Vec<String>,
    policy: Option<PathBuf>,
    #[serde(rename = "registries_d")]
    registries_d: Option<PathBuf>,
    #[serde(default)]
    grant: Vec<RawGrant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    #[serde(default)]
    users: Vec<Id>,
    #[serde(default)]
    groups: Vec<Id>,
    operations: Vec<String>,
    #[serde(default)]
    prefixes: Vec<PathBuf>,
}

/// A configuration that cannot be used: the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read: missing, not a regular file, or
    /// larger than a configuration may be.
    #[error(transparent)]
    Read(foreign::Error),
    /// The file is not TOML, or not of the types the daemon reads: where
    /// and why, with the line.
    #[error("{0}")]
    Syntax(zinstall_engine::Syntax),
    /// The file is not what the daemon reads.
    #[error("{}: {why}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: Invalid,
    },
}

/// What is wrong with a configuration's settings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Invalid {
    /// The text is not TOML, or not of the types the daemon reads.
    #[error("{0}")]
    Toml(toml::de::Error),
    /// `socket_mode` is not an octal permission mode.
    #[error("socket_mode {0:?} is not an octal mode like \"0660\"")]
    SocketMode(String),
    /// A number outside what the key takes.
    #[error("{key} {value} is not between {lo} and {hi}")]
    OutOfRange {
        /// The key.
        key: &'static str,
        /// Its value.
        value: usize,
        /// The least it may be.
        lo: usize,
        /// The most it may be.
        hi: usize,
    },
    /// A path that is relative or has `.` or `..` in it.
    #[error("{key}: {} is not an absolute path without . or ..", path.display())]
    NotAbsolute {
        /// The key (or `grant N`).
        key: String,
        /// The path.
        path: PathBuf,
    },
    /// A user name the system does not know.
    #[error("{at}: no user named {name:?}")]
    NoUser {
        /// Where it was named (`grant N`).
        at: String,
        /// The name.
        name: String,
    },
    /// A group name the system does not know.
    #[error("{at}: no group named {name:?}")]
    NoGroup {
        /// Where it was named (`socket_group`, `grant N`).
        at: String,
        /// The name.
        name: String,
    },
    /// A grant for nobody.
    #[error("{at}: names no users and no groups")]
    GrantsNobody {
        /// The grant (`grant N`).
        at: String,
    },
    /// A grant of an operation the daemon does not have.
    #[error("{at}: unknown operation {op:?} (known: {})", Call::NAMES.join(", "))]
    UnknownOperation {
        /// The grant.
        at: String,
        /// The operation.
        op: String,
    },
    /// A grant of an operation only root may ask for.
    #[error(
        "{at}: {op} acts as root on zone roots or the shared cache and \
         cannot be granted (grantable: {})",
        GRANTABLE.join(", ")
    )]
    NotGrantable {
        /// The grant.
        at: String,
        /// The operation.
        op: String,
    },
    /// A grant of `copy` with nowhere to copy.
    #[error("{at}: grants copy but no prefixes")]
    CopyWithoutPrefixes {
        /// The grant.
        at: String,
    },
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: DEFAULT_SOCKET.into(),
            socket_mode: 0o660,
            socket_group: None,
            copy_threads: None,
            copy_walkers: None,
            defaults: DEFAULT_DEFAULTS.into(),
            cache: DEFAULT_CACHE.into(),
            profile: DEFAULT_PROFILE.into(),
            max_connections: 1024,
            max_connections_per_uid: 32,
            max_jobs: 16,
            max_jobs_per_uid: 4,
            io_timeout: Duration::from_secs(10),
            keep_finished: 100,
            job_stall: Duration::from_secs(60),
            fetch_deadline: zinstall_registry::DEFAULT_FETCH_DEADLINE,
            refusal_log_burst: 5,
            refusal_log_window: Duration::from_secs(10),
            insecure_registries: Vec::new(),
            policy: None,
            registries_d: None,
            grants: Vec::new(),
        }
    }
}

impl Config {
    /// Reads `path`; a missing file is the defaults only when `required`
    /// is false (the system's file may be absent; one named by `--config`
    /// must exist).
    pub fn load(path: &Path, required: bool) -> Result<Config, ConfigError> {
        // The administrator's file, maybe a link to the real one: what
        // it leads to is checked and read within a configuration's cap.
        let text = match foreign::read_to_string(
            path,
            foreign::Follow::Yes,
            foreign::Kind::Config,
        ) {
            Ok(t) => t,
            Err(e) if e.is_not_found() && !required => {
                return Ok(Config::default());
            }
            Err(e) => return Err(ConfigError::Read(e)),
        };
        let raw = toml::from_str(&text).map_err(|e| {
            ConfigError::Syntax(zinstall_engine::Syntax::at(
                path,
                &text,
                e.span(),
                e.message(),
            ))
        })?;
        Config::from_raw(raw).map_err(|why| ConfigError::Invalid {
            path: path.into(),
            why,
        })
    }

    /// Parses a configuration's text.
    pub fn parse(text: &str) -> Result<Config, Invalid> {
        Config::from_raw(toml::from_str(text).map_err(Invalid::Toml)?)
    }

    fn from_raw(mut raw: Raw) -> Result<Config, Invalid> {
        let mut c = Config::default();
        c.service_from(&mut raw)?;
        c.limits_from(&mut raw)?;
        c.insecure_registries = raw.insecure_registries;
        if let Some(p) = raw.policy {
            c.policy = Some(absolute("policy", p)?);
        }
        if let Some(p) = raw.registries_d {
            c.registries_d = Some(absolute("registries_d", p)?);
        }
        if let Some(n) = raw.keep_finished {
            c.keep_finished = bounded("keep_finished", n, 0, 100_000)?;
        }
        for (i, g) in raw.grant.into_iter().enumerate() {
            c.grants.push(grant(i, g)?);
        }
        Ok(c)
    }

    /// The socket, the copy pool and the files the service reads.
    fn service_from(&mut self, raw: &mut Raw) -> Result<(), Invalid> {
        if let Some(s) = raw.socket.take() {
            self.socket = absolute("socket", s)?;
        }
        if let Some(m) = raw.socket_mode.take() {
            self.socket_mode = u32::from_str_radix(&m, 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| Invalid::SocketMode(m.clone()))?;
        }
        if let Some(g) = raw.socket_group.take() {
            self.socket_group = Some(gid("socket_group", &g)?);
        }
        if let Some(n) = raw.copy_threads.take() {
            self.copy_threads = Some(bounded("copy_threads", n, 1, 1024)?);
        }
        if let Some(n) = raw.copy_walkers.take() {
            self.copy_walkers = Some(bounded("copy_walkers", n, 0, 256)?);
        }
        if let Some(p) = raw.defaults.take() {
            self.defaults = absolute("defaults", p)?;
        }
        if let Some(p) = raw.cache.take() {
            self.cache = absolute("cache", p)?;
        }
        if let Some(p) = raw.profile.take() {
            self.profile = absolute("profile", p)?;
        }
        Ok(())
    }

    /// The bounds on connections, jobs, time and refusal logging.
    fn limits_from(&mut self, raw: &mut Raw) -> Result<(), Invalid> {
        if let Some(n) = raw.max_connections.take() {
            self.max_connections = bounded("max_connections", n, 1, 65536)?;
        }
        if let Some(n) = raw.max_connections_per_uid.take() {
            self.max_connections_per_uid =
                bounded("max_connections_per_uid", n, 1, 65536)?;
        }
        if let Some(n) = raw.max_jobs.take() {
            self.max_jobs = bounded("max_jobs", n, 1, 4096)?;
        }
        if let Some(n) = raw.max_jobs_per_uid.take() {
            self.max_jobs_per_uid = bounded("max_jobs_per_uid", n, 1, 4096)?;
        }
        if let Some(n) = raw.io_timeout_secs.take() {
            self.io_timeout = Duration::from_secs(bounded(
                "io_timeout_secs",
                n as usize,
                1,
                3600,
            )? as u64);
        }
        if let Some(n) = raw.job_stall_secs.take() {
            self.job_stall = Duration::from_secs(bounded(
                "job_stall_secs",
                n as usize,
                1,
                86400,
            )? as u64);
        }
        if let Some(n) = raw.fetch_deadline_secs.take() {
            self.fetch_deadline = Duration::from_secs(bounded(
                "fetch_deadline_secs",
                n as usize,
                1,
                86400,
            )? as u64);
        }
        if let Some(n) = raw.refusal_log_burst.take() {
            self.refusal_log_burst =
                bounded("refusal_log_burst", n, 0, 10_000)?;
        }
        if let Some(n) = raw.refusal_log_window_secs.take() {
            self.refusal_log_window = Duration::from_secs(bounded(
                "refusal_log_window_secs",
                n as usize,
                1,
                3600,
            )?
                as u64);
        }
        Ok(())
    }
}

/// The `i`th (0-based) `[[grant]]` table, checked.
fn grant(i: usize, g: RawGrant) -> Result<Grant, Invalid> {
    let at = format!("grant {}", i + 1);
    let mut grant = Grant {
        users: BTreeSet::new(),
        groups: BTreeSet::new(),
        operations: BTreeSet::new(),
        prefixes: Vec::new(),
    };
    for u in &g.users {
        grant.users.insert(uid(&at, u)?);
    }
    for gr in &g.groups {
        grant.groups.insert(gid(&at, gr)?);
    }
    if grant.users.is_empty() && grant.groups.is_empty() {
        return Err(Invalid::GrantsNobody { at });
    }
    for op in g.operations {
        if !Call::NAMES.contains(&op.as_str()) {
            return Err(Invalid::UnknownOperation { at, op });
        }
        if !GRANTABLE.contains(&op.as_str()) {
            return Err(Invalid::NotGrantable { at, op });
        }
        grant.operations.insert(op);
    }
    for p in g.prefixes {
        grant.prefixes.push(absolute(&at, p)?);
    }
    if grant.operations.contains("copy") && grant.prefixes.is_empty() {
        return Err(Invalid::CopyWithoutPrefixes { at });
    }
    Ok(grant)
}

fn bounded(
    key: &'static str,
    n: usize,
    lo: usize,
    hi: usize,
) -> Result<usize, Invalid> {
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(Invalid::OutOfRange {
            key,
            value: n,
            lo,
            hi,
        })
    }
}

fn absolute(key: &str, p: PathBuf) -> Result<PathBuf, Invalid> {
    match CleanPath::new(p) {
        Ok(p) => Ok(p.into()),
        Err(e) => Err(Invalid::NotAbsolute {
            key: key.into(),
            path: e.0,
        }),
    }
}

fn uid(at: &str, id: &Id) -> Result<u32, Invalid> {
    match id {
        Id::Number(n) => Ok(*n),
        Id::Name(n) => sys::user_id(n).ok_or_else(|| Invalid::NoUser {
            at: at.into(),
            name: n.clone(),
        }),
    }
}

fn gid(at: &str, id: &Id) -> Result<u32, Invalid> {
    match id {
        Id::Number(n) => Ok(*n),
        Id::Name(n) => sys::group_id(n).ok_or_else(|| Invalid::NoGroup {
            at: at.into(),
            name: n.clone(),
        }),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn the_shipped_example_is_the_defaults_and_its_grant_parses() {
        let text = include_str!("../../../etc/zinstall/zinstalld.toml");
        assert_eq!(Config::parse(text).unwrap(), Config::default());
        // Uncommented, every key is accepted (the group by number here:
        // a test machine may have no group "zinstall").
        let on: String = text
            .lines()
            .map(|l| {
                l.strip_prefix('#')
                    .filter(|r| !r.starts_with(' ') && !r.is_empty())
                    .unwrap_or(l)
            })
            .map(|l| l.replace("\"zinstall\"", "0"))
            .collect::<Vec<_>>()
            .join("\n");
        let c = Config::parse(&on).unwrap();
        assert_eq!(c.grants.len(), 1);
        assert_eq!(c.socket_group, Some(0));
    }

    #[test]
    fn grants_are_checked() {
        let c = Config::parse(
            r#"
socket_mode = "0600"
copy_threads = 3
copy_walkers = 4
[[grant]]
users = [1000, "root"]
groups = [65534]
operations = ["copy", "jobs"]
prefixes = ["/srv//build/"]
"#,
        )
        .unwrap();
        assert_eq!(c.socket_mode, 0o600);
        assert_eq!(c.copy_threads, Some(3));
        assert_eq!(c.copy_walkers, Some(4));
        let g = &c.grants[0];
        assert!(g.users.contains(&1000) && g.users.contains(&0));
        assert_eq!(g.prefixes, [PathBuf::from("/srv/build")]);
        for (text, says) in [
            ("sockt = \"/x\"", "unknown field `sockt`"),
            ("socket_mode = \"rw\"", "not an octal mode"),
            ("socket = \"run/x\"", "not an absolute path"),
            ("copy_threads = 0", "not between 1"),
            ("copy_walkers = 257", "not between 0 and 256"),
            (
                "[[grant]]\nusers=[1]\noperations=[\"install\"]",
                "cannot be granted",
            ),
            (
                "[[grant]]\nusers=[1]\noperations=[\"rm\"]",
                "unknown operation",
            ),
            ("[[grant]]\noperations=[\"jobs\"]", "names no users"),
            ("[[grant]]\nusers=[1]\noperations=[\"copy\"]", "no prefixes"),
            (
                "[[grant]]\nusers=[1]\noperations=[\"copy\"]\nprefixes=[\"/a/../b\"]",
                "without . or ..",
            ),
            (
                "[[grant]]\nusers=[\"no-such-user-here\"]\noperations=[\"jobs\"]",
                "no user named",
            ),
        ] {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn paths_are_normalized_or_refused() {
        let n = |s: &str| CleanPath::new(s).ok().map(PathBuf::from);
        assert_eq!(n("/a//b/"), Some("/a/b".into()));
        assert_eq!(n("/"), Some("/".into()));
        for bad in ["a/b", "/a/./b", "/a/../b", "/..", ""] {
            assert_eq!(n(bad), None, "{bad}");
        }
    }
}
