//! One directory guest customised: its steps applied beneath its root
//! through [`zinstall_engine::beneath`], never through a symlink the image
//! planted (a file at the last name is replaced by renaming a new one
//! over it; a symlink on the way to a directory is refused, naming it,
//! and the guest is then removed by the provision). The guest's own
//! `/etc/passwd` says whose a home and a key are.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use zinstall_core::foreign::{self, Follow, Kind};
use zinstall_engine::beneath::{Dir, Root};
use zinstall_engine::{Error as FsError, Op, Plan};

use super::firstboot;
use super::plan::{Customization, MAX_ACCOUNTS, Steps, account, refuse};
use super::run::{Ran, run_all};
use super::shadow;
use super::spec::{CopyIn, SshPublicKey, WriteFile};
use crate::error::ProvisionError;

/// The most of a file `--copy-in` reads whole (a directory is copied by
/// the engine, file by file, without a bound).
const MAX_COPY_IN: u64 = 1 << 30;

/// What one guest was given that its caller needs to know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Customized {
    /// The `random` passwords made, (user, password): told once.
    pub passwords: Vec<(String, String)>,
    /// What was noticed and accepted (a hashing method the guest names
    /// and this does not make).
    pub notices: Vec<String>,
    /// What its `--run` and `--run-command` did.
    pub ran: Ran,
}

/// What the line telling of a guest adds: its commands' log.
impl std::fmt::Display for Customized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.ran)
    }
}

/// Applies guest `n`'s steps to the directory guest at `root`; a raised
/// `cancel` stops a command it runs.
pub(crate) fn apply(
    c: &Customization,
    root: &Path,
    n: usize,
    tunables: zinstall_engine::Tunables,
    cancel: Option<&zinstall_engine::Cancel>,
) -> Result<Customized, ProvisionError> {
    let st: &Steps = c.steps(n);
    let r = Root::open(root)?;
    let mut done = Customized::default();
    for ci in &st.copy_in {
        copy_in(&r, ci, tunables)?;
    }
    for f in &st.copy_in_sent {
        let rel = f.remote_dir.strip_prefix("/").unwrap_or(&f.remote_dir);
        r.dir(rel, Some(0o755))?
            .replace_file(&f.name, &f.content, f.mode, None)?;
    }
    for w in &st.writes {
        write(&r, w)?;
    }
    if let Some(tz) = &st.timezone {
        timezone(&r, tz)?;
    }
    if !st.passwords.is_empty() {
        let etc = r.dir(Path::new("etc"), None)?;
        let set =
            etc.keeping_times(|| shadow::set_passwords(&etc, &st.passwords))?;
        done.passwords = set.random;
        done.notices.extend(set.notice);
    }
    for (user, keys) in &st.keys {
        inject(&r, user, keys)?;
    }
    firstboot::install(&r, &st.firstboot_scripts())?;
    // Last, as virt-customize's --run after the files it wrote: the
    // commands see the guest as customised.
    done.ran = run_all(&st.run, root, c.run_timeout, cancel)?;
    Ok(done)
}

/// `p` (absolute in the guest) as its parent, relative, and its name.
fn split(p: &Path) -> (PathBuf, String) {
    let rel = p.strip_prefix("/").unwrap_or(p);
    let parent = rel.parent().unwrap_or(Path::new("")).to_path_buf();
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (parent, name)
}

/// The mode and owner of the file `name` in `dir`, to keep when
/// replacing it; `default` and this process's otherwise.
pub(crate) fn kept(
    dir: &Dir,
    name: &str,
    default: u32,
) -> zinstall_engine::Result<(u32, Option<(u32, u32)>)> {
    Ok(match dir.stat(name)? {
        Some(f) if f.is_file() => (f.mode, Some((f.uid, f.gid))),
        _ => (default, None),
    })
}

/// `--write FILE:CONTENT`: the file's whole content, its mode and owner
/// kept when it was there (0644 when new); missing directories made.
fn write(r: &Root, w: &WriteFile) -> Result<(), ProvisionError> {
    let (parent, name) = split(&w.path);
    if name.is_empty() {
        return Err(refuse(
            "--write",
            &w.path.to_string_lossy(),
            r.path().join(&parent),
            "names a directory, not a file",
        ));
    }
    let dir = r.dir(&parent, Some(0o755))?;
    let (mode, owner) = kept(&dir, &name, 0o644)?;
    dir.replace_file(&name, w.content.as_bytes(), mode, owner)?;
    Ok(())
}

