//! The customisation options made into what each guest is given: their
//! values expanded (`{n}`, `{name}`), parsed by [`super::spec`], and the
//! files they name on this host read, all before the first guest is
//! made; then checked against the image's own tree (its users, its
//! zoneinfo), still before any guest.

use std::path::{Path, PathBuf};
use std::time::Duration;

use zinstall_core::foreign::{self, Follow, Kind};
use zinstall_engine::beneath::Root;

use super::run::{self, Run};
use super::spec::{
    CopyIn, KeySource, Password, RunStep, SpecError, SshInject, SshPublicKey,
    UserPassword, WriteFile, script_name,
};
use crate::error::ProvisionError;
use crate::options::CustomizeOptions;

/// The most of a guest's account file read (`/etc/passwd`,
/// `/etc/shadow`, `/etc/login.defs`).
pub(crate) const MAX_ACCOUNTS: u64 = 16 << 20;

/// The most of a first-boot script read.
const MAX_SCRIPT: u64 = 16 << 20;

/// A password as one guest gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Secret {
    /// This password, hashed in the guest's method.
    Given(String),
    /// A new one, made for the guest and told to the caller.
    Random,
    /// No password login: `*`.
    Disabled,
}

/// One account's new password: whose, which, and whether the account is
/// locked (`!` before the hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewPassword {
    /// `--root-password` or `--password`, for messages.
    pub option: &'static str,
    /// The user.
    pub user: String,
    /// The password.
    pub secret: Secret,
    /// `locked:`.
    pub locked: bool,
}

/// What one guest is given, in the order it is applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Steps {
    /// `--copy-in`, each local path known to exist.
    pub copy_in: Vec<CopyIn>,
    /// `--write`.
    pub writes: Vec<WriteFile>,
    /// `--timezone`.
    pub timezone: Option<String>,
    /// `--root-password`, `--password`.
    pub passwords: Vec<NewPassword>,
    /// `--ssh-inject`: each user's keys.
    pub keys: Vec<(String, Vec<SshPublicKey>)>,
    /// `--copy-in` of a file whose contents were sent (zinstalld's).
    pub copy_in_sent: Vec<SentCopy>,
    /// `--firstboot`: a name and the script.
    pub firstboot: Vec<(String, Vec<u8>)>,
    /// `--firstboot-command`: run after the scripts.
    pub firstboot_commands: Vec<String>,
    /// `--run`, `--run-command`, in order: run in the guest, last.
    pub run: Vec<Run>,
}

impl Steps {
    /// The first-boot scripts in the order they run: `--firstboot`'s,
    /// then each `--firstboot-command` as a script.
    pub(crate) fn firstboot_scripts(&self) -> Vec<(String, Vec<u8>)> {
        let commands = self.firstboot_commands.iter().map(|c| {
            (
                "command".to_string(),
                format!("#!/bin/sh\n{c}\n").into_bytes(),
            )
        });
        self.firstboot.iter().cloned().chain(commands).collect()
    }
}

/// A file whose contents came with the request, to be written into a
/// guest's directory as `--copy-in` writes a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SentCopy {
    /// Its name: one component.
    pub name: String,
    /// The guest's directory, absolute.
    pub remote_dir: PathBuf,
    /// Its permission bits.
    pub mode: u32,
    /// Its bytes.
    pub content: Vec<u8>,
}

/// Every guest's steps: one set for all, or one per guest when a value
/// names the guest (`{n}`, `{name}`).
#[derive(Clone, Debug)]
pub(crate) struct Customization {
    steps: Vec<Steps>,
    /// `--run-timeout`: how long each `--run` may take.
    pub run_timeout: Duration,
}

impl Customization {
    /// The plan of `steps`: one set for all guests, or one per guest.
    pub(crate) fn new(steps: Vec<Steps>, run_timeout: Duration) -> Self {
        Customization { steps, run_timeout }
    }

