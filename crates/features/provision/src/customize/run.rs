//! `--run SCRIPT` and `--run-command CMD` in a directory guest, as
//! virt-customize(1) runs them, without an appliance: each runs with the
//! guest as its `/`, in namespaces of its own (`zinstall_sys::process::
//! run_in_root`: a private mount table, PID 1 of its own PIDs, no
//! network, a fresh `/proc`, `/sys` read-only, a small `/dev`, `/tmp` a
//! tmpfs), with this process's limits and a fixed environment. What each
//! writes goes to the guest's log, `OUT/NAME-N.run.log`; one that fails
//! or runs past its timeout fails the guest.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use zinstall_core::foreign::{self, Follow, Kind};
use zinstall_engine::beneath::{Dir, Root};

use super::spec::RunStep;
use crate::error::ProvisionError;
use crate::sys::{InRoot, RunEnd, readlink, run_in_root};

/// The most of a `--run` script read.
const MAX_SCRIPT: u64 = 16 << 20;

/// How many symlinks are followed finding the guest's `/bin/sh`, as
/// the kernel's own bound (`ELOOP`).
const MAX_LINKS: u32 = 40;

/// One `--run` or `--run-command`, its script read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// The option and its value, as typed, for the log and messages.
    pub shown: String,
    /// `--run`'s script, handed to the guest's `/bin/sh`; `None`: a
    /// command for `/bin/sh -c`.
    pub script: Option<Vec<u8>>,
    /// `--run-command`'s command.
    pub command: String,
    /// `--run`'s script's name, without its directory (what a client
    /// sends of it).
    pub name: String,
}

/// A step made ready: a script read (through `foreign`: a regular file,
/// within a bound), refused naming it if it is not there or not a file.
pub(crate) fn read(step: &RunStep) -> Result<Run, ProvisionError> {
    here(&step.shown())?;
    Ok(match step {
        RunStep::Command(c) => Run {
            shown: step.shown(),
            script: None,
            command: c.clone(),
            name: String::new(),
        },
        RunStep::Script(p) => {
            let what = Kind::Other {
                what: "a --run script",
                cap: MAX_SCRIPT,
            };
            let script = foreign::read(p, Follow::Yes, what).map_err(|e| {
                ProvisionError::Customize {
                    option: "--run",
                    value: p.to_string_lossy().into_owned(),
                    path: p.clone(),
                    why: format!("{e}: give a script on this host"),
                }
            })?;
            let base = p.file_name().unwrap_or_default().to_string_lossy();
            Run {
                shown: step.shown(),
                script: Some(script),
                command: String::new(),
                name: super::spec::script_name(&base),
            }
        }
    })
}

/// A `--run` script as a client sent it: its name (for the log and
/// messages) and contents, already read.
pub(crate) fn sent_script(
    name: &str,
    script: Vec<u8>,
) -> Result<Run, ProvisionError> {
    let shown = format!("--run {name:?}");
    here(&shown)?;
    Ok(Run {
        shown,
        script: Some(script),
        command: String::new(),
        name: name.to_string(),
    })
}

/// Refuses `shown` where commands cannot run in a guest: they need
/// Linux's namespaces.
fn here(shown: &str) -> Result<(), ProvisionError> {
    if cfg!(target_os = "linux") {
        return Ok(());
    }
    Err(ProvisionError::Customize {
        option: "--run, --run-command",
        value: shown.to_string(),
        path: PathBuf::new(),
        why: "running a command inside a directory guest needs Linux's \
              mount, PID and network namespaces; on illumos give it with \
              --firstboot-command, run at the zone's first boot"
            .into(),
    })
}

/// Refuses an image whose tree (the cache entry at `tree`, read only)
/// has no `/bin/sh` to run the commands with: it is looked for as the
/// guest would find it, symlinks followed within the tree.
pub(crate) fn check_shell(
    root: &Root,
    tree: &Path,
) -> Result<(), ProvisionError> {
    let found = find_in_tree(root, "bin/sh")?;
    if found.is_some_and(|f| f.is_file() && f.mode & 0o111 != 0) {
        return Ok(());
    }
    Err(ProvisionError::Customize {
        option: "--run, --run-command",
        value: "/bin/sh".into(),
        path: tree.join("bin/sh"),
        why: "the image has no /bin/sh (an executable file, symlinks \
              followed within the image) to run the commands with: give \
              an image with a shell, or leave --run and --run-command out"
            .into(),
    })
}