/// `--copy-in LOCALPATH:REMOTEDIR`: a file read through
/// [`zinstall_core::foreign`] and written into REMOTEDIR (made if
/// missing), or a directory copied there whole by the copy engine,
/// beneath the guest's root.
fn copy_in(
    r: &Root,
    ci: &CopyIn,
    tunables: zinstall_engine::Tunables,
) -> Result<(), ProvisionError> {
    let rel = ci.remote_dir.strip_prefix("/").unwrap_or(&ci.remote_dir);
    let dir = r.dir(rel, Some(0o755))?;
    let base = ci
        .local
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The caller's own path, as named (a link to a directory allowed).
    #[allow(clippy::disallowed_methods)]
    let is_dir = std::fs::metadata(&ci.local).is_ok_and(|m| m.is_dir());
    if is_dir {
        let dst = r.path().join(rel).join(&base);
        Plan::new(&ci.local, &dst)
            .within_root(r.clone())
            .tunables(tunables)
            .merge(true)
            .run()?;
        return Ok(());
    }
    let kind = Kind::Other {
        what: "a file to copy in",
        cap: MAX_COPY_IN,
    };
    let refused = |e: foreign::Error| {
        refuse(
            "--copy-in",
            &ci.local.to_string_lossy(),
            &ci.local,
            e.to_string(),
        )
    };
    let f = foreign::open(&ci.local, Follow::Yes).map_err(refused)?;
    let mode = f
        .metadata()
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))
        .unwrap_or(0o644)
        & 0o7777;
    let bytes = foreign::read_file(&f, &ci.local, kind).map_err(refused)?;
    dir.replace_file(&base, &bytes, mode, None)?;
    Ok(())
}

/// `--timezone TZ`: `/etc/localtime` a symlink to
/// `../usr/share/zoneinfo/TZ`, and `/etc/timezone` where the guest is
/// Debian-like (has `/etc/debian_version` or an `/etc/timezone`).
fn timezone(r: &Root, tz: &str) -> Result<(), ProvisionError> {
    let zone = Path::new("usr/share/zoneinfo").join(tz);
    let (parent, name) = split(&zone);
    let there = r.dir(&parent, None)?.stat(&name)?;
    if there.is_none_or(|f| f.format == libc::S_IFDIR) {
        return Err(refuse(
            "--timezone",
            tz,
            r.path().join(&zone),
            "the guest has no such zoneinfo file",
        ));
    }
    let etc = r.dir(Path::new("etc"), Some(0o755))?;
    etc.keeping_times(|| -> Result<(), ProvisionError> {
        firstboot::link(&etc, "localtime", &format!("../{}", zone.display()))?;
        let debian = etc.stat("debian_version")?.is_some()
            || etc.stat("timezone")?.is_some();
        if debian {
            let (mode, owner) = kept(&etc, "timezone", 0o644)?;
            etc.replace_file(
                "timezone",
                format!("{tz}\n").as_bytes(),
                mode,
                owner,
            )?;
        }
        Ok(())
    })
}

/// `--ssh-inject`: `keys` appended (each once) to
/// `~USER/.ssh/authorized_keys`, the home as the guest's `/etc/passwd`
/// names it; `.ssh` 0700 and the file 0600, both the user's. A symlink
/// on the way (`.ssh` planted as a link) is refused, naming it.
fn inject(
    r: &Root,
    user: &str,
    keys: &[SshPublicKey],
) -> Result<(), ProvisionError> {
    let etc = r.dir(Path::new("etc"), None)?;
    let passwd =
        String::from_utf8_lossy(&etc.read_file("passwd", MAX_ACCOUNTS)?)
            .into_owned();
    let a = account(&passwd, user).ok_or_else(|| {
        refuse(
            "--ssh-inject",
            user,
            etc.path().join("passwd"),
            format!("the guest has no user {user}"),
        )
    })?;
    let home = Path::new(a.home.trim_start_matches('/'));
    if home.as_os_str().is_empty() {
        return Err(refuse(
            "--ssh-inject",
            user,
            etc.path().join("passwd"),
            format!(
                "{user}'s home is {:?}: give the user a home first",
                a.home
            ),
        ));
    }
    // Only root gives a file away; anyone else's guests are all theirs
    // (their cache entry was unpacked without owners).
    let owner = (crate::sys::effective_ids().0 == 0).then_some((a.uid, a.gid));
    let home_dir = r.dir(home, Some(0o755))?;
    let ssh = r.dir(&home.join(".ssh"), Some(0o700))?;
    let dot = CString::new(".ssh").map_err(|_| {
        FsError::io(Op::Chown, ssh.path(), std::io::Error::other("name"))
    })?;
    // Reached without a symlink just now, and still a directory: set
    // through its parent with calls that do not follow a symlink there.
    if home_dir
        .stat(".ssh")?
        .is_none_or(|f| f.format != libc::S_IFDIR)
    {
        return Err(FsError::Beneath {
            path: ssh.path().to_path_buf(),
            at: ssh.path().to_path_buf(),
            met: zinstall_engine::Met::Symlink,
        }
        .into());
    }
    crate::sys::set_owner_mode(home_dir.as_fd(), &dot, owner, 0o700)
        .map_err(|e| FsError::io(Op::Chown, ssh.path(), e))?;
    let mut text = match ssh.stat("authorized_keys")? {
        Some(f) if f.is_file() => String::from_utf8_lossy(
            &ssh.read_file("authorized_keys", MAX_ACCOUNTS)?,
        )
        .into_owned(),
        _ => String::new(),
    };
    let have: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some(format!("{} {}", w.next()?, w.next()?))
        })
        .collect();
    for k in keys {
        if have.contains(&format!("{} {}", k.kind, k.body)) {
            continue;
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&k.line());
        text.push('\n');
    }
    ssh.replace_file("authorized_keys", text.as_bytes(), 0o600, owner)?;
    Ok(())
}