    /// Every set of steps, in guest order.
    pub(crate) fn all(&self) -> &[Steps] {
        &self.steps
    }

    /// Guest `n`'s steps.
    pub(crate) fn steps(&self, n: usize) -> &Steps {
        self.steps.get(n).unwrap_or(&self.steps[0])
    }
}

/// A [`SpecError`] as the provision's error.
fn spec(e: SpecError) -> ProvisionError {
    ProvisionError::Customize {
        option: e.option,
        value: e.value,
        path: PathBuf::new(),
        why: e.why,
    }
}

/// A refusal of `option`'s `value` about `path`.
pub(crate) fn refuse(
    option: &'static str,
    value: &str,
    path: impl Into<PathBuf>,
    why: impl Into<String>,
) -> ProvisionError {
    ProvisionError::Customize {
        option,
        value: value.to_string(),
        path: path.into(),
        why: why.into(),
    }
}

/// Checks the options and reads what they name for `count` guests named
/// `name-N`: `None` when nothing is asked.
pub(crate) fn prepare(
    opts: &CustomizeOptions,
    count: usize,
    name: &str,
) -> Result<Option<Customization>, ProvisionError> {
    if opts.is_empty() {
        return Ok(None);
    }
    let names_guest = |s: &str| s.contains("{n}") || s.contains("{name}");
    let per_guest = opts
        .ssh_inject
        .iter()
        .chain(&opts.password)
        .chain(&opts.firstboot_command)
        .chain(&opts.write)
        .chain(&opts.copy_in)
        .chain(&opts.root_password)
        .chain(&opts.timezone)
        .any(|s| names_guest(s))
        || opts
            .firstboot
            .iter()
            .any(|p| names_guest(&p.to_string_lossy()))
        || opts.run.iter().any(|r| names_guest(&r.shown()));
    let guests = if per_guest { count.max(1) } else { 1 };
    let steps = (0..guests)
        .map(|n| steps_for(opts, n, &format!("{name}-{n}")))
        .collect::<Result<_, _>>()?;
    let secs = opts
        .run_timeout
        .unwrap_or(crate::options::DEFAULT_RUN_TIMEOUT);
    Ok(Some(Customization::new(steps, Duration::from_secs(secs))))
}

/// Guest `n`'s steps, every value parsed and every file read.
fn steps_for(
    o: &CustomizeOptions,
    n: usize,
    name: &str,
) -> Result<Steps, ProvisionError> {
    let x = |s: &str| crate::options::for_guest(s, n, name);
    let mut st = Steps::default();
    copy_ins(&mut st, o, &x)?;
    for w in &o.write {
        st.writes.push(x(w).parse().map_err(spec)?);
    }
    if let Some(tz) = &o.timezone {
        st.timezone = Some(timezone(&x(tz))?);
    }
    passwords(&mut st, o, &x)?;
    for k in &o.ssh_inject {
        let v = x(k);
        let s: SshInject = v.parse().map_err(spec)?;
        let keys = match s.key {
            KeySource::String(k) => vec![k],
            KeySource::File(p) => key_file(&v, &p)?,
        };
        st.keys.push((s.user, keys));
    }
    firstboot_scripts(&mut st, o, &x)?;
    for c in &o.firstboot_command {
        st.firstboot_commands.push(x(c));
    }
    for r in &o.run {
        let r = match r {
            RunStep::Script(p) => {
                RunStep::Script(x(&p.to_string_lossy()).into())
            }
            RunStep::Command(c) => RunStep::Command(x(c)),
        };
        st.run.push(run::read(&r)?);
    }
    Ok(st)
}