/// What is at `rel` in the tree `root`, each symlink on the way followed
/// as if the tree were `/` (an absolute target starts again at its top,
/// `..` stops there); `None` if nothing, or a loop.
fn find_in_tree(
    root: &Root,
    rel: &str,
) -> Result<Option<zinstall_engine::beneath::Found>, ProvisionError> {
    let mut todo: Vec<String> =
        rel.split('/').rev().map(str::to_string).collect();
    let mut at: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        match name.as_str() {
            "" | "." => continue,
            ".." => {
                at.pop();
                continue;
            }
            _ => {}
        }
        let dir: Dir = if at.is_empty() {
            root.top()
        } else {
            root.dir(Path::new(&at.join("/")), None)?
        };
        let Some(f) = dir.stat(&name)? else {
            return Ok(None);
        };
        if f.format == libc::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Ok(None);
            }
            let Ok(c) = CString::new(name.as_bytes()) else {
                return Ok(None);
            };
            let target =
                readlink(dir.as_fd().as_raw_fd(), &c).map_err(|e| {
                    zinstall_engine::Error::io(
                        zinstall_engine::Op::Stat,
                        dir.path().join(&name),
                        e,
                    )
                })?;
            let target = String::from_utf8_lossy(&target).into_owned();
            if target.starts_with('/') {
                at.clear();
            }
            todo.extend(target.split('/').rev().map(str::to_string));
        } else if todo.is_empty() {
            return Ok(Some(f));
        } else if f.format == libc::S_IFDIR {
            at.push(name);
        } else {
            return Ok(None);
        }
    }
    Ok(None)
}

/// What a guest's commands did: how many ran, and where their output is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ran {
    /// How many ran (each exited 0).
    pub count: usize,
    /// The guest's log: `OUT/NAME-N.run.log`.
    pub log: Option<PathBuf>,
}

impl fmt::Display for Ran {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.log {
            Some(log) => write!(
                f,
                "; ran {} command{}, output in {}",
                self.count,
                if self.count == 1 { "" } else { "s" },
                log.display()
            ),
            None => Ok(()),
        }
    }
}

/// The log beside the guest at `guest`: `NAME-N.run.log`.
pub(crate) fn log_path(guest: &Path) -> PathBuf {
    let name = guest.file_name().unwrap_or(OsStr::new("guest"));
    let mut log = name.to_os_string();
    log.push(".run.log");
    guest.with_file_name(log)
}

/// Runs `runs` in order in the directory guest at `guest`, each for at
/// most `timeout`; the first that does not exit 0 fails the guest,
/// naming it, its end and the log.
pub(crate) fn run_all(
    runs: &[Run],
    guest: &Path,
    timeout: Duration,
    cancel: Option<&zinstall_engine::Cancel>,
) -> Result<Ran, ProvisionError> {
    if runs.is_empty() {
        return Ok(Ran::default());
    }
    let log_at = log_path(guest);
    let fail = |step: &str, end: String| ProvisionError::Run {
        guest: guest.to_path_buf(),
        step: step.to_string(),
        end,
        log: log_at.clone(),
    };
    let is_cancelled = || cancel.is_some_and(|c| c.is_cancelled());
    let mut log = open_log(&log_at)
        .map_err(|e| fail(&runs[0].shown, format!("could not start: {e}")))?;
    for r in runs {
        let note = |log: &mut std::fs::File, text: &str| {
            log.write_all(text.as_bytes())
                .map_err(|e| fail(&r.shown, format!("could not log: {e}")))
        };
        note(&mut log, &format!("## {}\n", r.shown))?;
        let argv: Vec<&OsStr> = match &r.script {
            Some(_) => vec![OsStr::new("/bin/sh"), OsStr::new("/dev/fd/3")],
            None => vec![
                OsStr::new("/bin/sh"),
                OsStr::new("-c"),
                OsStr::new(&r.command),
            ],
        };
        let end = run_in_root(&InRoot {
            root: guest,
            argv: &argv,
            script: r.script.as_deref(),
            output: log.as_fd(),
            timeout,
            cancelled: cancel.is_some().then_some(&is_cancelled),
        })
        .map_err(|e| fail(&r.shown, format!("could not be started: {e}")))?;
        note(&mut log, &format!("## {end}\n"))?;
        match end {
            RunEnd::Exited(0) => {}
            // Stopped as every cancelled step of a provision is: the
            // guests made are removed by the caller.
            RunEnd::Cancelled => {
                return Err(ProvisionError::Fs(
                    zinstall_engine::Error::Cancelled {
                        path: guest.to_path_buf(),
                    },
                ));
            }
            RunEnd::TimedOut => {
                return Err(fail(
                    &r.shown,
                    format!(
                        "ran past --run-timeout ({} s) and was killed, with \
                         every process it started",
                        timeout.as_secs()
                    ),
                ));
            }
            end => return Err(fail(&r.shown, end.to_string())),
        }
    }
    Ok(Ran {
        count: runs.len(),
        log: Some(log_at),
    })
}

/// The guest's log, made anew (a symlink at its name is refused, not
/// followed), readable by its owner alone: commands may print secrets.
fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // zinstall's own file, made here beside the guest.
    #[allow(clippy::disallowed_methods)]
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}