/// `--copy-in`s, `x` expanding the guest's `{n}` and `{name}`, each
/// local path checked to be there.
fn copy_ins(
    st: &mut Steps,
    o: &CustomizeOptions,
    x: &dyn Fn(&str) -> String,
) -> Result<(), ProvisionError> {
    for c in &o.copy_in {
        let c: CopyIn = x(c).parse().map_err(spec)?;
        // The caller's own path, followed as a shell would.
        #[allow(clippy::disallowed_methods)]
        let there = std::fs::metadata(&c.local);
        if let Err(e) = there {
            return Err(refuse(
                "--copy-in",
                &x(&c.local.to_string_lossy()),
                &c.local,
                format!("{e}: give a file or directory on this host"),
            ));
        }
        st.copy_in.push(c);
    }
    Ok(())
}

/// `--root-password`, then each `--password`, `x` expanding the
/// guest's `{n}` and `{name}`.
fn passwords(
    st: &mut Steps,
    o: &CustomizeOptions,
    x: &dyn Fn(&str) -> String,
) -> Result<(), ProvisionError> {
    if let Some(p) = &o.root_password {
        let v = x(p);
        let p: Password = v.parse().map_err(spec)?;
        st.passwords
            .push(new_password("--root-password", &v, "root", p)?);
    }
    for p in &o.password {
        let v = x(p);
        let up: UserPassword = v.parse().map_err(spec)?;
        st.passwords.push(new_password(
            "--password",
            &v,
            &up.user,
            up.password,
        )?);
    }
    Ok(())
}

/// Each `--firstboot` script, read from this host, `x` expanding the
/// guest's `{n}` and `{name}` in its path.
fn firstboot_scripts(
    st: &mut Steps,
    o: &CustomizeOptions,
    x: &dyn Fn(&str) -> String,
) -> Result<(), ProvisionError> {
    for f in &o.firstboot {
        let p = PathBuf::from(x(&f.to_string_lossy()));
        let script = foreign::read(
            &p,
            Follow::Yes,
            Kind::Other {
                what: "a first-boot script",
                cap: MAX_SCRIPT,
            },
        )
        .map_err(|e| {
            refuse(
                "--firstboot",
                &p.to_string_lossy(),
                &p,
                format!("{e}: give a script on this host"),
            )
        })?;
        let base = p
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        st.firstboot.push((script_name(&base), script));
    }
    Ok(())
}

/// `--timezone`'s name, as tzdata spells them (`Europe/Berlin`, `UTC`,
/// `Etc/GMT+1`): nothing that leads out of `/usr/share/zoneinfo`.
pub(crate) fn timezone(tz: &str) -> Result<String, ProvisionError> {
    let ok = !tz.is_empty()
        && tz.len() <= 255
        && !tz.starts_with('/')
        && tz
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && tz
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/_+-".contains(c));
    if ok {
        Ok(tz.to_string())
    } else {
        Err(refuse(
            "--timezone",
            tz,
            "",
            "not a time zone name: give one as /usr/share/zoneinfo names \
             it, e.g. Europe/Berlin or UTC",
        ))
    }
}

/// A password selector made into what the guest gets; a password file
/// is read now (refused if empty or readable by others).
fn new_password(
    option: &'static str,
    value: &str,
    user: &str,
    p: Password,
) -> Result<NewPassword, ProvisionError> {
    let (p, locked) = match p {
        Password::Locked(inner) => (*inner, true),
        p => (p, false),
    };
    let secret = match p {
        Password::Plain(s) => Secret::Given(s),
        Password::Random => Secret::Random,
        Password::Disabled => Secret::Disabled,
        Password::File(f) => Secret::Given(password_file(option, value, &f)?),
        // Parsing refuses a lock inside a lock.
        Password::Locked(_) => Secret::Disabled,
    };
    Ok(NewPassword {
        option,
        user: user.to_string(),
        secret,
        locked,
    })
}

/// The first line of the password file `f`, which must be a regular
/// file nobody but its owner and group may read, and not empty.
fn password_file(
    option: &'static str,
    value: &str,
    f: &Path,
) -> Result<String, ProvisionError> {
    use std::os::unix::fs::PermissionsExt;
    let bad = |why: String| refuse(option, value, f, why);
    let file = foreign::open(f, Follow::Yes)
        .map_err(|e| bad(format!("{e}: give a password file")))?;
    let mode = file
        .metadata()
        .map_err(|e| bad(format!("stat: {e}")))?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        return Err(bad(format!(
            "mode {:04o}: anyone may read this password; chmod o-r it \
             (0600 or 0640)",
            mode & 0o7777
        )));
    }
    let bytes = foreign::read_file(&file, f, Kind::Secret)
        .map_err(|e| bad(e.to_string()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    let line = text.lines().next().unwrap_or_default();
    if line.is_empty() {
        return Err(bad("empty: the password is the file's first line".into()));
    }
    Ok(line.to_string())
}

/// The keys of a public key file: every line that is not blank or a
/// `#` comment, each an SSH public key.
fn key_file(
    value: &str,
    f: &Path,
) -> Result<Vec<SshPublicKey>, ProvisionError> {
    const OPT: &str = "--ssh-inject";
    let text = foreign::read_to_string(f, Follow::Yes, Kind::Key)
        .map_err(|e| refuse(OPT, value, f, e.to_string()))?;
    let keys = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            SshPublicKey::parse(l)
                .map_err(|why| refuse(OPT, value, f, why.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(refuse(OPT, value, f, "holds no key: give a .pub file"));
    }
    Ok(keys)
}

/// One line of an `/etc/passwd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Account {
    /// Its user id.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Its home directory, as the file names it.
    pub home: String,
}

/// The account `user` in the text of an `/etc/passwd`.
pub(crate) fn account(passwd: &str, user: &str) -> Option<Account> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 7 || f[0] != user {
            return None;
        }
        Some(Account {
            uid: f[2].parse().ok()?,
            gid: f[3].parse().ok()?,
            home: f[5].to_string(),
        })
    })
}

/// Checks the steps against the image's tree at `tree` (the cache
/// entry, read only): every user named is in its `/etc/passwd` (and, for
/// a password, its `/etc/shadow`), every time zone in its zoneinfo.
pub(crate) fn check_tree(
    c: &Customization,
    tree: &Path,
) -> Result<(), ProvisionError> {
    let root = Root::open(tree)?;
    let mut image = ImageFiles {
        root: &root,
        tree,
        passwd: None,
        shadow: None,
    };
    if c.steps.iter().any(|st| !st.run.is_empty()) {
        run::check_shell(&root, tree)?;
    }
    for st in &c.steps {
        image.check_users(st)?;
        image.check_shadow(st)?;
        if let Some(tz) = &st.timezone {
            image.check_timezone(tz)?;
        }
    }
    Ok(())
}

/// The image's files the steps are checked against, each read once,
/// however many guests' steps name users.
struct ImageFiles<'a> {
    root: &'a Root,
    tree: &'a Path,
    passwd: Option<String>,
    shadow: Option<String>,
}

impl ImageFiles<'_> {
    /// The file at `rel` in the image, read beneath its root.
    fn read(&self, rel: &str) -> Result<String, ProvisionError> {
        let p = Path::new(rel);
        let dir = self.root.dir(p.parent().unwrap_or(Path::new("")), None)?;
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        let bytes = dir.read_file(&name, MAX_ACCOUNTS)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Every user `st` names (by a password or keys) is in the image's
    /// `/etc/passwd`.
    fn check_users(&mut self, st: &Steps) -> Result<(), ProvisionError> {
        let tree = self.tree;
        let users = st
            .passwords
            .iter()
            .map(|p| (p.option, p.user.as_str()))
            .chain(st.keys.iter().map(|(u, _)| ("--ssh-inject", u.as_str())));
        for (option, user) in users {
            if self.passwd.is_none() {
                self.passwd = Some(self.read("etc/passwd").map_err(|e| {
                    refuse(
                        option,
                        user,
                        tree.join("etc/passwd"),
                        format!(
                            "the image has no /etc/passwd to find {user} \
                             in: {e}"
                        ),
                    )
                })?);
            }
            let text = self.passwd.as_deref().unwrap_or_default();
            if account(text, user).is_none() {
                return Err(refuse(
                    option,
                    user,
                    tree.join("etc/passwd"),
                    format!(
                        "the image has no user {user}: name one its \
                         /etc/passwd has"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Every user `st` sets a password of is in the image's
    /// `/etc/shadow`.
    fn check_shadow(&mut self, st: &Steps) -> Result<(), ProvisionError> {
        let tree = self.tree;
        if let Some(p) = st.passwords.first()
            && self.shadow.is_none()
        {
            self.shadow = Some(self.read("etc/shadow").map_err(|e| {
                refuse(
                    p.option,
                    &p.user,
                    tree.join("etc/shadow"),
                    format!("the image has no /etc/shadow to set it in: {e}"),
                )
            })?);
        }
        if let Some(shadow) = &self.shadow {
            for p in &st.passwords {
                let has = shadow
                    .lines()
                    .any(|l| l.split(':').next() == Some(p.user.as_str()));
                if !has {
                    return Err(refuse(
                        p.option,
                        &p.user,
                        tree.join("etc/shadow"),
                        format!("the image's /etc/shadow has no {}", p.user),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The time zone `tz` is a zoneinfo file in the image.
    fn check_timezone(&self, tz: &str) -> Result<(), ProvisionError> {
        let rel = Path::new("usr/share/zoneinfo").join(tz);
        let there = self
            .root
            .dir(rel.parent().unwrap_or(Path::new("")), None)
            .and_then(|d| {
                d.stat(&rel.file_name().unwrap_or_default().to_string_lossy())
            });
        if !matches!(there, Ok(Some(f)) if f.format != libc::S_IFDIR) {
            return Err(refuse(
                "--timezone",
                tz,
                self.tree.join(&rel),
                "the image has no such zoneinfo file: install its \
                 tzdata, or name a zone it has",
            ));
        }
        Ok(())
    }
}

/// Adds the options of a `--customize` FILE (virt-builder's
/// `--commands-from-file`: `OPTION VALUE` or `OPTION:VALUE` one a line,
/// `#` comments, blank lines) to `into`.
pub fn read_commands(
    file: &Path,
    into: &mut CustomizeOptions,
) -> Result<(), ProvisionError> {
    const OPT: &str = "--customize";
    let shown = file.to_string_lossy();
    let text = foreign::read_to_string(file, Follow::Yes, Kind::Config)
        .map_err(|e| refuse(OPT, &shown, file, e.to_string()))?;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = line.find([' ', '\t', ':']).unwrap_or(line.len());
        let (option, value) = line.split_at(at);
        let value = value.get(1..).unwrap_or_default().trim_start();
        let bad = |why: String| {
            refuse(OPT, &shown, file, format!("line {}: {why}", i + 1))
        };
        if value.is_empty() {
            return Err(bad(format!("{option} without its value")));
        }
        let once = |slot: &mut Option<String>| {
            if slot.is_some() {
                return Err(bad(format!("{option} is given twice")));
            }
            *slot = Some(value.to_string());
            Ok(())
        };
        match option {
            "ssh-inject" => into.ssh_inject.push(value.into()),
            "password" => into.password.push(value.into()),
            "firstboot" => into.firstboot.push(value.into()),
            "firstboot-command" => into.firstboot_command.push(value.into()),
            "write" => into.write.push(value.into()),
            "copy-in" => into.copy_in.push(value.into()),
            "root-password" => once(&mut into.root_password)?,
            "timezone" => once(&mut into.timezone)?,
            "run" => into.run.push(RunStep::Script(value.into())),
            "run-command" => into.run.push(RunStep::Command(value.into())),
            _ => {
                return Err(bad(format!(
                    "{option:?} is not an option a --customize file takes \
                     (ssh-inject, root-password, password, firstboot, \
                     firstboot-command, write, copy-in, timezone, run, \
                     run-command)"
                )));
            }
        }
    }
    Ok(())
}
